#!/usr/bin/env python3
"""Seeded chaos across sites: real faults from outside, at moments no fault point chooses (docs/robustness.md:
"Sites under faults").

Each trial runs a round server of two shards (`fedshard serve`, shard 0 the coordinator) and two sites of 2 ranks
each (`tiny`, fsdp, a round every 4 steps, a checkpoint every round, `--resume auto`). Site A and the shards share a
network namespace; site B has one of its own, whose only way to the server is bench/wan_link.c (5 ms one way), so
its link can fail as a WAN link does. One fault is drawn:
  - site rank: kill -9 of one of a site's ranks;
  - whole site: kill -9 of every process of a site's job (mpirun and its ranks);
  - preempted site: SIGUSR1 to a site's ranks, as Slurm's `--signal` before a preemption: the site must checkpoint,
    leave the rounds and exit 75;
  - server shard: kill -9 of a shard, started again with its state directory and port after a drawn pause;
  - link cut: site B's link loses every packet for a drawn time shorter or longer than the round deadline, then heals;
  - lossy link: 1-5% packet loss and up to 200 ms jitter on B's link for the whole run;
at a drawn moment (once shard 0 committed a drawn round, plus a drawn delay). A site's job that ended before its
last step is started again as Slurm's requeue would (the same command, `--resume auto`) after a drawn pause.
Checked, for every trial:
  - no hang: every job ends within the trial's time, each site's last job with exit 0 and a summary; each shard
    stops on SIGTERM;
  - no round lost after it was acknowledged: each shard's rounds.jsonl holds its rounds in order, each once (a round
    may lack its line only at a shard killed in the trial: the line follows the commit); every global model a site
    took (federation.audit: its server_round and checksum) is the one the shards committed for that round, summed
    over the shards as over the site's ranks;
  - the global model finite (each shard's committed state), and the one committed last held by a site at its end;
  - a site hit by the fault takes part again in a round after the one in flight at the fault, where it trained two
    rounds after it.
One line per trial: the fault, when, the outcome, and the recovery times on the wall clock: from the fault to the
next committed round, and to the first committed round the site hit takes part in.

Needs root (network namespaces, /dev/net/tun), gcc, openssl. Exits 77 (skipped) without them.
Usage: sites_chaos.py FEDSHARD_BINARY [--trials N] [--seed S] [--minutes M] [--keep DIR] [--table FILE]
       [--fault KIND]... (only these kinds, in turn)
"""
import argparse
import glob
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 40  # 10 rounds
DEADLINE = 4.0  # the server's round deadline, seconds
TRIAL_TIMEOUT = 240  # seconds: a trial still running then is a hang
FAULTS = ["site rank", "whole site", "preempted site", "server shard", "link cut", "lossy link"]
PREEMPTED_EXIT = 75  # a preempted job's exit (train/preemption.h), which Slurm's requeue follows


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def lines(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, ValueError):
        return []


