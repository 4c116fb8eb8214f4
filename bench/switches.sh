#!/usr/bin/env bash
# The single-device speed switches side by side on this machine (docs/perf.md): `small` on Brown, one
# process, each variant run twice, interleaved. Prints tokens/s and optimizer seconds per step.
# Usage: bench/switches.sh [BUILD_DIR] [STEPS]   (a LibTorch >= 2.4 build has every switch: build-cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
steps=${2:-30}
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
declare -A flags=(
  [baseline]="--set model.attention=math --set optim.fused=off --set train.defer_host_sync=false --set data.pin_memory=false"
  [sdpa]="--set model.attention=sdpa --set optim.fused=off --set train.defer_host_sync=false"
  [fused]="--set model.attention=math --set optim.fused=on --set train.defer_host_sync=false"
  [defer]="--set model.attention=math --set optim.fused=off --set train.defer_host_sync=true"
  [defaults]=""
)
order=(baseline sdpa fused defer defaults)
for round in 1 2; do
  for v in "${order[@]}"; do
    # shellcheck disable=SC2086
    "$build/fedshard" train --config configs/demo.toml --steps "$steps" --out "$out/$v-$round" \
      --set eval.every=0 --set eval.windows=8 --set train.peak_flops=1e11 ${flags[$v]} >/dev/null 2>&1
  done
done
python3 - "$out" "${order[@]}" <<'PY'
import json, sys, statistics
out, names = sys.argv[1], sys.argv[2:]
def load(path):
    lines = [json.loads(l) for l in open(path)]
    steps = [l for l in lines if l["type"] == "step"][1:]
    summary = [l for l in lines if l["type"] == "summary"][0]
    return summary["tok_per_s"], statistics.mean(s["time_s"]["optimizer"] for s in steps), steps[-1]["loss"]
base = None
print(f"{'variant':10} {'tok/s run 1':>12} {'tok/s run 2':>12} {'vs baseline':>12} {'optimizer ms':>13} {'last loss':>10}")
for n in names:
    r = [load(f"{out}/{n}-{i}/metrics.jsonl") for i in (1, 2)]
    tps = [x[0] for x in r]
    mean = statistics.mean(tps)
    base = base or mean
    print(f"{n:10} {tps[0]:12.0f} {tps[1]:12.0f} {mean / base:12.3f} {1e3 * statistics.mean(x[1] for x in r):13.2f} {r[0][2]:10.4f}")
PY
