#!/usr/bin/env bash
# The memory estimate (plan/memory_model.h, docs/cost-model.md §9) against measured peak RSS on the CPU:
# `small` on 4 ranks, seq 256, two batch sizes, for ddp, fsdp with and without recomputation, hsdp and fl-fsdp.
# Each row: the ranks' mean peak RSS (getrusage, the run's summary) and rank 0's estimate (the run's
# config.json, resolved.memory_estimate_bytes). Usage: bench/memory_estimate.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=$(realpath "${1:-build}")
steps=${2:-3}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "memory_estimate: error: no data/brown (make demo prepares it)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
configs=("ddp" "fsdp" "fsdp --set parallel.activation_checkpointing=off" "hsdp --shard-size 2"
         "fl-fsdp --group-size 2")
echo "| strategy | batch | measured peak RSS MiB (mean of 4 ranks) | estimate MiB | estimate/measured | largest components (MiB) |"
echo "|---|---:|---:|---:|---:|---|"
for cfg in "${configs[@]}"; do
  for batch in 4 16; do
    run=$out/run
    rm -rf "$run"
    # shellcheck disable=SC2086  # cfg is a strategy and its flags
    flock /tmp/fedshard-bench.lock mpirun --oversubscribe --allow-run-as-root -np 4 "$build/fedshard" train \
      --model small --data data/brown --seq-len 256 --batch-size "$batch" --steps "$steps" --eval-every 0 \
      --threads 1 --strategy $cfg --out "$run" >"$out/log" 2>&1 ||
      { echo "memory_estimate: error: $cfg batch $batch failed:" >&2; tail -3 "$out/log" >&2; exit 1; }
    python3 - "$run" "$cfg" "$batch" <<'PY'
import json, sys
run, cfg, batch = sys.argv[1], sys.argv[2], sys.argv[3]
summary = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"summary"' in l][-1]
rss = summary["peak_rss_mb"]
measured = sum(rss) / len(rss) * 2**20
est = json.load(open(f"{run}/config.json"))["resolved"]["memory_estimate_bytes"]
parts = sorted(((v, k) for k, v in est.items() if k != "total"), reverse=True)[:4]
top = ", ".join(f"{k} {v / 2**20:.0f}" for v, k in parts)
print(f"| {cfg} | {batch} | {measured / 2**20:.0f} | {est['total'] / 2**20:.0f} | {est['total'] / measured:.2f} | {top} |")
PY
  done
done
