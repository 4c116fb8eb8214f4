#!/usr/bin/env python3
"""Seeded chaos: real `kill -9`s from outside the job, at moments no fault point chooses.

Each trial trains `tiny` on 8 ranks (4 groups of 2, or 4,2,2, or 3,3,2) in a federated configuration drawn over the
strategies and the relaxed-round options, waits until a drawn step is logged, sleeps a drawn delay and kills a drawn
rank (and, in some trials, another one a drawn delay later). The expected outcome comes from the declared option space
(`fedshard options --json`: in_job_recovery.not_when) and the MPI (`fedshard --version`: ULFM or not):
  - recovered in the job: exit 0, the lost groups named in group_lost lines (every killed rank's group, no other
    rank lost), every step logged once, the final validation and a summary;
  - not recovered (a declared exception, every group lost, or an MPI without ULFM): a non-zero exit, and under ULFM
    a `fedshard: error` line from every rank that was not killed;
  - a recoverable trial whose recovery stopped making progress: the failure watch's end (a non-zero exit, an
    error line from every rank that was not killed), counted; more than one in four of the recoverable trials
    ending so fails the test;
  - a second kill before the first loss was recovered (no group_lost line yet): recovered as above, or, where Open
    MPI's shrink or agreement stalled or crashed under the second loss (docs/robustness.md), a non-zero exit with an
    error line (or a "leave the job" line) from every rank that was not killed;
then `--resume auto` finishes the run (exit 0 and a summary) or refuses in one line. A trial that outlives its
timeout is a hang and fails the test. One line per trial: what was killed and when, where the survivors learned of
it (group_lost's `during`, a leaving rank's "seen in", or the error lines), the outcome.

Usage: chaos.py FEDSHARD_BINARY [--trials N] [--seed S] [--minutes M] [--steps N] [--keep DIR] [--table FILE]
(--minutes: trials until that much time has passed, for the soak; --table: append one JSON line per trial there.)
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Open MPI 5.0.11's mpirun sometimes fails to start its PMIx server ("listener thread failed to start", exit 213)
# before any rank runs, more often with other mpiruns starting beside it: the launcher's failure, so a job that
# ended so is launched again (twice at most), and the trial's line says so.
LAUNCHER_FAILED = "The PMIx server's listener thread failed to start"
TRIAL_TIMEOUT = 150  # seconds: a hang (the watch ends a stalled job in about 20 s; a healthy trial takes ~10 s)
LINGER = 15  # seconds mpirun may stay after its last rank ended before the trial ends it

# (name, strategy, layout args, extra --set options)
STRATEGIES = [("fl-fsdp", ["--strategy", "fl-fsdp", "--group-size", "2"]),
              ("fl-ddp", ["--strategy", "fl-ddp", "--group-size", "2"]),
              ("fl-hsdp", ["--strategy", "fl-hsdp", "--group-size", "2", "--set", "parallel.shard_size=1"])]
RELAXED = [("plain", {}),
           ("overlap=delayed", {"federation.overlap": "delayed"}),
           ("overlap=streaming:2", {"federation.overlap": "streaming:2"}),
           ("compress=int8", {"federation.compress": "int8"}),
           ("compress=topk:0.02", {"federation.compress": "topk:0.02"}),
           ("inner_state=average", {"federation.inner_state": "average"}),
           ("int8+delayed+average", {"federation.compress": "int8", "federation.overlap": "delayed",
                                     "federation.inner_state": "average"}),
           ("round=seconds:0.3", {"federation.round": "seconds:0.3"}),
           ("groups=4,2,2", {"parallel.groups": "4,2,2"}),
           ("groups=3,3,2", {"parallel.groups": "3,3,2"}),
           # Declared unrecovered (a real rank plays two groups' ranks), and emulated runs keep no checkpoints.
           ("emulate=8x2", {"parallel.emulate": "8x2", "checkpoint.every": "0"})]


def rule_holds(rule, cfg):
    """A declared in_job_recovery exception, on a configuration of this harness (strategy, set options)."""
    def cond(c):
        v = cfg.get(c["key"], {"federation.round": "steps", "federation.overlap": "none",
                               "federation.compress": "none", "federation.inner_state": "keep"}.get(c["key"], ""))
        return {"is": v in c["values"], "is not": v not in c["values"], "in": v in c["values"],
                "not in": v not in c["values"], "starts with": any(v.startswith(x) for x in c["values"]),
                "does not start with": not any(v.startswith(x) for x in c["values"])}[c["op"]]
    if not all(cond(c) for c in rule["all"]) or (rule["any"] and not any(cond(c) for c in rule["any"])):
        return False
    computed = {"": True, "parallel.emulate holds several groups or ranks per rank": bool(cfg.get("parallel.emulate")),
                "the backend (resolved at start-up) is nccl": False}
    if rule["computed"] not in computed:
        sys.exit(f"chaos: the declared rule {rule['name']!r} is computed from {rule['computed']!r}, which this "
                 "harness cannot evaluate: teach it")
    return computed[rule["computed"]]


def group_of(rank, sizes):
    for g, n in enumerate(sizes):
        if rank < n:
            return g
        rank -= n
    raise ValueError(rank)


def rank_pids(out):
    """World rank -> PID of the fedshard processes training into `out`."""
    pids = {}
    for d in glob.glob("/proc/[0-9]*"):
        try:
            cmd = open(d + "/cmdline", "rb").read().split(b"\0")
            if out.encode() not in cmd or not any(c.endswith(b"fedshard") for c in cmd):
                continue
            env = open(d + "/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        for e in env:
            if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                pids[int(e.split(b"=")[1])] = int(os.path.basename(d))
    return pids


def process_identity(pid):
    """'pid P: NAME, parent Q (its NAME)' from /proc, or what could be read."""
    def stat(p):
        text = open(f"/proc/{p}/stat").read()
        return text[text.index("(") + 1:text.rindex(")")], int(text[text.rindex(")") + 2:].split()[1])
    try:
        name, parent = stat(pid)
        return f"pid {pid}: {name}, parent {parent} ({stat(parent)[0]})"
    except (OSError, ValueError, IndexError):
        return f"pid {pid}"


def logged_steps(metrics):
    try:
        lines = [json.loads(l) for l in open(metrics) if l.strip()]
    except (OSError, ValueError):
        return []
    return lines


def rank_text(dir_, rank):
    return "".join(open(f, errors="replace").read() for f in glob.glob(f"{dir_}/*/rank.{rank}/std*"))


class Chaos:
    def __init__(self, a):
        self.a = a
        self.bin = os.path.realpath(a.binary)
        version = subprocess.run([self.bin, "--version"], capture_output=True, text=True).stdout
        self.ulfm = "with ULFM" in version
        self.mpi5 = "Open MPI v5" in version or "Open MPI v6" in version
        space = json.loads(subprocess.run([self.bin, "options", "--json"], capture_output=True, text=True,
                                          check=True).stdout)
        self.unrecovered = space["in_job_recovery"]["not_when"]
        self.tmp = a.keep or tempfile.mkdtemp(prefix="fedshard-chaos-")
        self.rng = random.Random(a.seed)
        self.failures = 0
        self.stalls = 0  # recoverable trials that the failure watch ended (recovery stalled)
        self.recoverable = 0  # trials with a kill in a recoverable configuration
        self.phases = set()

    def prepare(self):
        raw = os.path.join(self.tmp, "raw")
        for sub, names in (("gnu", ["GPL-3", "LGPL-2.1"]), ("other", ["Apache-2.0", "MPL-2.0"])):
            os.makedirs(os.path.join(raw, sub), exist_ok=True)
            for n in names:
                shutil.copy(f"/usr/share/common-licenses/{n}", os.path.join(raw, sub))
        self.corpus = os.path.join(self.tmp, "corpus")
        subprocess.run([self.bin, "prepare", "--input", raw, "--out", self.corpus, "--val-fraction", "0.5"],
                       check=True, stdout=subprocess.DEVNULL)

    def mpirun(self, ranks_dir):
        out = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "8"]
        if self.ulfm:
            out[1:1] = ["--with-ft", "ulfm"]
        out += (["--output", f"merge-stderr-to-stdout,dir={ranks_dir}"] if self.mpi5
                else ["--output-filename", f"{ranks_dir}:nocopy"])
        return out

    def train_args(self, strategy_args, sets, out):
        args = [self.bin, "train", "--model", "tiny", "--data", self.corpus, "--seq-len", "32", "--batch-size", "2",
                "--steps", str(self.a.steps), "--threads", "1", "--eval-every", "20", "--set", "eval.windows=4",
                "--sync-every", "4", "--checkpoint-every", "10", "--out", out] + strategy_args
        if "parallel.groups" in sets or "parallel.emulate" in sets:  # replaces --group-size
            i = args.index("--group-size")
            del args[i:i + 2]
        for k, v in sets.items():
            args += ["--set", f"{k}={v}"]
        return args

    def run_trial(self, i):
        sname, strategy_args = self.rng.choice(STRATEGIES)
        rname, sets = self.rng.choice(RELAXED)
        cfg = dict(sets)
        cfg["parallel.strategy"] = sname
        sizes = [int(n) for n in sets["parallel.groups"].split(",")] if "parallel.groups" in sets else [2, 2, 2, 2]
        kills = 1 if self.rng.random() < 0.5 else 2
        at_step = self.rng.randint(1, self.a.steps - 5)
        delays = [round(self.rng.uniform(0, 0.5), 2), round(self.rng.uniform(0, 1.0), 2)]
        victims = self.rng.sample(range(8), 2)[:kills]
        name = f"{sname} {rname}"
        out = os.path.join(self.tmp, f"t{i}")
        ranks = out + ".ranks"
        for p in (out, ranks):
            shutil.rmtree(p, ignore_errors=True)
        args = self.train_args(strategy_args, sets, out)
        t0 = time.monotonic()
        def launch():
            return subprocess.Popen(self.mpirun(ranks) + args, stdout=open(out + ".log", "w"),
                                    stderr=subprocess.STDOUT, start_new_session=True)
        job = launch()
        killed, notes, kill_time, identities, relaunched = [], [], None, {}, 0
        metrics = os.path.join(out, "metrics.jsonl")
        while time.monotonic() - t0 < TRIAL_TIMEOUT:
            if job.poll() is not None:
                if (relaunched < 2 and not logged_steps(metrics) and
                        LAUNCHER_FAILED in open(out + ".log", errors="replace").read()):
                    relaunched += 1
                    notes.append("mpirun's PMIx server did not start: launched again")
                    shutil.rmtree(ranks, ignore_errors=True)
                    job = launch()
                    continue
                break
            if any(l.get("type") == "step" and l["step"] >= at_step for l in logged_steps(metrics)):
                break
            time.sleep(0.05)
        during_recovery = False  # the second kill came before the first loss was recovered (its group_lost line)
        for k, (v, d) in enumerate(zip(victims, delays)):
            time.sleep(d)
            if k == 1 and killed:
                during_recovery = not any(l.get("type") == "group_lost" for l in logged_steps(metrics))
            pid = rank_pids(out).get(v)
            if job.poll() is not None:
                notes.append(f"rank {v}: not killed, the job had ended")
                continue
            if pid is None:
                notes.append(f"rank {v}: gone before its kill")
                continue
            try:
                # Who was hit, for a kill that seems not to take (a group trained on after its rank's kill, twice in
                # about 200 soak trials): the process's name and parent, read just before the signal.
                hit = process_identity(pid)
                os.kill(pid, signal.SIGKILL)
                killed.append(v)
                kill_time = kill_time or time.monotonic()
                identities[v] = hit
            except ProcessLookupError:
                notes.append(f"rank {v}: gone before its kill")
        kill_to_next = None  # seconds from the first kill to the first step line after a group_lost line
        # Open MPI 5.0.11's mpirun (prterun --with-ft ulfm) sometimes stays after every rank has ended (seen twice
        # in about 200 trials): LINGER seconds after the last rank is gone it is ended here and the ranks' own
        # outcome judged (the run's summary standing for mpirun's exit status).
        lingered, ranks_gone, checked = False, None, 0.0
        while job.poll() is None and time.monotonic() - t0 < TRIAL_TIMEOUT:
            if kill_time and kill_to_next is None:
                ls = logged_steps(metrics)
                k = next((n for n, l in enumerate(ls) if l.get("type") == "group_lost"), None)
                if k is not None and any(l.get("type") == "step" for l in ls[k:]):
                    kill_to_next = round(time.monotonic() - kill_time, 2)
            if kill_time and time.monotonic() - checked > 1:
                checked = time.monotonic()
                ranks_gone = None if rank_pids(out) else (ranks_gone or checked)
                if ranks_gone and checked - ranks_gone > LINGER:
                    lingered = True
                    break
            time.sleep(0.05)
        rc = job.poll()
        if lingered and rc is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            rc = 0 if any(l.get("type") == "summary" for l in logged_steps(metrics)) else 1
            notes.append(f"mpirun stayed {LINGER} s after every rank had ended")
        alive = sorted(rank_pids(out)) if rc is None else []  # for a hang's line: who was still there
        if rc is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        seconds = time.monotonic() - t0
        kill_to_exit = round(time.monotonic() - kill_time, 2) if kill_time else None
        lines = logged_steps(metrics)
        lost_groups = {group_of(v, sizes) for v in killed}
        declared = [r["name"] for r in self.unrecovered if rule_holds(r, cfg)]
        recoverable = self.ulfm and not declared and len(lost_groups) < len(sizes)
        self.recoverable += recoverable and bool(killed)
        problems = []
        # A loss while another was being recovered: "round, then recovery".
        seen = [d for l in lines if l.get("type") == "group_lost" for d in l.get("during", "?").split(", then ")]
        for r in range(8):
            text = rank_text(ranks, r)
            seen += re.findall(r"\(seen in: ([a-z ]+)\)", text)
        stalled = [r for r in range(8) if r not in killed and
                   re.search(r"^fedshard: error on rank .* no progress for \d+ s since: the recovery did not complete",
                             rank_text(ranks, r), re.M)]
        if rc is None:
            outcome = "HANG"
            problems.append(f"no end within {TRIAL_TIMEOUT} s (ranks still running: {alive or 'none, mpirun was'})")
        elif killed and self.after_the_end(lines):
            outcome = "killed after the end"
        elif not killed:  # the job ended before the kills (time-based rounds: each group at its own step)
            outcome = "not killed"
            if rc != 0 or not any(l.get("type") == "summary" for l in lines):
                problems.append(f"exit {rc} without a kill")
        elif recoverable and rc != 0 and stalled:
            # The recovery stopped making progress and the failure watch ended the job (docs/robustness.md: seen in
            # about 2% of single kills, cause not found): not a hang, every survivor says so; the test bounds how
            # often (main).
            outcome = "ended (recovery stalled)"
            self.stalls += 1
            silent = [r for r in range(8) if r not in killed and
                      not re.search(r"^fedshard: (error|rank \d+ of group \d+: lost)", rank_text(ranks, r), re.M)]
            if silent:
                problems.append(f"ranks {silent} ended without an error line")
        elif recoverable and during_recovery and rc != 0:
            # A second loss while the first is recovered may stall Open MPI 5.0.11's shrink or agreement, or crash it
            # (docs/robustness.md): the job must then end, every survivor with an error line.
            outcome = "ended (a loss during a recovery)"
            silent = [r for r in range(8) if r not in killed and
                      not re.search(r"^fedshard: (error|rank \d+ of group \d+: lost)", rank_text(ranks, r), re.M)]
            if silent:
                problems.append(f"ranks {silent} ended without an error line")
            seen += ["error: " + m for r in range(8) for m in
                     re.findall(r"^fedshard: error on rank \d+(?: of \d+)?: (lost rank\(s\)[^;:]*|crashed \([A-Z]+\))",
                                rank_text(ranks, r), re.M)][:1]
        elif recoverable:
            outcome = "recovered"
            steps = [l["step"] for l in lines if l.get("type") == "step"]
            lost = [l for l in lines if l.get("type") == "group_lost"]
            if rc != 0:
                problems.append(f"exit {rc}")
            # Time-based rounds: the step lines are the metrics writer's group's, which ends at its own step when
            # the first group reaches the last one; the final validation is of the tokens the summary counts (a
            # new writer whose group was behind the lost one's may end before the steps the lost one wrote).
            timed = sets.get("federation.round", "").startswith("seconds:")
            last = max(steps, default=0) if timed else self.a.steps
            if sorted(steps) != list(range(1, last + 1)):
                problems.append(f"steps logged: {len(steps)} lines, {len(set(steps))} distinct")
            summary = next((l for l in lines if l.get("type") == "summary"), None)
            final = [l for l in lines if l.get("type") == "eval" and
                     (l.get("tokens") == summary.get("tokens") if timed and summary else l["step"] == last)]
            if not final:
                problems.append("no final validation")
            if summary is None:
                problems.append("no summary")
            rounds = [json.dumps(l["group_steps"]) for l in lines if l.get("type") == "round"]
            if len(rounds) != len(set(rounds)):
                problems.append("a round logged twice")
            lost_ids = [g for l in lost for g in l["lost_group_ids"]]
            if len(lost_ids) != len(set(lost_ids)):
                problems.append(f"a group named lost twice: {[l['lost_group_ids'] for l in lost]}")
            named = {g for l in lost for g in l["lost_group_ids"]}
            # The summary's gather takes in every rank of the groups kept to the end: a killed rank of one of them
            # whose group no group_lost line names had made that gather, its last collective, before its kill.
            kept_at_end = set(lost[-1]["group_ids"]) if lost else set(range(len(sizes)))
            late = {g for g in lost_groups - named if g in kept_at_end and
                    any(l.get("type") == "summary" for l in lines)}
            if late:
                notes.append(f"group(s) {sorted(late)}: killed after the summary's gather")
            if named != lost_groups - late:
                problems.append(f"group_lost names groups {sorted(named)}, the kills hit {sorted(lost_groups)} "
                                f"(killed: {identities})")
            spurious = {r for l in lost for r in l["lost_ranks"]} - set(killed)
            if spurious:
                problems.append(f"ranks {sorted(spurious)} lost without a kill")
        else:
            outcome = "ended (" + (", ".join(declared) if declared else
                                   "no ULFM" if not self.ulfm else "every group lost") + ")"
            if rc == 0:
                problems.append("exit 0")
            if self.ulfm:
                # A rank whose group was lost by an earlier kill has left with its line before the last group went.
                silent = [r for r in range(8) if r not in killed and
                          not re.search(r"^fedshard: (error|rank \d+ of group \d+: lost)", rank_text(ranks, r), re.M)]
                if silent:
                    problems.append(f"ranks {silent} ended without an error line")
                seen += ["error: " + m for r in range(8) for m in
                         re.findall(r"^fedshard: error on rank \d+ of \d+: (lost rank\(s\)[^;:]*)", rank_text(ranks, r), re.M)][:1]
        resume = self.resume(args, out, i) if rc is not None else "skipped"
        if resume.startswith("FAIL"):
            problems.append(resume)
        self.phases.update(s for s in seen if not s.startswith("error"))
        kill_text = "; ".join(f"rank {v} {d} s after step {at_step}" if k == 0 else f"rank {v} {d} s later"
                              for k, (v, d) in enumerate(zip(killed, delays)))
        line = (f"trial {i}: {name}: killed {kill_text or 'none'}{' (' + ', '.join(notes) + ')' if notes else ''}; "
                f"seen in: {', '.join(sorted(set(seen))) or '-'}; {outcome} in {seconds:.1f} s; resume: {resume}")
        if problems:
            self.failures += 1
            line = "FAIL " + line + " -- " + "; ".join(problems)
        print(line, flush=True)
        if self.a.table:
            with open(self.a.table, "a") as f:
                f.write(json.dumps({"config": name, "kills": len(killed), "outcome": outcome,
                                    "declared": declared, "seconds": round(seconds, 2), "rc": rc, "seen": seen,
                                    "recover_s": [l.get("recover_s") for l in lines if l.get("type") == "group_lost"],
                                    "kill_to_next": kill_to_next, "kill_to_exit": kill_to_exit,
                                    "problems": problems}) + "\n")
        if not self.a.keep:
            for p in (out, ranks, out + ".log"):
                shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.path.exists(p) and os.remove(p)

    @staticmethod
    def after_the_end(lines):
        """Every step, the final validation and the summary logged and no loss seen: the killed ranks had made their
        last collective call (a rank killed before it would have failed its peers' collectives)."""
        return (any(l.get("type") == "summary" for l in lines) and
                not any(l.get("type") == "group_lost" for l in lines))

    def resume(self, args, out, i):
        ranks, log = out + ".resume", out + ".resume.log"
        for attempt in range(3):
            job = subprocess.Popen(self.mpirun(ranks) + args + ["--resume", "auto"], stdout=open(log, "w"),
                                   stderr=subprocess.STDOUT, start_new_session=True)
            t0, gone, lingered = time.monotonic(), None, False
            while job.poll() is None and time.monotonic() - t0 < TRIAL_TIMEOUT:
                time.sleep(0.5)
                # As in a trial: mpirun staying LINGER s after its ranks ended is ended, the ranks' outcome judged.
                gone = None if rank_pids(out) else (gone or time.monotonic())
                if gone and time.monotonic() - gone > LINGER:
                    lingered = True
                    break
            rc = job.poll()
            alive = sorted(rank_pids(out)) if rc is None else []  # for a hang's line: who was still there
            if rc is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
            subprocess.run(["pkill", "-9", "-f", out + " "], capture_output=True)
            if rc is None and not lingered:
                return f"FAIL: --resume auto hung (ranks still running: {alive or 'none, mpirun was'})"
            said = open(log, errors="replace").read()
            if rc == 0 or lingered or LAUNCHER_FAILED not in said:
                break
            shutil.rmtree(ranks, ignore_errors=True)
        errors = {l for r in range(8) for l in rank_text(ranks, r).splitlines() if l.startswith("fedshard: error")}
        errors = {re.sub(r"on rank \d+ of \d+: ", "", l) for l in errors}
        shutil.rmtree(ranks, ignore_errors=True)
        os.remove(log)
        lines = logged_steps(os.path.join(out, "metrics.jsonl"))
        stayed = f" (mpirun stayed {LINGER} s after its ranks had ended)" if lingered else ""
        if (rc == 0 or lingered) and any(l.get("type") == "summary" for l in lines):
            return "finished" + stayed
        if rc != 0 and len(errors) == 1:
            return "refused: " + next(iter(errors))[len("fedshard: error: "):][:160] + stayed
        last = said.strip().splitlines()[-1:]
        return (f"FAIL: --resume auto exit {rc}, {len(errors)} distinct error lines{stayed}"
                + (f"; mpirun's last line: {last[0][:200]}" if last else ""))

    def run(self):
        self.prepare()
        start = time.monotonic()
        i = 0
        while (i < self.a.trials) if not self.a.minutes else (time.monotonic() - start < 60 * self.a.minutes):
            i += 1
            self.run_trial(i)
        # A stalled recovery ends the job as it should, but recovery is the promise: more than one in four of the
        # recoverable trials ending so fails the test (the soak measured about one in fifty).
        too_many_stalls = self.stalls * 4 > max(self.recoverable, 4)
        print(f"chaos: {i} trials ({'ULFM' if self.ulfm else 'no ULFM'}), {self.failures} failed, {self.stalls} of "
              f"{self.recoverable} recoverable ended by the failure watch (recovery stalled"
              f"{': too many' if too_many_stalls else ''}); the survivors learned of the losses in: "
              f"{', '.join(sorted(self.phases)) or '-'}")
        if not self.a.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return 1 if self.failures or too_many_stalls else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--seed", type=int, default=51)
    ap.add_argument("--minutes", type=float, default=0)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--keep")
    ap.add_argument("--table")
    sys.exit(Chaos(ap.parse_args()).run())


if __name__ == "__main__":
    main()
