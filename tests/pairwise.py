#!/usr/bin/env python3
"""Pairwise harness over the declared option space (src/train/option_space.cpp, `fedshard options --json`).

A greedy covering array (AETG) over the declared options' levels: every pair of levels of any two options that
some accepted configuration can hold appears in at least one configuration, none of which the declaration
refuses; and one configuration per declared refusal. On 4 or 6 real ranks, `tiny`, 12 steps, each accepted
configuration must
  (besides, base-choice configurations: one base and each other level of each option alone on it, checked for
  everything below but the kill)
  - train to the end with finite losses, its float32 master weights not rounded to a narrower wire dtype;
  - leave every group with the same global model after every round (federation.audit: each rank's part of a
    checksum of the global model; summed over a group's ranks, equal across groups);
  - have counted, on every rank, the bytes `fedshard plan` prices for it (per step, per round and per unit of
    each round, summed over the run's steps and rounds as the schedule makes them);
  - after kill -9 of a rank at a step drawn from the configuration's seed, resume (--resume auto) with losses
    identical to the uninterrupted run's; and (the first of each round kind) resumed once more after the end,
    exit 2, "nothing left to train";
and each refused one must exit 2 with one `fedshard: error:` line naming an option of its rule, having written
nothing. Emulated configurations keep no checkpoints and count the real ranks' bytes: they are not killed and
not compared with the plan. Prints a table (configuration -> result) and the pair coverage reached.

Usage: pairwise.py FEDSHARD_BINARY [--seed N] [--full [--part I/N]] [--only K] [--first] [--jobs N] [--record DIR]
  --full   every accepted combination of the levels (the product, tens of thousands: make test-matrix), not a
           covering array; --part I/N runs every N-th of them from the I-th (machines in parallel)
  --only   one configuration of the covering array (by its number in the table)
  --first  stop at the first failure (one configuration at a time)
  --jobs   configurations run at once (default 2)
  --record every run's metrics.jsonl and audit files into DIR/<configuration>/, for a comparison of two binaries'
           behaviour (tests/same_behaviour.py)
"""
import argparse
import concurrent.futures
import itertools
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile

MPI = ["mpirun", "--oversubscribe", "--allow-run-as-root"]
STEPS, K = 12, 4
# The clock of time-based rounds is the emulated one (a wall clock decides rounds by the machine's speed).
CLOCK = "emulated:0.05"

# Values of options the configurations do not vary, as the declaration compares them. Nothing runs between
# steps (no evaluation after a round; checkpoints only in the killed run, whose bytes are not compared): a
# round in flight then completes inside a step, where each rank's bytes are counted.
FIXED = {"federation.clock": "wall", "train.slow": "", "checkpoint.every": "0", "train.resume": "",
         "federation.eval_after_sync": "false",
         "model.dtype": "float32", "federation.eval_group_model": "false", "parallel.sync_every": str(K),
         "parallel.backend": "mpi", "model.device": "cpu", "federation.compress_block": "256",
         "federation.outer_lr": "1", "federation.rejoin_after": "0", "model.compute_dtype": "float32",
         "model.matmul_dtype": "compute", "sites.server": ""}


def is_fl(cfg):
    return cfg["parallel.strategy"].startswith("fl-")


def resolved(cfg):
    """Every option's value as fedshard will see it (the harness's choices for the ones it derives)."""
    v = dict(FIXED)
    v.update(cfg)
    if v["federation.round"].startswith("seconds:"):
        v["federation.clock"] = CLOCK
        if is_fl(v):
            # A slower group takes fewer steps per round: the second one of 4,2, the first one of 2,2 (a run
            # ends when its first group is done, so a slow first group is the case that must not hang).
            v["train.slow"] = "group:1=2" if v["parallel.groups"] == "4,2" else "group:0=2"
    return v


# The declaration's computed conditions, as this harness's configurations meet them (a rule it does not know
# stops it: the harness must follow the declaration).
def held_groups(v):  # parallel.emulate 4x2 on 4 real ranks: 2 virtual groups per rank group (fl-* only)
    return bool(v["parallel.emulate"]) and is_fl(v)


