#!/usr/bin/env python3
"""Whether two recordings of the same runs (tests/pairwise.py --record DIR, RECORD=DIR tests/recovery.sh) hold the
same behaviour: the same metrics.jsonl and audit files, line for line, every field equal but those that measure
time or memory (and the run directory's own path). For a change that must not change what training does.

Usage: same_behaviour.py BEFORE_DIR AFTER_DIR     (exit 1 and the first differing lines)
"""
import json
import os
import sys

# Fields that measure the machine, not the training: wall and step times, rates derived from them, peaks of memory.
TIMING = {"time_s", "tok_per_s", "mfu", "wall_s", "recover_s", "join_s", "peak_rss_mb", "peak_rss_mb_max",
          "peak_gpu_mb", "peak_gpu_mb_max", "peak_flops_per_rank", "comm_exposed_s", "seconds"}


def strip(value):
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def normal(line):
    j = strip(json.loads(line))
    if "checkpoint" in j and isinstance(j["checkpoint"], str):  # a path under the run's temporary directory
        j["checkpoint"] = os.path.basename(j["checkpoint"])
    return j


def files(root):
    out = set()
    for d, _, names in os.walk(root):
        out |= {os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(".jsonl")}
    return out


def main():
    before, after = sys.argv[1], sys.argv[2]
    a, b = files(before), files(after)
    problems = [f"only in {before}: {f}" for f in sorted(a - b)] + [f"only in {after}: {f}" for f in sorted(b - a)]
    lines = 0
    for f in sorted(a & b):
        x = open(os.path.join(before, f)).read().splitlines()
        y = open(os.path.join(after, f)).read().splitlines()
        lines += len(x)
        if len(x) != len(y):
            problems.append(f"{f}: {len(x)} lines before, {len(y)} after")
            continue
        for i, (p, q) in enumerate(zip(x, y)):
            if normal(p) != normal(q):
                problems.append(f"{f}:{i + 1}:\n  before {p[:300]}\n  after  {q[:300]}")
                break
    for p in problems[:20]:
        print(p)
    print(f"{len(a & b)} files, {lines} lines compared: {'the same behaviour' if not problems else f'{len(problems)} differ'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
