#!/usr/bin/env bash
# Issue 5's side-by-side: ddp, fsdp, hsdp, fl-fsdp and fl-hsdp on one config (8 ranks as 4 emulated nodes of 2,
# `small` on Brown, identical hyperparameters and steps) under one emulated three-tier network, next to what
# `fedshard plan` predicts for the same configuration. The plan is given each run's own measured compute per
# step (time_s.compute: the time the training thread did not wait on a collective, and time_s.optimizer) and
# predicts the rest: every collective's alpha-beta time and how much of it the engine's schedule hides. The
# links are slow enough that emulated time dominates the real cost of MPI on this oversubscribed box
# (otherwise real shared-memory copies, which no link model describes, would decide the step time).
# Prints the table and writes figures + report.md to docs/results/compare/.
# Usage: bench/compare.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-40}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
links=(node=200Mbit/s,20us inter-node=50Mbit/s,200us inter-group=20Mbit/s,2ms)
common=(--config configs/demo.toml --batch-size 2 --threads 1 --ranks-per-node 2 --set eval.windows=64)
declare -A spec=(
  [ddp]="--strategy ddp"
  [fsdp]="--strategy fsdp"
  [hsdp]="--strategy hsdp --shard-size 2"
  [fl-fsdp]="--strategy fl-fsdp --group-size 2 --sync-every 8"
  [fl-hsdp]="--strategy fl-hsdp --group-size 4 --shard-size 2 --sync-every 8"
)
declare -A plan_spec=([ddp]=ddp [fsdp]=fsdp [hsdp]=hsdp:H=2 [fl-fsdp]=fl-fsdp:S=2,K=8 [fl-hsdp]=fl-hsdp:S=4,H=2,K=8)
mpirun=(mpirun --oversubscribe --allow-run-as-root -np 8 "$build/fedshard" train)
link_flags=()
for l in "${links[@]}"; do link_flags+=(--link "$l"); done
runs=()
for s in ddp fsdp hsdp fl-fsdp fl-hsdp; do
  echo "== $s" >&2
  out=runs/compare-$s
  "${mpirun[@]}" "${common[@]}" ${spec[$s]} --steps "$steps" --eval-every 8 "${link_flags[@]}" --out "$out" >/dev/null 2>&1
  read -r compute optimizer < <(/usr/bin/python3 -c "
import json, statistics
s = [json.loads(l) for l in open('$out/metrics.jsonl') if '\"type\":\"step\"' in l and json.loads(l)['step'] >= 3]
print(statistics.median(x['time_s']['compute'] for x in s), statistics.median(x['time_s']['optimizer'] for x in s))")
  "$build/fedshard" plan --nodes 4 --ranks-per-node 2 --model small --vocab-size 258 --strategy "${plan_spec[$s]}" \
    --batch 2 --seq 256 --bytes-per-element 4 --compute-seconds "$compute" --optimizer-seconds "$optimizer" \
    "${link_flags[@]}" --json > "$out/plan.json"
  runs+=("$out")
done
"$build/fedshard" report "${runs[@]}" --out docs/results/compare | grep '^|'
# Bytes: every step line's measured bytes per tier against the plan's per-step bytes, plus one round on
# aggregation steps (plan.json amortises the round over K in bytes_per_step).
/usr/bin/python3 - "${runs[@]}" <<'PY'
import json, sys
bad = 0
for run in sys.argv[1:]:
    plan = json.load(open(f"{run}/plan.json"))["plans"][0]
    k = plan.get("sync_every") or 1
    lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    steps = [s for s in lines if s["type"] == "step"]
    diffs = []
    for s in steps:
        for tier, measured in s["bytes"].items():
            expected = plan["bytes_per_step"][tier] - plan["bytes_per_round"][tier] / k
            if s["aggregated"]:
                expected += plan["bytes_per_round"][tier]
            if abs(measured - expected) > 0.5:
                diffs.append(f"step {s['step']} {tier}: measured {measured:.0f}, predicted {expected:.0f}")
    print(f"{run}: bytes per tier {'exact' if not diffs else 'DIFFER'} on {len(steps)} step lines", *diffs[:3], sep="\n  ")
    bad += bool(diffs)
sys.exit(1 if bad else 0)
PY