def in_job_recovery(v):  # a lost group leaves and the others go on: none of the declared exceptions holds
    return not any(refusal_holds(r, v) for r in UNRECOVERED)


def groups_differ(v):  # 4,2 (fl-*: the groups are the federation's; emulated or not, as launched)
    return is_fl(v) and v["parallel.groups"] == "4,2" and not v["parallel.emulate"]


COMPUTED = {
    "parallel.sync_every is not a multiple of F":
        lambda v: v["federation.overlap"].startswith("streaming:") and
        int(v["parallel.sync_every"]) % int(v["federation.overlap"].split(":")[1]) != 0,
    "F exceeds the model's units":
        lambda v: v["federation.overlap"].startswith("streaming:") and int(v["federation.overlap"].split(":")[1]) > 4,
    "the backend (resolved at start-up) is nccl": lambda v: v["parallel.backend"] == "nccl",
    "each rank group holds several virtual groups": held_groups,
    "in-job recovery does not cover the job": lambda v: not in_job_recovery(v),
    "the groups differ in size": groups_differ,
    "parallel.emulate holds several groups or ranks per rank": lambda v: bool(v["parallel.emulate"]),
    "federation.ef_decay is not 1": lambda v: v["federation.ef_decay"] not in ("", "1"),
    # float8 is refused on the CPU before these are read; no configuration of this harness has a GPU.
    "this LibTorch has no `_scaled_mm` (before 2.5)": lambda v: not FLOAT8_LIBTORCH,
    "the GPU's compute capability is below 8.9": lambda v: False,
}
FLOAT8_LIBTORCH = False  # main(): from `fedshard --version`
UNRECOVERED = []  # main(): the declared combinations in-job recovery does not cover


def cond_holds(c, v):
    x, vals = v[c["key"]], c["values"]
    return {"is": lambda: x == vals[0], "is not": lambda: x != vals[0], "in": lambda: x in vals,
            "not in": lambda: x not in vals, "starts with": lambda: x.startswith(vals[0]),
            "does not start with": lambda: not x.startswith(vals[0])}[c["op"]]()


def refusal_holds(r, v):
    if not all(cond_holds(c, v) for c in r["all"]):
        return False
    if r["any"] and not any(cond_holds(c, v) for c in r["any"]):
        return False
    return not r["computed"] or COMPUTED[r["computed"]](v)


def feasible(cfg):
    """What the layout arithmetic refuses (not combinations of options): emulating 4 groups on 6 ranks."""
    return not (cfg.get("parallel.emulate") and cfg.get("parallel.groups") == "4,2")


class Space:
    def __init__(self, declared):
        self.refusals = declared["refusals"]
        for r in self.refusals:
            if r["computed"] and r["computed"] not in COMPUTED:
                sys.exit(f"pairwise: the declaration's rule {r['name']} computes '{r['computed']}', which this harness "
                         "does not know")
        # The options the configurations vary: several levels; the clock follows the round.
        self.factors = [(o["key"], o["levels"]) for o in declared["options"]
                        if len(o["levels"]) > 1 and o["key"] != "federation.clock"]

    def refused(self, cfg):
        """The first declared rule refusing the (partial) configuration, once every option it reads is set."""
        v = resolved({k: cfg.get(k, lv[0]) for k, lv in self.factors})
        keys = set(cfg)
        for r in self.refusals:
            read = {c["key"] for c in r["all"] + r["any"]} & {k for k, _ in self.factors}
            if r["computed"]:
                read |= {"parallel.strategy", "parallel.emulate", "federation.overlap"}
            if read <= keys and refusal_holds(r, v):
                return r
        return None

    def allowed(self, cfg):
        return feasible(cfg) and self.refused(cfg) is None


def pairs_of(cfg, factors):
    keys = [k for k, _ in factors if k in cfg]
    return {((a, cfg[a]), (b, cfg[b])) for a, b in itertools.combinations(keys, 2)}


