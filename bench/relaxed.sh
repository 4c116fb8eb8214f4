#!/usr/bin/env bash
# Issue 13's side-by-side, `small` on Brown, 8 ranks as 4 nodes of 2, fl-fsdp in four groups of 2, K = 8,
# identical hyperparameters and steps:
#  1. federation.overlap {none, delayed, streaming:4} x federation.compress {none, int8} under bench/groups.sh's
#     three-tier link emulation (NET=netns: over bench/netns_lib.sh's tbf-shaped TCP network instead, every
#     node's link at NETNS_MBIT, default 20 Mbit/s, the emulation's inter-group rate);
#  2. stragglers (emulation only): group 1 slowed 2x (--slow group:1=2) with rounds every 8 steps and with
#     time-based rounds of T = 8 median un-slowed steps, next to the un-slowed run.
# Prints tables (the training thread's wait in round calls per step, measured on its clock; bytes per tier
# counted by the Ledger next to `fedshard plan`'s; tokens/s; val perplexity at equal tokens and at equal
# wall time) and writes figures + report.md (perplexity vs wall time) to docs/results/relaxed[-netns]/.
# Usage: bench/relaxed.sh [BUILD_DIR] [STEPS]       (NET=netns needs root)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-32}
net=${NET:-emulation}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
links=(node=200Mbit/s,20us inter-node=50Mbit/s,200us inter-group=20Mbit/s,2ms)
common=(--config configs/demo.toml --batch-size 2 --threads 1 --ranks-per-node 2 --set eval.windows=64
        --steps "$steps" --eval-every 8 --set federation.eval_after_sync=false --sync-every 8 --strategy fl-fsdp
        --group-size 2)
launch=(mpirun --oversubscribe --allow-run-as-root -np 8)
if [ "$net" = netns ]; then
  source bench/netns_lib.sh
  trap netns_down EXIT
  netns_up 8 2 "${NETNS_MBIT:-20}"
  launch=(netns_mpirun -np 8 "$netns_wrap")
  links=("node=${NETNS_MBIT:-20}Mbit/s,100us" "inter-node=${NETNS_MBIT:-20}Mbit/s,100us" "inter-group=${NETNS_MBIT:-20}Mbit/s,100us")
else
  for l in "${links[@]}"; do common+=(--link "$l"); done
fi
suffix=$([ "$net" = netns ] && echo -netns || true)

train() {  # NAME ARGS...
  local name=$1
  shift
  echo "== $name" >&2
  rm -rf "runs/$name"
  "${launch[@]}" "$build/fedshard" train "${common[@]}" "$@" --out "runs/$name" >"runs/$name.log" 2>&1
}
plan() {  # NAME OVERLAP COMPRESS: fedshard plan's bytes for the same layout and network
  "$build/fedshard" plan --nodes 4 --ranks-per-node 2 --model small --vocab-size 258 --batch 2 --seq 256 \
    --strategy fl-fsdp --group-size 2 --sync-every 8 --bytes-per-element 4 --federation-overlap "$2" --compress "$3" \
    --compute-seconds 1 "${links[@]/#/--link=}" --json >"runs/$1/plan.json"
}

runs=()
for overlap in none delayed streaming:4; do
  for compress in none int8; do
    name=relaxed$suffix-${overlap/:/}-$compress
    train "$name" --overlap "$overlap" --compress "$compress"
    plan "$name" "$overlap" "$compress"
    runs+=("runs/$name")
  done
done
"$build/fedshard" report "${runs[@]}" --out "docs/results/relaxed$suffix" >/dev/null

straggler_runs=()
if [ "$net" != netns ]; then
  T=$(/usr/bin/python3 -c "
import json, statistics
s = [json.loads(l) for l in open('runs/relaxed-none-none/metrics.jsonl')]
print(round(8 * statistics.median(j['time_s']['total'] for j in s if j['type'] == 'step' and not j['aggregated']), 2))")
  train slow-steps8 --slow group:1=2
  train slow-seconds --slow group:1=2 --round "seconds:$T"
  straggler_runs=(runs/relaxed-none-none runs/slow-steps8 runs/slow-seconds)
  "$build/fedshard" report "${straggler_runs[@]}" --out docs/results/stragglers >/dev/null
  echo "time-based rounds: T = $T s (8 median un-slowed steps)"
fi

/usr/bin/python3 - "$steps" "${runs[@]}" -- "${straggler_runs[@]}" <<'PY'
import json, statistics, sys
args = sys.argv[1:]
steps, cut = int(args[0]), args.index("--")
runs, stragglers = args[1:cut], args[cut + 1:]
load = lambda run: [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
print("\n| run | median step s | round wait s/step (steps 1..N-1) | last round s | node B/step | inter-group B "
      "per 8 steps | plan B/round | tok/s | val ppl at step 8, 16, ..., N |")
print("|---|---|---|---|---|---|---|---|---|")
for run in runs:
    lines = load(run)
    st = [j for j in lines if j["type"] == "step"]
    summary = next(j for j in lines if j["type"] == "summary")
    plan = json.load(open(f"{run}/plan.json"))["plans"][0]["per_group_rank"][0]["bytes_per_round"]["inter_group"]
    steady = [s["time_s"]["round"] for s in st if s["step"] < steps]
    ig = summary["bytes_total"]["inter_group"] / (steps / 8)
    ppl = ", ".join(f"{j['val_ppl']:.3f}" for j in lines if j["type"] == "eval" and j["step"] % 8 == 0)
    print(f"| {run.split('/')[-1]} | {statistics.median(s['time_s']['total'] for s in st):.3f} | "
          f"{sum(steady) / len(steady):.3f} | {st[-1]['time_s']['round']:.3f} | "
          f"{summary['bytes_total']['node'] / steps:,.0f} | {ig:,.0f} | {plan:,.0f} | {summary['tok_per_s']:,.0f} | {ppl} |")
if stragglers:
    print("\n| run | steps per group (last round) | job tokens | wall s | job tokens/s | vs un-slowed | "
          "val ppl (wall s) at each evaluation |")
    print("|---|---|---|---|---|---|---|")
    base = None
    for run in stragglers:
        lines = load(run)
        summary = next(j for j in lines if j["type"] == "summary")
        rounds = [j["group_steps"] for j in lines if j["type"] == "round"]
        rate = summary["tokens"] / summary["wall_s"]
        base = base or rate
        evals = ", ".join(f"{j['val_ppl']:.2f} ({j['wall_s']:.0f})" for j in lines if j["type"] == "eval")
        print(f"| {run.split('/')[-1]} | {rounds[-1] if rounds else summary['steps']} | {summary['tokens']:,} | "
              f"{summary['wall_s']:.1f} | {rate:,.0f} | {rate / base:.3f} | {evals} |")
PY
