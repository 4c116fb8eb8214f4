#!/usr/bin/env bash
# The inter-group codecs at equal tokens (issue 52, item 2, reduced): `small` on Brown, 8 ranks, fl-fsdp in four
# groups of 2, K = 8, the same data, seed and steps for every codec; per codec the inter-group bytes per round
# (counted by the Ledger: the step lines' bytes.inter_group summed over the run, divided by the rounds), their
# ratio to float32 rounds, the final validation perplexity and its gap to float32 rounds.
# Usage: bench/codecs.sh [BUILD_DIR] [STEPS] [SEED]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-64}
seed=${3:-1}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
mkdir -p runs
common=(--config configs/demo.toml --batch-size 2 --threads 1 --set eval.windows=64 --steps "$steps"
        --eval-every "$steps" --sync-every 8 --strategy fl-fsdp --group-size 2 --seed "$seed")
runs=()
for codec in none int8 int4 topk:0.05 topk:0.02; do
  name=codec-s$seed-${codec/:/}
  echo "== $codec" >&2
  rm -rf "runs/$name"
  mpirun --oversubscribe --allow-run-as-root -np 8 "$build/fedshard" train "${common[@]}" --compress "$codec" \
    --out "runs/$name" >"runs/$name.log" 2>&1 || { echo "$codec: failed (runs/$name.log)" >&2; exit 1; }
  runs+=("$codec=runs/$name")
done
python3 - "${runs[@]}" <<'PY'
import json, sys
rows = []
for arg in sys.argv[1:]:
    codec, path = arg.split("=", 1)
    lines = [json.loads(l) for l in open(path + "/metrics.jsonl")]
    rounds = sum(1 for l in lines if l.get("type") == "step" and l.get("aggregated"))
    sent = sum(l["bytes"]["inter_group"] for l in lines if l.get("type") == "step")
    ppl = [l["val_ppl"] for l in lines if l.get("type") == "eval"][-1]
    rows.append((codec, sent / max(rounds, 1), ppl))
base_bytes, base_ppl = rows[0][1], rows[0][2]
print("| codec | inter-group B per round (rank 0) | x fewer than float32 | final val ppl | gap to float32 |")
print("|---|---|---|---|---|")
for codec, b, ppl in rows:
    print(f"| {codec} | {b:,.0f} | {base_bytes / b:.1f} | {ppl:.3f} | {100 * (ppl / base_ppl - 1):+.2f}% |")
PY