def covering_array(space, seed):
    rng = random.Random(seed)
    factors = space.factors
    want = set()
    for (a, la), (b, lb) in itertools.combinations(factors, 2):
        for x in la:
            for y in lb:
                want.add(((a, x), (b, y)))
    configs, infeasible = [], set()
    uncovered = set(want)
    while uncovered:
        best, best_new = None, set()
        for _ in range(40):
            seed_pair = rng.choice(sorted(uncovered))
            cfg = dict(seed_pair)
            if not space.allowed(cfg):
                continue
            order = [f for f in factors if f[0] not in cfg]
            rng.shuffle(order)
            for key, levels in order:
                scored = []
                for lv in levels:
                    trial = dict(cfg, **{key: lv})
                    if space.allowed(trial):
                        scored.append((len(pairs_of(trial, factors) & uncovered), rng.random(), lv))
                if not scored:
                    cfg = None
                    break
                cfg[key] = max(scored)[2]
            if cfg is None:
                continue
            new = pairs_of(cfg, factors) & uncovered
            if len(new) > len(best_new):
                best, best_new = cfg, new
        if best is None:
            # No accepted configuration found for these pairs: they are refused combinations (or layouts the
            # ranks cannot form), exercised by the refusal configurations instead.
            stuck = {p for p in uncovered if not space.allowed(dict(p))}
            if not stuck:
                stuck = {sorted(uncovered)[0]}
            infeasible |= stuck
            uncovered -= stuck
            continue
        configs.append(best)
        uncovered -= best_new
    return configs, want, infeasible


def base_choice(space, configs):
    """Base-choice coverage beside the pairs: one base configuration (fl-fsdp, two groups, every other option at
    its first level) and each other level of each option alone on it. A defect that needs one option away from
    its default and every other option at it is a many-way interaction no pairwise array need hold."""
    base = {k: lv[0] for k, lv in space.factors}
    base["parallel.strategy"] = "fl-fsdp"
    out = [base]
    for key, levels in space.factors:
        for lv in levels:
            cfg = dict(base, **{key: lv})
            if space.allowed(cfg) and cfg not in out and cfg not in configs:
                out.append(cfg)
    return out


def product(space):
    keys = [k for k, _ in space.factors]
    out = []
    for levels in itertools.product(*[lv for _, lv in space.factors]):
        cfg = dict(zip(keys, levels))
        if space.allowed(cfg):
            out.append(cfg)
    return out


# Values the refusal configurations give options the accepted ones do not vary.
EXTRA_VALUES = {"train.slow": ["group:1=2"], "federation.eval_group_model": ["true"], "model.dtype": ["float32"],
                "checkpoint.every": ["2"], "train.resume": ["auto"], "federation.clock": [CLOCK],
                "parallel.sync_every": ["3"], "parallel.backend": ["nccl"], "model.device": ["cuda"],
                "federation.rejoin_after": ["1"], "model.compute_dtype": ["float32"], "sites.server": ["127.0.0.1:9"]}
# A site's configuration names itself and its TLS files too (read at start-up; a refusal comes before).
SITE = {"sites.name": "harness", "sites.tls_cert": "site.pem", "sites.tls_key": "site.key", "sites.tls_ca": "ca.pem"}


def refusal_configs(space):
    """For each declared rule, a configuration that rule refuses: an accepted base with the rule's conditions
    made true (its first `any` condition; its computed part as the harness knows how)."""
    factors = dict(space.factors)
    base = {k: lv[0] for k, lv in space.factors}
    base["parallel.strategy"] = "fl-fsdp"
    out = []
    for r in space.refusals:
        cfg, extra = dict(base), {}
        for c in r["all"] + r["any"][:1]:
            candidates = factors.get(c["key"], []) + c["values"] + EXTRA_VALUES.get(c["key"], [])
            pick = next(x for x in candidates if cond_holds(c, {c["key"]: x}))
            (cfg if c["key"] in factors else extra)[c["key"]] = pick
        comp = r["computed"]
        if comp == "parallel.sync_every is not a multiple of F":
            cfg["federation.overlap"], extra["parallel.sync_every"] = "streaming:2", "3"
        elif comp == "F exceeds the model's units":
            cfg["federation.overlap"], extra["parallel.sync_every"] = "streaming:8", "8"
        elif comp == "the backend (resolved at start-up) is nccl":
            extra["parallel.backend"], extra["model.device"] = "nccl", "cuda"
        elif comp == "each rank group holds several virtual groups":
            cfg["parallel.emulate"], cfg["parallel.groups"] = "4x2", "2,2"
        elif comp == "in-job recovery does not cover the job":
            cfg["parallel.groups"] = "4,2"  # unequal groups
        elif comp == "federation.ef_decay is not 1":
            cfg["federation.ef_decay"] = next(x for x in factors["federation.ef_decay"] if x not in ("", "1"))
        if cfg.get("parallel.emulate"):
            cfg["parallel.groups"] = "2,2"
        if extra.get("sites.server"):
            # A site is one group: its other rules are tried on fsdp, so that only the rule under test holds.
            if all(c["key"] != "parallel.strategy" for c in r["all"]):
                cfg["parallel.strategy"] = "fsdp"
            extra.update(SITE)
        out.append((r, cfg, extra))
    return out