def fedshard_pids(binary, out):
    """PIDs of the processes of `binary` (a site's ranks) training into `out`."""
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            cmd = open(d + "/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if out.encode() in cmd and cmd[0] == binary.encode():
            pids.append(int(os.path.basename(d)))
    return pids


def committed_global(state):
    """The global slice of a shard's committed state: (checksum as the round log sums it, all finite)."""
    raw = open(os.path.join(state, "committed.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    begin, end = json.loads(raw[8:8 + n])["global"]["data_offsets"]
    data = raw[8 + n + begin:8 + n + end]
    ints = struct.unpack(f"<{len(data) // 4}i", data)
    floats = struct.unpack(f"<{len(data) // 4}f", data)
    return sum(ints), all(math.isfinite(v) for v in floats)


class Net:
    """Namespace S (the shards, site A) and B (site B), joined by wan_link over two TUN devices."""

    def __init__(self, tmp):
        self.names = [f"fsc{os.getpid()}s", f"fsc{os.getpid()}b"]
        self.link_bin = os.path.join(tmp, "wan_link")
        self.link = None
        run(["gcc", "-O2", "-o", self.link_bin, os.path.join(HERE, "..", "bench", "wan_link.c")])
        for n in self.names:
            run(["ip", "netns", "add", n])
        s, b = self.names
        for n, mine, peer in ((s, "10.77.0.1", "10.77.0.2"), (b, "10.77.0.2", "10.77.0.1")):
            run(["ip", "-n", n, "tuntap", "add", "dev", "wan", "mode", "tun"])
            run(["ip", "-n", n, "addr", "add", mine, "peer", peer, "dev", "wan"])
            run(["ip", "-n", n, "link", "set", "wan", "up"])
            run(["ip", "-n", n, "link", "set", "lo", "up"])

    def start_link(self, loss, jitter, seed, log):
        self.link = subprocess.Popen([self.link_bin, "-l", str(loss), "-j", str(jitter), "-s", str(seed), "5",
                                      self.names[0], "wan", self.names[1], "wan"], stderr=open(log, "a"))

    def stop_link(self):
        if self.link:
            self.link.terminate()
            self.link.wait()
            self.link = None

    def exec(self, which):
        return ["ip", "netns", "exec", self.names[which]]

    def close(self):
        self.stop_link()
        for n in self.names:
            subprocess.run(["ip", "netns", "del", n], stderr=subprocess.DEVNULL)


class Trial:
    def __init__(self, chaos, i, rng):
        self.c, self.i, self.rng = chaos, i, rng
        self.dir = os.path.join(chaos.tmp, f"t{i}")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.shards = {}  # shard -> Popen
        self.ports = {}
        self.jobs = {}  # site -> Popen of its current job
        self.starts = {"site-a": 0, "site-b": 0}
        self.notes = []
        self.problems = []

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def serve(self, j, port=None):
        state = self.path(f"s{j}")
        args = self.c.net.exec(0) + [self.c.bin, "serve", "--shard", f"{j}/2", "--address", "10.77.0.1", "--state",
                                     state, "--tls-cert", self.c.cert("roundserver"), "--tls-key",
                                     self.c.key("roundserver"), "--tls-ca", self.c.cert("ca"), "--round-deadline",
                                     str(DEADLINE)]
        args += ["--port", str(port)] if port else ["--port-file", state + ".port"]
        if j == 1:
            args += ["--coordinator", f"10.77.0.1:{self.ports[0]}", "--server-name", "localhost"]
        self.shards[j] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(state + ".log", "a"),
                                          start_new_session=True)
        if port:
            return
        for _ in range(300):
            if os.path.exists(state + ".port") and open(state + ".port").read().strip():
                self.ports[j] = int(open(state + ".port").read())
                return
            time.sleep(0.1)
        raise RuntimeError(f"shard {j} did not start: {open(state + '.log').read()[-300:]}")

    def site(self, name):
        ns, data = (0, "0/2") if name == "site-a" else (1, "1/2")
        out = self.path(name)
        self.starts[name] += 1
        args = self.c.net.exec(ns) + self.c.mpirun() + [
            self.c.bin, "train", "--model", "tiny", "--data", self.c.corpus, "--seq-len", "32", "--batch-size", "2",
            "--threads", "1", "--steps", str(STEPS), "--sync-every", "4", "--checkpoint-every", "4", "--resume",
            "auto", "--eval-every", "1000", "--set", "eval.windows=2", "--seed", "3", "--strategy", "fsdp",
            "--compress", self.compress, "--site", name, "--tls-cert", self.c.cert(name), "--tls-key",
            self.c.key(name), "--tls-ca", self.c.cert("ca"),
            "--server", f"10.77.0.1:{self.ports[0]},10.77.0.1:{self.ports[1]}",
            "--set", "sites.server_name=localhost", "--set", "sites.patience=90", "--set", "federation.audit=true",
            "--set", f"sites.data={data}", "--slow", "0=40,1=40", "--out", out]
        self.jobs[name] = subprocess.Popen(args, stdout=open(f"{out}.{self.starts[name]}.log", "w"),
                                           stderr=subprocess.STDOUT, start_new_session=True)

    def rounds(self, j):
        return lines(self.path(f"s{j}", "rounds.jsonl"))

    def finished(self, name):
        return any(l.get("type") == "summary" for l in lines(self.path(name, "metrics.jsonl")))

    def audit_lines(self, name):
        return [lines(f) for f in sorted(glob.glob(self.path(name, "audit", "rank-*.jsonl")))]

    def run(self):
        rng = self.rng
        self.fault = rng.choice(FAULTS)
        if self.c.faults:
            self.fault = self.c.faults[self.i % len(self.c.faults)]
        self.compress = rng.choice(["none", "none", "int4"])
        loss, jitter = (round(rng.uniform(1, 5), 1), 200) if self.fault == "lossy link" else (0, 0)
        at_round = rng.randint(1, 6)
        delay = round(rng.uniform(0, 1.5), 2)
        victim = rng.choice(["site-a", "site-b"])
        if self.fault == "link cut":
            victim = "site-b"
        shard = rng.randint(0, 1)
        rank = rng.randint(0, 1)
        cut = round(rng.uniform(0.5, DEADLINE - 1) if rng.random() < 0.5 else rng.uniform(DEADLINE + 1, 15), 1)
        pause = round(rng.uniform(0, 3), 1)
        what = {"site rank": f"kill -9 rank {rank} of {victim}", "whole site": f"kill -9 {victim}'s job",
                "preempted site": f"SIGUSR1 to {victim}'s ranks (a preemption), requeued {pause} s after it ends",
                "server shard": f"kill -9 shard {shard}/2, started again {pause} s later",
                "link cut": f"site-b's link cut for {cut} s (deadline {DEADLINE:g} s)",
                "lossy link": f"site-b's link: {loss}% loss, {jitter} ms jitter"}[self.fault]
        self.what = f"{what}, after round {at_round} + {delay} s, compress {self.compress}"
        self.hit = victim if self.fault in ("site rank", "whole site", "preempted site", "link cut") else None
        self.killed_shard = shard if self.fault == "server shard" else None

        t0 = time.monotonic()
        self.c.net.start_link(loss, jitter, self.c.seed * 1000 + self.i, self.path("wan_link.log"))
        self.serve(0)
        self.serve(1)
        self.site("site-a")
        self.site("site-b")
        self.fault_time = None  # wall clock
        self.audit_at_fault = None
        restart_at = {}  # site -> monotonic time its next job starts
        tried = False
        healed_at = None
        while time.monotonic() - t0 < TRIAL_TIMEOUT:
            now = time.monotonic()
            if not tried and self.fault != "lossy link" and len(self.rounds(0)) > at_round:
                tried = True
                time.sleep(delay)
                self.inject(victim, shard, rank)
                healed_at = time.monotonic() + cut if self.fault == "link cut" else None
                restart_at_shard = time.monotonic() + pause
            if healed_at and time.monotonic() >= healed_at:
                os.kill(self.c.net.link.pid, signal.SIGUSR2)
                healed_at = None
            if self.fault == "server shard" and self.fault_time and shard not in self.shards \
                    and time.monotonic() >= restart_at_shard:
                self.serve(shard, self.ports[shard])
            for name, job in self.jobs.items():
                if job.poll() is None or name in restart_at:
                    continue
                if job.returncode == 0 and self.finished(name):
                    continue
                if self.fault == "preempted site" and name == self.hit and job.returncode != PREEMPTED_EXIT \
                        and self.starts[name] == 1:
                    self.problems.append(f"{name}'s preempted job ended {job.returncode}, not {PREEMPTED_EXIT}: "
                                         f"{self.tail(name)}")
                if name != self.hit or self.fault == "link cut" or self.starts[name] > 1:
                    # One fault a trial: a site not hit, or one already started again, has no reason to end early.
                    self.problems.append(f"{name}'s job {self.starts[name]} ended {job.returncode} though not hit: "
                                         f"{self.tail(name)}")
                    restart_at[name] = float("inf")
                    continue
                restart_at[name] = now + pause
            for name, at in list(restart_at.items()):
                if now >= at:
                    del restart_at[name]
                    self.notes.append(f"{name}'s job (exit {self.jobs[name].returncode}) started again")
                    self.site(name)
            done = all(j.poll() is not None and (j.returncode != 0 or self.finished(n)) and n not in restart_at
                       for n, j in self.jobs.items())
            if done:
                break
            time.sleep(0.05)
        self.seconds = time.monotonic() - t0
        running = [n for n, j in self.jobs.items() if j.poll() is None]
        for n in running:
            os.killpg(self.jobs[n].pid, signal.SIGKILL)
            self.jobs[n].wait()
        if running:
            self.problems.append(f"HANG: {running} still running after {TRIAL_TIMEOUT} s")
        for name, job in self.jobs.items():
            if not running and (job.returncode != 0 or not self.finished(name)):
                self.problems.append(f"{name}'s last job ended {job.returncode}: {self.tail(name)}")
        for j, p in self.shards.items():
            p.send_signal(signal.SIGTERM)
        for j, p in self.shards.items():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                self.problems.append(f"shard {j} did not stop on SIGTERM within 15 s")
        self.c.net.stop_link()
        self.check()

    def tail(self, name):
        text = open(f"{self.path(name)}.{self.starts[name]}.log", errors="replace").read().strip().splitlines()
        return next((l for l in reversed(text) if "fedshard" in l), text[-1] if text else "no output")

    def inject(self, victim, shard, rank):
        """Hits the victim; a site whose job has ended is not hit (fault_time stays None: nothing to recover)."""
        self.fault_time = time.time()
        self.round_at_fault = max((r["round"] for r in self.rounds(0)), default=0)
        self.audit_at_fault = {n: [len(a) for a in self.audit_lines(n)] for n in ("site-a", "site-b")}
        if self.fault in ("site rank", "whole site", "preempted site") and self.jobs[victim].poll() is not None:
            self.notes.append(f"{victim}'s job had ended: not hit")
            self.fault_time = None
        elif self.fault == "site rank":
            pids = sorted(fedshard_pids(self.c.bin, self.path(victim)))
            if len(pids) < 2:
                self.notes.append(f"{victim}'s ranks gone before the kill: not hit")
                self.fault_time = None
                return
            os.kill(pids[rank], signal.SIGKILL)
        elif self.fault == "whole site":
            for kill in [lambda: os.killpg(self.jobs[victim].pid, signal.SIGKILL)] + \
                    [lambda p=p: os.kill(p, signal.SIGKILL) for p in fedshard_pids(self.c.bin, self.path(victim))]:
                try:
                    kill()
                except ProcessLookupError:
                    pass
        elif self.fault == "preempted site":
            for p in fedshard_pids(self.c.bin, self.path(victim)):
                try:
                    os.kill(p, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
        elif self.fault == "server shard":
            os.killpg(self.shards[shard].pid, signal.SIGKILL)
            self.shards.pop(shard).wait()
        elif self.fault == "link cut":
            os.kill(self.c.net.link.pid, signal.SIGUSR1)

    def check(self):
        logs = {j: self.rounds(j) for j in (0, 1)}
        sums = {}
        for j, rs in logs.items():
            numbers = [r["round"] for r in rs]
            killed = j == self.killed_shard
            if any(b <= a for a, b in zip(numbers, numbers[1:])):
                self.problems.append(f"shard {j} logged rounds out of order or twice: {numbers}")
            elif numbers and numbers != list(range(numbers[0], numbers[-1] + 1)) and not killed:
                self.problems.append(f"shard {j} skipped rounds: {numbers}")
            for r in rs:
                sums.setdefault(r["round"], {})[j] = r["checksum"]
        server = {r: s[0] + s[1] for r, s in sums.items() if len(s) == 2}
        last = {}
        for j in (0, 1):
            try:
                checksum, finite = committed_global(self.path(f"s{j}"))
            except (OSError, ValueError, KeyError, struct.error) as e:
                self.problems.append(f"shard {j}: no committed state ({e})")
                continue
            if not finite:
                self.problems.append(f"shard {j}'s committed global model is not finite")
            if logs[j] and logs[j][-1]["checksum"] != checksum:
                self.problems.append(f"shard {j}'s committed state is not its last logged round's")
            last[j] = checksum
        final_round = max((r["round"] for r in logs[0]), default=None)
        self.final_round = final_round
        held_last = False
        self.taken = 0
        for name in ("site-a", "site-b"):
            per_rank = {}
            for k, rank_lines in enumerate(self.audit_lines(name)):
                for l in rank_lines:
                    if "server_round" in l:
                        per_rank.setdefault(l["server_round"], {}).setdefault(k, set()).add(l["checksum"])
            for r, ranks in sorted(per_rank.items()):
                if any(len(v) > 1 for v in ranks.values()):
                    self.problems.append(f"{name} held two different models as round {r}")
                    continue
                if len(ranks) < 2 or r not in server:
                    continue
                self.taken += 1
                site_sum = sum(next(iter(v)) for v in ranks.values())
                if site_sum != server[r]:
                    self.problems.append(f"{name}'s global model of round {r} is not the one the shards committed")
            if final_round is not None and final_round in per_rank and len(last) == 2:
                held_last = True
        if final_round is not None and not held_last:
            self.problems.append(f"no site holds the last committed round ({final_round})")
        # Recovery: from the fault to the next committed round, and to the first round the site hit takes part in.
        self.next_round = self.rejoined = None
        if self.fault_time:
            after = [r for r in logs[0] if r["committed_s"] > self.fault_time and r["round"] > 0]
            if after:
                self.next_round = round(after[0]["committed_s"] - self.fault_time, 2)
            if self.hit:
                # The round in flight at the fault may hold what the site sent before it: back is a later one.
                back = [r for r in after if r["round"] >= self.round_at_fault + 2 and
                        any(p["site"] == self.hit for p in r["participants"])]
                if back:
                    self.rejoined = round(back[0]["committed_s"] - self.fault_time, 2)
                else:
                    now, then = self.audit_lines(self.hit), self.audit_at_fault[self.hit]
                    left = len(now[0]) - (then[0] if then else 0) if now else 0
                    if left >= 2:
                        self.problems.append(f"{self.hit} took {left} rounds after the fault but took part in none")

    def line(self):
        outcome = "FAIL" if self.problems else "ok"
        rec = ""
        if self.fault_time:
            rec = f"; next round {self.next_round} s" + (f", {self.hit} back {self.rejoined} s" if self.hit else "")
        notes = f" [{'; '.join(self.notes)}]" if self.notes else ""
        text = (f"trial {self.i}: {self.what}: {outcome}, {self.final_round} rounds, {self.taken} site models checked "
                f"against the shards', {self.seconds:.0f} s{rec}{notes}")
        for p in self.problems:
            text += f"\n    {p}"
        return text

    def record(self):
        return {"trial": self.i, "fault": self.fault, "what": self.what, "ok": not self.problems,
                "problems": self.problems, "rounds": self.final_round, "checked": self.taken,
                "seconds": round(self.seconds, 1), "fault_to_next_round_s": self.next_round,
                "fault_to_rejoined_s": self.rejoined, "notes": self.notes}


class Chaos:
    def __init__(self, a):
        self.bin = os.path.realpath(a.binary)
        self.seed = a.seed
        self.faults = a.fault
        self.tmp = a.keep or tempfile.mkdtemp(prefix="fedshard-sites-chaos-")
        os.makedirs(self.tmp, exist_ok=True)
        version = subprocess.run([self.bin, "--version"], capture_output=True, text=True).stdout
        self.ulfm = "with ULFM" in version

    def cert(self, name):
        return os.path.join(self.tmp, f"{name}.pem")

    def key(self, name):
        return os.path.join(self.tmp, f"{name}.key")

    def prepare(self):
        raw = os.path.join(self.tmp, "raw")
        os.makedirs(raw, exist_ok=True)
        for n in ["GPL-3", "LGPL-2.1", "Apache-2.0", "MPL-2.0"]:
            shutil.copy(f"/usr/share/common-licenses/{n}", raw)
        self.corpus = os.path.join(self.tmp, "corpus")
        run([self.bin, "prepare", "--input", raw, "--out", self.corpus, "--val-fraction", "0.5"])
        t = self.tmp
        run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", self.key("ca"), "-out",
             self.cert("ca"), "-days", "7", "-subj", "/CN=federation-ca"])
        for n in ("roundserver", "site-a", "site-b"):
            csr, ext = os.path.join(t, n + ".csr"), os.path.join(t, n + ".ext")
            open(ext, "w").write("subjectAltName=DNS:localhost,IP:127.0.0.1,IP:10.77.0.1\n")
            run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", self.key(n), "-out", csr, "-subj",
                 f"/CN={n}"])
            run(["openssl", "x509", "-req", "-in", csr, "-CA", self.cert("ca"), "-CAkey", self.key("ca"),
                 "-CAcreateserial", "-out", self.cert(n), "-days", "7", "-extfile", ext])

    def mpirun(self):
        out = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2"]
        if self.ulfm:
            out[1:1] = ["--with-ft", "ulfm"]
        return out


