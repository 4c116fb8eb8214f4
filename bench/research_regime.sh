#!/usr/bin/env bash
# The research code's own training regime (issue 29), at W = 512 emulated by 2 real ranks (docs/emulation.md):
# random init, STEPS optimizer steps, AdamW lr 3e-4 (betas 0.9/0.95, weight decay 0.1), 10% warm-up then
# cosine to 0, no clipping, micro-batch 2 per rank, K = 8, the same unscaled lr for every strategy; fsdp over
# all 512, hsdp H = 4, fl-fsdp 128 groups of 4, fl-hsdp 16 groups of 32 with H = 4; each for every seed.
# Prints and writes (docs/results/research_regime/MODEL/table[-TAG].md) the final validation perplexity per seed,
# the mean and the spread of every finished run of that model and tag, and keeps each run's metrics.jsonl and
# config.json there.
# Usage: bench/research_regime.sh [BUILD_DIR]    (after make build; fetches and prepares Brown if needed)
#   env: MODEL (tiny), SEEDS ("0 1 2"), STEPS (64), SEQ (64), LR (3e-4), W (512),
#        ARMS ("fsdp hsdp fl-fsdp fl-hsdp"), G (fl-fsdp's groups, W/4), K (8), FL_ARGS (more train flags for the
#        fl-* arms), TAG (a name for the variant: runs are named research-MODEL-ARM[-TAG]-sSEED; default: lrLR,
#        gG, kK for each of LR, G, K not at its default)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || make -s data/brown/manifest.json BUILD="$build"  # as make demo does
model=${MODEL:-tiny} seeds=${SEEDS:-0 1 2} steps=${STEPS:-64} seq=${SEQ:-64} lr=${LR:-3e-4} w=${W:-512}
arms=${ARMS:-fsdp hsdp fl-fsdp fl-hsdp} groups=${G:-$((w / 4))} k=${K:-8}
tag=${TAG-}
if [ -z "$tag" ]; then
  [ "$lr" = 3e-4 ] || tag=lr$lr
  [ "$groups" = $((w / 4)) ] || tag=${tag:+$tag-}g$groups
  [ "$k" = 8 ] || tag=${tag:+$tag-}k$k
fi
read -r -a fl_args <<<"${FL_ARGS:-}"
out=docs/results/research_regime/$model
mkdir -p "$out" runs

for seed in $seeds; do
  for spec in "fsdp:--strategy fsdp --emulate $w" \
              "hsdp:--strategy hsdp --shard-size 4 --emulate $w" \
              "fl-fsdp:--strategy fl-fsdp --emulate ${groups}x$((w / groups))" \
              "fl-hsdp:--strategy fl-hsdp --shard-size 4 --emulate $((w / 32))x32"; do
    arm=${spec%%:*}
    [[ " $arms " == *" $arm "* ]] || continue
    name=research-$model-$arm${tag:+-$tag}-s$seed
    read -r -a args <<<"${spec#*:}"
    [[ $arm != fl-* ]] || args+=("${fl_args[@]}")
    if [ ! -f "$out/$name/metrics.jsonl" ]; then
      echo "== $name" >&2
      rm -rf "runs/$name"
      mpirun --oversubscribe --allow-run-as-root -np 2 "$build/fedshard" train --model "$model" --data data/brown \
        --seq-len "$seq" --batch-size 2 --lr "$lr" --steps "$steps" --sync-every "$k" --threads 1 --seed "$seed" \
        --eval-every $((steps / 4)) --set eval.windows=512 --set federation.eval_after_sync=false \
        --set optim.min_lr_ratio=0 --set optim.grad_clip=0 --set optim.beta1=0.9 --set optim.beta2=0.95 \
        --set optim.weight_decay=0.1 --out "runs/$name" "${args[@]}" >"runs/$name.log" 2>&1 ||
        { echo "run $name failed: runs/$name.log" >&2; exit 1; }
      mkdir -p "$out/$name"
      cp "runs/$name/metrics.jsonl" "runs/$name/config.json" "$out/$name/"
    fi
  done
done
# The table holds every finished run of this model and tag, not only this call's arms and seeds.
runs=()
for arm in fsdp hsdp fl-fsdp fl-hsdp; do
  for run in "$out/research-$model-$arm${tag:+-$tag}"-s*; do
    [ -f "$run/metrics.jsonl" ] && runs+=("$run")
  done
done
python3 bench/seed_table.py "${runs[@]}" | tee "$out/table${tag:+-$tag}.md"
