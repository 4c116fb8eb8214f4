#!/usr/bin/env bash
# The inter-group codecs at equal tokens (issue 52, item 2): the same data, seeds and steps for every codec;
# per codec and seed the inter-group bytes per round (counted by the Ledger: the step lines' bytes.inter_group
# summed over the run, divided by the rounds), their ratio to float32 rounds, the final validation perplexity
# and its gap to float32 rounds on the same seed; then the mean over the seeds.
# ARM=demo: `small` (configs/demo.toml) on Brown, 8 ranks, fl-fsdp in four groups of 2, K = 8, 2 x 256 tokens
#   per rank per step, lr 3e-3, the global model evaluated on 64 windows.
# ARM=tuned4: docs/results.md section 7.3's tuned 4-group arm (`tiny`, W = 512 as 4 groups of 128, seq 64,
#   micro-batch 2, lr 1e-2, K = 8, AdamW 0.9/0.95, weight decay 0.1, no clipping, 10% warm-up then cosine to 0,
#   512 validation windows) on 8 real ranks, 4 groups of 2, each rank accumulating 64 micro-batches of 2: the
#   arm's batch, data, lr, K and steps with a real rank group per federation group (compressed rounds need one
#   group per real group, which the emulation of section 7, holding every virtual group in one real group,
#   refuses). `none` is run again as the reference; it reproduces section 7.3's emulated runs.
# ARM=research4: the same at the research's lr 3e-4 (section 7.1's regime; its arms' 128 and 16 groups would
#   need a real rank group each).
# ARM=pair2: a small frontier for many codec settings: `tiny` on Brown, 2 ranks as 2 groups of 1 (fl-ddp), seq 64,
#   batch 4, lr 1e-2, K = 4, the global model evaluated on 64 windows (256 steps: 64 rounds in about a minute).
# Runs are kept under docs/results/codecs/ARM/.
# A codec entry may carry federation options after commas, e.g. "topk:0.035,topk_values=levels,sparse_mean=sparsified"
# (each KEY=VALUE is --set federation.KEY=VALUE, a KEY with a dot as it is; "block=N" is federation.compress_block).
# Usage: bench/codecs.sh [BUILD_DIR] [STEPS] [SEEDS...]   env: ARM (demo), CODECS ("none int8 int4 topk:0.05 topk:0.02"),
#   EVALS (evaluations per run: 4)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-64}
shift $(($# < 2 ? $# : 2))
seeds=("${@:-1}")
arm=${ARM:-demo}
codecs=${CODECS:-none int8 int4 topk:0.05 topk:0.02}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
case $arm in
  demo) common=(--config configs/demo.toml --batch-size 2 --set eval.windows=64 --eval-every "$steps") ;;
  tuned4|research4)
          lr=1e-2
          [ "$arm" = research4 ] && lr=3e-4
          common=(--model tiny --data data/brown --seq-len 64 --batch-size 2 --grad-accum 64 --lr "$lr"
                  --eval-every $((steps / ${EVALS:-4})) --set eval.windows=512 --set federation.eval_after_sync=false
                  --set optim.min_lr_ratio=0 --set optim.grad_clip=0 --set optim.beta1=0.9 --set optim.beta2=0.95
                  --set optim.weight_decay=0.1) ;;
  pair2) common=(--model tiny --data data/brown --seq-len 64 --batch-size 4 --lr 1e-2 --eval-every $((steps / ${EVALS:-4}))
                --set eval.windows=64 --set federation.eval_after_sync=false) ;;
  *) echo "ARM must be demo, tuned4, research4 or pair2, not '$arm'" >&2; exit 1 ;;
esac
if [ "$arm" = pair2 ]; then
  ranks=2
  common+=(--threads 1 --steps "$steps" --sync-every 4 --strategy fl-ddp --group-size 1)
else
  ranks=8
  common+=(--threads 1 --steps "$steps" --sync-every 8 --strategy fl-fsdp --group-size 2)
fi
out=docs/results/codecs/$arm
[ "$steps" = 64 ] || out+=-$steps  # 64-step runs are section 8.1's first table
mkdir -p runs "$out"
runs=()
for seed in "${seeds[@]}"; do
  for codec in $codecs; do
    name=codec-$arm-s$seed-$(echo "$codec" | tr -d ':' | tr ',=' '-_')
    IFS=, read -r -a parts <<<"$codec"
    sets=()
    for kv in "${parts[@]:1}"; do
      [ "${kv%%=*}" = block ] && kv=compress_block=${kv#*=}
      [[ "${kv%%=*}" == *.* ]] || kv=federation.$kv
      sets+=(--set "$kv")
    done
    if [ ! -f "$out/$name/metrics.jsonl" ]; then
      echo "== $codec, seed $seed" >&2
      rm -rf "runs/$name"
      mpirun --oversubscribe --allow-run-as-root -np "$ranks" "$build/fedshard" train "${common[@]}" --seed "$seed" \
        --compress "${parts[0]}" "${sets[@]}" --out "runs/$name" >"runs/$name.log" 2>&1 ||
        { echo "$codec: failed (runs/$name.log)" >&2; exit 1; }
      mkdir -p "$out/$name"
      cp "runs/$name/metrics.jsonl" "runs/$name/config.json" "$out/$name/"
    fi
    runs+=("$codec@$seed@$out/$name")
  done
done
python3 - "${runs[@]}" <<'PY' | tee "$out/table.md"
import collections, json, statistics, sys
rows = collections.defaultdict(dict)  # codec -> seed -> (bytes per round, ppl)
for arg in sys.argv[1:]:
    codec, seed, path = arg.split("@", 2)
    lines = [json.loads(l) for l in open(path + "/metrics.jsonl")]
    rounds = sum(1 for l in lines if l.get("type") == "step" and l.get("aggregated"))
    sent = sum(l["bytes"]["inter_group"] for l in lines if l.get("type") == "step")
    ppl = [l["val_ppl"] for l in lines if l.get("type") == "eval" and l.get("model") == "global"][-1]
    rows[codec][seed] = (sent / max(rounds, 1), ppl)
base = rows.get("none")
seeds = sorted({s for r in rows.values() for s in r})
print("| codec | inter-group B per round (rank 0) | x fewer than float32 | "
      + " | ".join(f"val ppl seed {s}" for s in seeds) + " | mean | gap to float32, per seed | mean gap |")
print("|---|---|---|" + "---|" * len(seeds) + "---|---|---|")
for codec, r in rows.items():
    b = statistics.mean(v[0] for v in r.values())
    ppls = [r[s][1] if s in r else float("nan") for s in seeds]
    gaps = [100 * (r[s][1] / base[s][1] - 1) for s in seeds if base and s in r and s in base]
    ratio = statistics.mean(v[0] for v in base.values()) / b if base else float("nan")
    gap_cells = (", ".join(f"{g:+.2f}%" for g in gaps) + f" | {statistics.mean(gaps):+.2f}% |") if gaps else " | |"
    print(f"| {codec} | {b:,.0f} | {ratio:.1f} | " + " | ".join(f"{p:.3f}" for p in ppls)
          + f" | {statistics.mean(ppls):.3f} | " + gap_cells)
PY