def table(records):
    """Per fault: trials, failed, hangs, and the recovery times' median and largest (seconds)."""
    def stats(v):
        v = sorted(x for x in v if x is not None)
        return f"{v[len(v) // 2]:.2f} / {v[-1]:.2f} ({len(v)})" if v else "-"
    out = ["| fault | trials | failed | hangs | fault to next round, s: median / max (n) | fault to the site's "
           "return, s: median / max (n) |", "|---|---|---|---|---|---|"]
    for f in FAULTS:
        rs = [r for r in records if r["fault"] == f]
        if rs:
            out.append(f"| {f} | {len(rs)} | {sum(not r['ok'] for r in rs)} | "
                       f"{sum(any(p.startswith('HANG') for p in r['problems']) for r in rs)} | "
                       f"{stats(r['fault_to_next_round_s'] for r in rs)} | "
                       f"{stats(r['fault_to_rejoined_s'] for r in rs)} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--seed", type=int, default=63)
    ap.add_argument("--minutes", type=float, default=0)
    ap.add_argument("--keep")
    ap.add_argument("--table")
    ap.add_argument("--fault", action="append", choices=FAULTS, help="only these faults, in turn")
    a = ap.parse_args()
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun") or not shutil.which("gcc"):
        print("skipped: sites_chaos needs root (network namespaces), /dev/net/tun and gcc")
        return 77
    # A stop from outside (ctest's timeout, ^C) still removes the namespaces and the trials' processes (finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("sites_chaos: stopped (SIGTERM)"))
    c = Chaos(a)
    c.prepare()
    c.net = Net(c.tmp)
    rng = random.Random(a.seed)
    start, failed, n, records = time.monotonic(), 0, 0, []
    try:
        while (n < a.trials) if not a.minutes else (time.monotonic() - start < a.minutes * 60):
            # Each trial draws from its own generator, so a trial's line is reproduced by its seed and number.
            t = Trial(c, n, random.Random(rng.random()))
            t.run()
            print(t.line(), flush=True)
            if a.table:
                with open(a.table, "a") as f:
                    f.write(json.dumps(t.record()) + "\n")
            failed += bool(t.problems)
            records.append(t.record())
            n += 1
            if not a.keep:
                shutil.rmtree(t.dir, ignore_errors=True)
    finally:
        for d in glob.glob("/proc/[0-9]*"):  # a trial's processes, where it was stopped midway
            try:
                if c.tmp.encode() in open(d + "/cmdline", "rb").read() and int(os.path.basename(d)) != os.getpid():
                    os.kill(int(os.path.basename(d)), signal.SIGKILL)
            except OSError:
                pass
        c.net.close()
        if not a.keep:
            shutil.rmtree(c.tmp, ignore_errors=True)
    print(table(records))
    print(f"{n} trials, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