def command(bin_, cfg, out, extra=None):
    v = resolved(cfg)
    for k, x in (extra or {}).items():
        v[k] = x
    fl = is_fl(v)
    world = 6 if v["parallel.groups"] == "4,2" and not v["parallel.emulate"] else 4
    args = ["train", "--model", "tiny", "--data", DATA, "--seq-len", "32", "--batch-size", "2", "--steps",
            str(STEPS), "--threads", "1", "--eval-every", "0", "--set", "eval.windows=4", "--out", out,
            "--set", "federation.audit=true", "--set", "checkpoint.keep=20", "--seed", "3"]
    if v["parallel.emulate"]:
        args += ["--emulate", "4x2" if fl else "8"]
    elif fl:
        args += ["--groups", v["parallel.groups"]]
    if v["parallel.strategy"].endswith("hsdp"):
        args += ["--shard-size", "2"]
    # train.resume is the runs' own business (--resume auto after a kill); a --set would override it.
    skip = {"parallel.groups", "parallel.emulate", "train.resume"}
    for k, x in v.items():
        if k in skip:
            continue
        args += ["--set", f"{k}={x}"]
    if v["train.resume"]:
        args += ["--resume", v["train.resume"]]
    return world, args


def run(bin_, world, args, log, fault=None, ranks_dir=None):
    env = dict(os.environ)
    cmd = list(MPI) + ["-np", str(world)]
    if fault:
        env["FEDSHARD_FAULT"] = fault
        cmd += ["-x", "FEDSHARD_FAULT"]
    if ranks_dir:
        shutil.rmtree(ranks_dir, ignore_errors=True)
        cmd += ["--output-filename", ranks_dir + ":nocopy"]
    with open(log, "w") as f:
        try:
            return subprocess.call(cmd + [bin_] + args, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=240)
        except subprocess.TimeoutExpired:
            subprocess.call(["pkill", "-9", "-f", args[args.index("--out") + 1]])
            return 124


def metrics(out, kind):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [j for j in map(json.loads, f) if j["type"] == kind]


def audit_ok(out, world, groups):
    """Every group's checksum of the global model, per round, summed over its ranks (mod 2^64): all equal."""
    per = {}
    for r in range(world):
        path = os.path.join(out, "audit", "rank-%05d.jsonl" % r)
        if not os.path.exists(path):
            return False, f"no audit of rank {r}"
        seen = {}
        for line in open(path):
            j = json.loads(line)
            if seen.get(j["round"], j["checksum"]) != j["checksum"]:
                return False, f"rank {r} round {j['round']}: two checksums"
            seen[j["round"]] = j["checksum"]
            key = (j["round"], j["group"])
            per[key] = (per.get(key, 0) + j["checksum"]) % 2**64
    rounds = sorted({rd for rd, _ in per})
    for rd in rounds:
        sums = {per.get((rd, g)) for g in range(groups)}
        if len(sums) != 1 or None in sums:
            return False, f"round {rd}: groups hold different global models"
    return True, f"{len(rounds)} rounds"


