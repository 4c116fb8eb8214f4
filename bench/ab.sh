#!/usr/bin/env bash
# Two builds of fedshard on the same training run, alternated (A B A B ...) so that the machine's drift falls on
# both: for a change's before/after figure in docs/perf.md. Prints, per binary and run, the mean step time, the
# mean time in round calls of the steps that held a round (time_s.round), tokens/s and the largest peak resident
# set of a rank (the summary's peak_rss_mb_max), then each one's median.
# Usage: bench/ab.sh BIN_A BIN_B [REPEATS] -- MPIRUN_NP TRAIN_ARGS...
#   e.g. bench/ab.sh /tmp/fedshard-before build/fedshard 3 -- 4 --config configs/demo.toml --strategy fl-fsdp
#        --group-size 2 --steps 24 --threads 1 --link inter-group=1Gbit/s,1ms
set -euo pipefail
a=$(realpath "$1") b=$(realpath "$2")
shift 2
repeats=3
if [ "${1-}" != "--" ]; then repeats=$1; shift; fi
[ "${1-}" = "--" ] || { echo "usage: bench/ab.sh BIN_A BIN_B [REPEATS] -- NP TRAIN_ARGS..." >&2; exit 2; }
shift
np=$1
shift
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq "$repeats"); do
  for side in a b; do
    bin=$a
    [ "$side" = b ] && bin=$b
    mpirun --oversubscribe --allow-run-as-root -np "$np" "$bin" train "$@" --out "$out/$side-$i" >"$out/$side-$i.log" 2>&1 ||
      { echo "run $side-$i failed:" >&2; tail -3 "$out/$side-$i.log" >&2; exit 1; }
  done
done
python3 - "$out" "$repeats" "$a" "$b" <<'EOF'
import json, statistics, sys
out, repeats, names = sys.argv[1], int(sys.argv[2]), {"a": sys.argv[3], "b": sys.argv[4]}
print("| binary | run | step s | round s (steps with a round) | tok/s | peak RSS MB |")
print("|---|---|---|---|---|---|")
medians = {}
for side in "ab":
    rows = []
    for i in range(1, repeats + 1):
        steps = [j for j in map(json.loads, open(f"{out}/{side}-{i}/metrics.jsonl")) if j["type"] == "step"][1:]
        step = statistics.mean(s["time_s"]["total"] for s in steps)
        rounds = [s["time_s"]["round"] for s in steps if s["aggregated"]]
        rnd = statistics.mean(rounds) if rounds else 0.0
        tok = statistics.mean(s["tok_per_s"] for s in steps)
        rss = [j for j in map(json.loads, open(f"{out}/{side}-{i}/metrics.jsonl")) if j["type"] == "summary"][-1]
        rows.append((step, rnd, tok, rss["peak_rss_mb_max"]))
        print(f"| {side}: {names[side]} | {i} | {step:.4f} | {rnd:.4f} | {tok:.0f} | {rows[-1][3]:.0f} |")
    medians[side] = [statistics.median(r[k] for r in rows) for k in range(4)]
for side in "ab":
    m = medians[side]
    print(f"| {side} median | | {m[0]:.4f} | {m[1]:.4f} | {m[2]:.0f} | {m[3]:.0f} |")
a, b = medians["a"], medians["b"]
print(f"b/a: step {b[0] / a[0]:.3f}, round {b[1] / a[1] if a[1] else float('nan'):.3f}, tok/s {b[2] / a[2]:.3f}, "
      f"peak RSS {b[3] / a[3]:.3f}")
EOF
