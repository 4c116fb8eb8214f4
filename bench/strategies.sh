#!/usr/bin/env bash
# ddp / fsdp / hsdp side by side: `small` on Brown, 4 ranks as 2 emulated nodes of 2, one thread per rank,
# identical steps and batch. Prints step time, tok/s, bytes per tier per step and peak RSS per rank.
# Usage: bench/strategies.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-30}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
common=(--config configs/demo.toml --steps "$steps" --eval-every 0 --set eval.windows=8 --threads 1 --ranks-per-node 2)
runs=()
for s in ddp fsdp hsdp; do
  extra=()
  [ "$s" = hsdp ] && extra=(--shard-size 2)
  out=runs/bench-strategies-$s
  mpirun --oversubscribe --allow-run-as-root -np 4 "$build/fedshard" train "${common[@]}" --strategy "$s" "${extra[@]}" \
    --out "$out" >/dev/null 2>&1
  runs+=("$out")
done
/usr/bin/python3 bench/summarize.py "${runs[@]}"
