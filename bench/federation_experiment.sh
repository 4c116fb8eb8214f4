#!/usr/bin/env bash
# Issue 4's experiment: 8 ranks (4 emulated nodes of 2), `small` on Brown, identical hyperparameters and
# steps for fsdp, hsdp (H=2), fl-fsdp (S=2, K=8) and fl-hsdp (S=4, H=2, K=8), with iid and by-source
# partitions. Prints the Markdown table of `fedshard report` (final global val perplexity, tok/s, bytes per
# tier per step) and writes the figures to docs/results/federation/.
# fsdp and hsdp have one group, so a partition cannot change them: they run once and serve both rows.
# Usage: bench/federation_experiment.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-64}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
common=(--config configs/demo.toml --steps "$steps" --batch-size 4 --eval-every 16 --set eval.windows=128
        --threads 1 --ranks-per-node 2)
runs=()
run() {
  local name=$1
  shift
  local out=runs/exp4-$name
  echo "== $name" >&2
  mpirun --oversubscribe --allow-run-as-root -np 8 "$build/fedshard" train "${common[@]}" "$@" --out "$out" >/dev/null 2>&1
  runs+=("$out")
}
run fsdp --strategy fsdp
run hsdp --strategy hsdp --shard-size 2
for part in iid by-source; do
  run "fl-fsdp-$part" --strategy fl-fsdp --group-size 2 --sync-every 8 --partition "$part"
  run "fl-hsdp-$part" --strategy fl-hsdp --group-size 4 --shard-size 2 --sync-every 8 --partition "$part"
done
"$build/fedshard" report "${runs[@]}" --out docs/results/federation | grep '^|'
