#!/usr/bin/env bash
# Issue 13's side-by-side: fl-fsdp in four groups of 2 (K = 8) on 8 ranks as 4 emulated nodes of 2, under
# bench/groups.sh's three-tier link emulation, with each federation.overlap {none, delayed, streaming:4} x
# federation.compress {none, int8}; `small` on Brown, identical hyperparameters and steps. Prints a table:
# median step time, the training thread's wait in round calls per step (measured on its clock), bytes per
# tier, inter-group bytes per K steps next to `fedshard plan`'s per round, tokens/s and val perplexity at equal
# tokens; writes figures + report.md (perplexity vs wall time) to docs/results/relaxed/.
# Usage: bench/relaxed.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-32}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
links=(node=200Mbit/s,20us inter-node=50Mbit/s,200us inter-group=20Mbit/s,2ms)
link_flags=()
for l in "${links[@]}"; do link_flags+=(--link "$l"); done
common=(--config configs/demo.toml --batch-size 2 --threads 1 --ranks-per-node 2 --set eval.windows=64
        --steps "$steps" --eval-every 8 --sync-every 8 --strategy fl-fsdp --group-size 2 "${link_flags[@]}")
mpi=(mpirun --oversubscribe --allow-run-as-root)
runs=()
for overlap in none delayed streaming:4; do
  for compress in none int8; do
    name=relaxed-${overlap/:/}-$compress
    echo "== $name" >&2
    rm -rf "runs/$name"
    "${mpi[@]}" -np 8 "$build/fedshard" train "${common[@]}" --overlap "$overlap" --compress "$compress" \
      --out "runs/$name" >/dev/null 2>&1
    "$build/fedshard" plan --nodes 4 --ranks-per-node 2 --model small --vocab-size 258 --batch 2 --seq 256 \
      --strategy fl-fsdp --group-size 2 --sync-every 8 --bytes-per-element 4 --compress "$compress" \
      --federation-overlap "$overlap" --compute-seconds 1 "${links[@]/#/--link=}" --json >"runs/$name/plan.json"
    runs+=("runs/$name")
  done
done

"$build/fedshard" report "${runs[@]}" --out docs/results/relaxed | grep '^|'
/usr/bin/python3 - "$steps" "${runs[@]}" <<'PY'
import json, statistics, sys
steps, runs = int(sys.argv[1]), sys.argv[2:]
print("\n| run | median step s | round wait s/step | node B/step | inter-group B per 8 steps (rank 0) | plan B/round |"
      " tok/s | val ppl @ step 8, 16, ... |")
print("|---|---|---|---|---|---|---|---|")
for run in runs:
    lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    st = [j for j in lines if j["type"] == "step"]
    summary = next(j for j in lines if j["type"] == "summary")
    plan = json.load(open(f"{run}/plan.json"))["plans"][0]["per_group_rank"][0]["bytes_per_round"]["inter_group"]
    wait = sum(s["time_s"]["round"] for s in st) / len(st)
    ig = sum(s["bytes"]["inter_group"] for s in st) / (steps / 8)
    ppl = ", ".join(f"{j['val_ppl']:.3f}" for j in lines if j["type"] == "eval")
    print(f"| {run.split('/')[-1]} | {statistics.median(s['time_s']['total'] for s in st):.3f} | {wait:.3f} | "
          f"{statistics.mean(s['bytes']['node'] for s in st):,.0f} | {ig:,.0f} | {plan:,.0f} | "
          f"{summary['tok_per_s']:,.0f} | {ppl} |")
PY
