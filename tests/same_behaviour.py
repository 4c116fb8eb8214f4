#!/usr/bin/env python3
"""Whether two recordings of the same runs (tests/pairwise.py --record DIR, RECORD=DIR tests/recovery.sh) hold the
same behaviour: the same metrics.jsonl and audit files, line for line, every field equal but those that measure
time or memory (and the run directory's own path). For a change that must not change what training does.

One more field depends on timing: under overlapped rounds (federation.overlap) a round's bytes move on the
federation lane beside the steps, and each step line counts what that lane completed since the previous step, so
which step an overlapped round's bytes fall in varies between two runs of one binary. Step lines that differ in
their bytes alone are accepted where the run's bytes summed over its steps, per tier, are equal.

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
    lines = shifted = 0
    for f in sorted(a & b):
        x = open(os.path.join(before, f)).read().splitlines()
        y = open(os.path.join(after, f)).read().splitlines()
        lines += len(x)
        if len(x) != len(y):
            problems.append(f"{f}: {len(x)} lines before, {len(y)} after")
            continue
        totals = [{}, {}]
        moved = 0
        for i, (p, q) in enumerate(zip(x, y)):
            jp, jq = normal(p), normal(q)
            for t, j in zip(totals, (jp, jq)):
                for tier, n in (j.get("bytes", {}) if j.get("type") == "step" else {}).items():
                    t[tier] = t.get(tier, 0) + n
            if jp == jq:
                continue
            if jp.get("type") == "step" and {k: v for k, v in jp.items() if k != "bytes"} == \
                    {k: v for k, v in jq.items() if k != "bytes"}:
                moved += 1
                continue
            problems.append(f"{f}:{i + 1}:\n  before {p[:300]}\n  after  {q[:300]}")
            break
        if moved and totals[0] != totals[1]:
            problems.append(f"{f}: step bytes differ and so do their totals: {totals[0]} before, {totals[1]} after")
        shifted += moved
    for p in problems[:20]:
        print(p)
    print(f"{len(a & b)} files, {lines} lines compared ({shifted} step lines whose overlapped rounds' bytes fell in "
          f"other steps, the runs' totals equal): {'the same behaviour' if not problems else f'{len(problems)} differ'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