def round_units(v, steps_done, timed_rounds, units):
    """The units each round of the run averaged, as the schedule makes them (federation/schedule.h)."""
    if timed_rounds is not None:
        return [list(range(units))] * timed_rounds
    frag = int(v["federation.overlap"].split(":")[1]) if v["federation.overlap"].startswith("streaming:") else 1
    interval = K // frag
    out = []
    for s in range(1, steps_done + 1):
        if s == STEPS:
            out.append(list(range(units)))
        elif s % interval == 0:
            f = (s // interval - 1) % frag if frag > 1 else -1
            out.append([u for u in range(units) if f < 0 or u % frag == f])
    return out


def bytes_ok(bin_, v, out, world):
    summary = metrics(out, "summary")[0]
    fl = is_fl(v)
    strategy = v["parallel.strategy"]
    spec = strategy
    if fl:
        spec += f":K={K}"
    cmd = [bin_, "plan", "--nodes", "1", "--ranks-per-node", str(world), "--model", "tiny", "--vocab-size", "258",
           "--strategy", spec, "--batch", "2", "--seq", "32", "--compute-seconds", "1", "--json", "--bytes-per-element", "4",
           "--reduce-dtype", v["parallel.reduce_dtype"], "--inner-state", v["federation.inner_state"],
           "--grad-accum", v["train.grad_accum"]]
    if fl:
        cmd += ["--groups", v["parallel.groups"], "--compress", v["federation.compress"],
                "--sparse-mean", v["federation.sparse_mean"] or "union",
                "--federation-overlap", v["federation.overlap"], "--round",
                "steps" if v["federation.round"] == "steps" else v["federation.round"]]
    if strategy.endswith("hsdp"):
        cmd += ["--shard-size", "2"]
    plan = json.loads(subprocess.check_output(cmd))["plans"][0]
    timed = v["federation.round"].startswith("seconds:")
    steps = {s["step"] for s in metrics(out, "step")}
    group_steps = None
    if timed:
        rounds = metrics(out, "round")
        group_steps = rounds[-1]["group_steps"]
    # Summed over ranks: a ring over a buffer that does not split evenly (the one-double gradient norm over 4
    # ranks) sends unevenly per rank, the formula's average exactly in total.
    got, want = {}, {}
    for r in range(world):
        pr = plan["per_rank"][r]
        units = len(pr["round_by_unit"])
        if timed:
            # Every group takes part in every round; its own steps are in the last round's line.
            g = next(i for i, end in enumerate(itertools.accumulate(int(x) for x in v["parallel.groups"].split(","))) if r < end)
            steps_r, rounds_units = group_steps[g], round_units(v, 0, len(metrics(out, "round")), units)
        else:
            steps_r = max(steps)
            rounds_units = round_units(v, steps_r, None, units) if fl else []
        for tier in ("node", "inter_node", "inter_group"):
            w = steps_r * pr["step"][tier]
            for us in rounds_units:
                w += pr["round_control"].get(tier, 0.0)
                for u in us:
                    w += (pr["round_by_unit"][u] or {}).get(tier, 0.0)
            want[tier] = want.get(tier, 0.0) + w
            got[tier] = got.get(tier, 0.0) + summary["step_bytes_by_rank"][r][tier]
    worst = max(abs(got[t] - want[t]) for t in got)
    return worst < 0.5, f"max |counted - plan| {worst:.3g} B over {sum(got.values()):.4g} B"


def masters_ok(out):
    """float32 master weights never pass through a narrower wire dtype: at the end, the share of rank 0's master
    values that a bfloat16 holds exactly (low 16 bits zero) is that of any float32 numbers, not all of them."""
    import struct
    ckpt = os.path.join(out, "checkpoints", open(os.path.join(out, "checkpoints", "latest")).read().strip())
    raw = open(os.path.join(ckpt, "rank-00000.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    total = exact = 0
    for name, e in head.items():
        if not name.endswith(".param") or e["dtype"] != "F32":
            continue
        a, b = e["data_offsets"]
        for (low,) in struct.iter_unpack("<H2x", raw[8 + n + a:8 + n + b]):
            total += 1
            exact += low == 0
    share = exact / max(1, total)
    return share < 0.5, f"{share:.1%} of masters bf16-exact"


def emulation_ok(bin_, cfg, work):
    """The float64 reference there is for an emulated world: the real one (8 ranks) computes the same losses,
    to 1e-9 relative (docs/emulation.md)."""
    f64 = {"model.dtype": "float64", "model.compute_dtype": "float64", "parallel.reduce_dtype": "float64",
           "optim.lr": "3e-3"}
    emulated = os.path.join(work, "emulated64")
    world, args = command(bin_, cfg, emulated, f64)
    if run(bin_, world, args, emulated + ".log") != 0:
        return False, "float64 emulated run failed: " + tail(emulated + ".log")
    real = os.path.join(work, "real64")
    world, args = command(bin_, dict(cfg, **{"parallel.emulate": ""}), real, f64)
    i = args.index("--groups") if "--groups" in args else -1
    if i >= 0:
        args[i:i + 2] = ["--group-size", "2"]
    if run(bin_, 8, args, real + ".log") != 0:
        return False, "float64 real 8-rank run failed: " + tail(real + ".log")
    a, b = losses(emulated), losses(real)
    worst = max(abs(x[1] - y[1]) / abs(y[1]) for x, y in zip(a, b)) if len(a) == len(b) == STEPS else math.inf
    return worst <= 1e-9, f"float64 emulated = real 8 ranks ({worst:.1e})"


def losses(out):
    return [(s["step"], s["loss"]) for s in metrics(out, "step")]


def check_accepted(bin_, cfg, seed, work, kill=True, refinish=False):
    v = resolved(cfg)
    world, args = command(bin_, cfg, os.path.join(work, "ref"))
    ref = os.path.join(work, "ref")
    if run(bin_, world, args, ref + ".log") != 0:
        return False, "the run failed: " + tail(ref + ".log")
    steps = metrics(ref, "step")
    if not steps or not all(math.isfinite(s["loss"]) for s in steps):
        return False, "a loss is not finite"
    notes = [f"{len(steps)} steps"]
    if not v["parallel.emulate"]:  # emulated runs keep no checkpoint to read the masters from
        ok, why = masters_ok(ref)
        if not ok:
            return False, why
    if is_fl(v):
        groups = 4 if v["parallel.emulate"] else len(v["parallel.groups"].split(","))
        ok, why = audit_ok(ref, world, 2 if v["parallel.emulate"] else groups)
        if not ok:
            return False, why
        notes.append("groups equal (" + why + ")")
    if v["parallel.emulate"]:
        ok, why = emulation_ok(bin_, cfg, work)
        if not ok:
            return False, why
        notes.append(why)
    else:
        ok, why = bytes_ok(bin_, v, ref, world)
        if not ok:
            return False, "bytes: " + why
        notes.append("bytes = plan")
        if not kill:
            return True, ", ".join(notes)
        rng = random.Random(seed)
        rank = rng.randrange(world)
        # Under time-based rounds a slower group stops short of train.steps: its rank dies within its own steps.
        # Under time-based rounds a group checkpoints at rounds only, and a slower group stops short of
        # train.steps: its rank dies after the group's first round and within its own steps.
        first, last = 3, STEPS
        if v["federation.round"].startswith("seconds:"):
            rounds = metrics(ref, "round")
            sizes = [int(x) for x in v["parallel.groups"].split(",")]
            g = next(i for i, end in enumerate(itertools.accumulate(sizes)) if rank < end)
            first, last = rounds[0]["group_steps"][g] + 1, rounds[-1]["group_steps"][g]
        step = rng.randint(first, max(first, min(10, last - 1)))
        killed = os.path.join(work, "killed")
        world, args = command(bin_, cfg, killed, {"checkpoint.every": "2"})
        if run(bin_, world, args, killed + ".log", fault=f"kill:{rank}:{step}") == 0:
            return False, f"the run killed at rank {rank} step {step} exited 0"
        if run(bin_, world, args + ["--resume", "auto"], killed + ".resume.log") != 0:
            return False, "the resume failed: " + tail(killed + ".resume.log")
        resumed = metrics(killed, "resume")
        # (under time-based rounds the checkpoint is named by group 0's step, which may be past the killed rank's)
        timed = v["federation.round"].startswith("seconds:")
        if len(resumed) != 1 or not 0 < resumed[0]["step"] or (not timed and resumed[0]["step"] >= step):
            return False, f"killed at rank {rank} step {step}: no resume from a checkpoint before it"
        if losses(killed) != losses(ref):
            return False, f"killed at rank {rank} step {step}: losses after the resume from step {resumed[0]['step']} differ"
        notes.append(f"kill {rank}@{step}, resumed from {resumed[0]['step']} identically")
        if refinish:
            # The run has ended: resuming it once more is refused before anything is written, never waited on.
            rc = run(bin_, world, args + ["--resume", "auto"], killed + ".again.log")
            if rc != 2 or "nothing left to train" not in open(killed + ".again.log").read():
                return False, f"resuming the finished run: exit {rc}, " + tail(killed + ".again.log")
            notes.append("finished run refused")
    return True, ", ".join(notes)


def check_refused(bin_, rule, cfg, extra, work):
    out = os.path.join(work, "refused")
    world, args = command(bin_, cfg, out, extra)
    rc = run(bin_, world, args, out + ".log", ranks_dir=out + ".ranks")
    errors = []
    for root, _, files in os.walk(out + ".ranks"):
        for f in files:
            if f == "stderr":
                errors += [l.strip() for l in open(os.path.join(root, f)) if "fedshard: error" in l]
    keys = {c["key"] for c in rule["all"] + rule["any"]}
    named = any(k in e or k.split(".")[1] in e for k in keys for e in errors)
    written = os.path.exists(os.path.join(out, "metrics.jsonl")) or os.path.exists(os.path.join(out, "config.json"))
    ok = rc == 2 and len(errors) == 1 and named and not written
    return ok, (errors[0].split("error: ", 1)[-1][:110] if errors else f"exit {rc}, no error line")


def tail(log):
    with open(log) as f:
        lines = [l.strip() for l in f if l.strip()]
    return lines[-1][:160] if lines else "(no output)"


def make_corpus(work, bin_):
    raw = os.path.join(work, "raw")
    lic = "/usr/share/common-licenses"
    sources = {"gpl": ["GPL-3", "GPL-2"], "lgpl": ["LGPL-2.1", "LGPL-3"], "apache": ["Apache-2.0", "Artistic"],
               "mozilla": ["MPL-2.0", "GFDL-1.3"]}
    for src, files in sources.items():
        os.makedirs(os.path.join(raw, src), exist_ok=True)
        for f in files:
            shutil.copy(os.path.join(lic, f), os.path.join(raw, src, f))
    data = os.path.join(work, "corpus")
    subprocess.check_call([bin_, "prepare", "--input", raw, "--out", data, "--val-fraction", "0.5"],
                          stdout=subprocess.DEVNULL)
    return data


def record(run_dir, to):
    """A configuration's metrics.jsonl and audit files, at their paths under its run directory."""
    for root, _, files in os.walk(run_dir):
        for f in files:
            if f == "metrics.jsonl" or (os.path.basename(root) == "audit" and f.endswith(".jsonl")):
                dst = os.path.join(to, os.path.relpath(os.path.join(root, f), run_dir))
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy(os.path.join(root, f), dst)


def describe(cfg):
    short = {"parallel.strategy": "", "parallel.groups": "g", "federation.overlap": "ov", "federation.round": "rd",
             "federation.compress": "cmp", "parallel.reduce_dtype": "red", "federation.normalize": "nrm",
             "federation.outer_optimizer": "out", "federation.inner_state": "in", "train.grad_accum": "acc",
             "parallel.emulate": "emu", "data.partition": "part", "model.kernels": "", "model.cross_entropy": "ce"}
    return " ".join(f"{short.get(k, k)}={x}" if short.get(k, k) else x for k, x in cfg.items() if x != "")


def libtorch_has_float8(bin_):
    """LibTorch 2.5 and later has _scaled_mm (kernels/float8_linear.h): `fedshard --version` names the LibTorch."""
    version = subprocess.check_output([bin_, "--version"], text=True)
    major, minor = (int(x) for x in version.split("LibTorch ", 1)[1].split(".")[:2])
    return (major, minor) >= (2, 5)


def main():
    global DATA, FLOAT8_LIBTORCH
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("--seed", type=int, default=26)
    p.add_argument("--full", action="store_true")
    p.add_argument("--only", type=int, default=-1)
    p.add_argument("--part", default="0/1")
    p.add_argument("--first", action="store_true")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--record")
    a = p.parse_args()
    bin_ = os.path.abspath(a.bin)
    declared = json.loads(subprocess.check_output([bin_, "options", "--json"]))
    UNRECOVERED[:] = declared["in_job_recovery"]["not_when"]
    for r in UNRECOVERED:
        if r["computed"] and r["computed"] not in COMPUTED:
            sys.exit(f"pairwise: in-job recovery's rule {r['name']} computes '{r['computed']}', which this harness "
                     "does not know")
    FLOAT8_LIBTORCH = libtorch_has_float8(bin_)
    space = Space(declared)
    if a.full:
        part, parts = (int(x) for x in a.part.split("/"))
        configs, want, infeasible = product(space)[part::parts], set(), set()
    else:
        configs, want, infeasible = covering_array(space, a.seed)
    covered = set()
    for c in configs:
        covered |= pairs_of(c, space.factors)
    singles = [] if a.full else base_choice(space, configs)
    negatives = refusal_configs(space)
    work = tempfile.mkdtemp(prefix="fedshard-pairwise-")
    fails = 0
    try:
        DATA = make_corpus(work, bin_)
        print(f"{len(configs)} accepted configurations over {len(space.factors)} options, {len(singles)} base-choice "
              f"ones, {len(negatives)} refused ones (one per declared rule)")
        # Each configuration in its own directory, a.jobs at a time (a run is mostly process start-up, which one
        # core does serially); results print in table order.
        jobs = []
        # Whether a checkpoint ends the run is decided by the round kind alone (the step, or under time-based
        # rounds the groups' steps): the first killed configuration of each kind also resumes its finished run.
        refinish, kinds = set(), set()
        for i, cfg in enumerate(configs):
            kind = cfg["federation.round"].split(":")[0]
            if not resolved(cfg)["parallel.emulate"] and kind not in kinds:
                kinds.add(kind)
                refinish.add(i)
        for i, cfg in enumerate(configs):
            if a.only < 0 or i == a.only:
                jobs.append((f"c{i}", f"{i:3d} {describe(cfg)}",
                             lambda d, i=i, cfg=cfg: check_accepted(bin_, cfg, a.seed * 1000 + i, d,
                                                                   refinish=a.only == i or i in refinish)))
        if a.only < 0:
            # The base-choice configurations: every invariant but the kill and resume (the pairs exercise it).
            for j, cfg in enumerate(singles):
                jobs.append((f"b{j}", f"base {j:2d} {describe(cfg)}",
                             lambda d, j=j, cfg=cfg: check_accepted(bin_, cfg, a.seed * 1000 + len(configs) + j, d,
                                                                   kill=False)))
            for j, (rule, cfg, extra) in enumerate(negatives):
                jobs.append((f"r{j}", f"refused {rule['name']}: {describe(cfg)} "
                             f"{' '.join(f'{k}={x}' for k, x in extra.items())}",
                             lambda d, rule=rule, cfg=cfg, extra=extra: check_refused(bin_, rule, cfg, extra, d)))

        def check(job):
            name, _, fn = job
            d = os.path.join(work, name)
            os.makedirs(d)
            ok, why = fn(d)
            if a.record:
                record(d, os.path.join(a.record, name))
            if ok:
                shutil.rmtree(d, ignore_errors=True)
            return ok, why

        with concurrent.futures.ThreadPoolExecutor(max_workers=1 if a.first else a.jobs) as pool:
            futures = [pool.submit(check, job) for job in jobs]
            for (_, label, _), fut in zip(jobs, futures):
                ok, why = fut.result()
                fails += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {label}: {why}", flush=True)
                if not ok and a.first:
                    for f in futures:
                        f.cancel()
                    break
    finally:
        if fails == 0:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"runs kept in {work}")
    if not a.full:
        reachable = want - infeasible
        print(f"pair coverage: {len(covered & reachable)} of {len(reachable)} pairs that an accepted configuration "
              f"can hold ({100.0 * len(covered & reachable) / max(1, len(reachable)):.1f}%); {len(infeasible)} pairs "
              "only refused configurations hold (covered by the refusal runs)")
    if fails:
        print(f"{fails} configuration(s) failed")
        return 1
    print("every configuration holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
