#!/usr/bin/env python3
"""The chaos test run as a soak (tests/chaos.py --minutes), and its table: per configuration the trials, the kills,
how many were recovered in the job, ended as declared, ended by a second loss during a recovery (Open MPI's shrink
or agreement stalled or crashed) or by the failure watch after a recovery stalled, the trials killed after the
run's end, the hangs, and the times from the kill to
the next step (recovered) or to the job's exit (ended), median and max.

Usage: chaos_soak.py FEDSHARD_BINARY [--minutes 60] [--seed S] [--keep DIR]
(the binary of a ULFM build for in-job recovery: build-cuda/fedshard, with the venv's mpirun first on PATH; `make
soak` does both)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))


def fmt(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} / {max(values):.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--keep", help="keep every trial's files there (to read a failure's rank output)")
    a = ap.parse_args()
    table = tempfile.mktemp(prefix="chaos-soak-", suffix=".jsonl")
    rc = subprocess.run([sys.executable, os.path.join(here, "..", "tests", "chaos.py"), a.binary, "--minutes",
                         str(a.minutes), "--seed", str(a.seed), "--table", table] +
                        (["--keep", a.keep] if a.keep else [])).returncode
    rows = [json.loads(l) for l in open(table)]
    by = {}
    for r in rows:
        by.setdefault(r["config"], []).append(r)
    print(f"\n{len(rows)} trials, {sum(r['kills'] for r in rows)} kills, "
          f"{sum(r['outcome'] == 'HANG' for r in rows)} hangs, {sum(bool(r['problems']) for r in rows)} failed\n")
    print("| configuration | trials | kills | recovered in the job | ended (declared) | ended (a loss during a "
          "recovery) | ended (recovery stalled) | killed after the end | hangs | failed | kill to next step, s "
          "(median / max) | kill to exit, s (median / max) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in sorted(by):
        rs = [r for r in by[name] if r["kills"] > 0]
        rec = [r for r in rs if r["outcome"] == "recovered"]
        ended = [r for r in rs if r["outcome"].startswith("ended")]
        during = [r for r in ended if r["outcome"] == "ended (a loss during a recovery)"]
        stalled = [r for r in ended if r["outcome"] == "ended (recovery stalled)"]
        print(f"| {name} | {len(rs)} | {sum(r['kills'] for r in rs)} | {len(rec)} | "
              f"{len(ended) - len(during) - len(stalled)} | {len(during)} | {len(stalled)} | "
              f"{sum(r['outcome'] == 'killed after the end' for r in rs)} | "
              f"{sum(r['outcome'] == 'HANG' for r in rs)} | {sum(bool(r['problems']) for r in rs)} | "
              f"{fmt([r['kill_to_next'] for r in rec])} | {fmt([r['kill_to_exit'] for r in ended])} |")
    seen = {}
    for r in rows:
        for s in r["seen"]:
            if not s.startswith("error"):
                seen[s] = seen.get(s, 0) + 1
    print("\nwhere the survivors learned of the losses: " + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())))
    os.remove(table)
    sys.exit(rc)


if __name__ == "__main__":
    main()
