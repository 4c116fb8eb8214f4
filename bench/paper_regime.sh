#!/usr/bin/env bash
# The paper's batch regime on one box (issue 14): every run is an emulated world of W virtual ranks
# (parallel.emulate) played by 2 real ranks, from the same seed and hyperparameters (AdamW, one lr schedule,
# per-rank micro-batch fixed, K = 8), on the `tiny` preset over the same number of tokens (EPOCHS passes over
# Brown's training split):
#  - the paper's four layouts at W = W_MAX: fsdp over all W; fl-fsdp with W/4 groups of 4; hsdp with H = 4;
#    fl-hsdp with W/32 groups of 32 and H = 4;
#  - fsdp and fl-fsdp (groups of 4) at W = 8 and 32 as well: does FL's advantage at equal tokens grow with W?
# Prints and writes (docs/results/paper_regime/) the table: strategy, virtual layout, global batch per
# optimizer step in tokens, steps, final val ppl (equal tokens), ppl at equal PREDICTED time on the paper's
# cluster (each step priced at `fedshard plan --paper`'s step time for its strategy), ratio to fsdp; and the
# figures (fedshard report: ppl vs tokens for the sweep, ppl vs predicted hours on 512 A100 for W_MAX).
# Usage: bench/paper_regime.sh [BUILD_DIR]    (after make build; fetches and prepares Brown if needed)
#   env: EPOCHS (default 3), W_MAX (512), BATCH (2), SEQ (64), LR (3e-3)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || make -s data/brown/manifest.json BUILD="$build"  # as make demo does
epochs=${EPOCHS:-3} wmax=${W_MAX:-512} batch=${BATCH:-2} seq=${SEQ:-64} lr=${LR:-3e-3} k=8
out=docs/results/paper_regime
mkdir -p "$out" runs
train_tokens=$(python3 -c "
import json
m = json.load(open('data/brown/manifest.json'))
print(sum(s['tokens'] for s in m['shards'] if s['split'] == 'train'))")

train() {  # NAME W ARGS...: EPOCHS x the training split, in whole rounds of K steps
  local name=$1 w=$2
  shift 2
  local steps=$(( (epochs * train_tokens / (w * batch * seq)) / k * k ))
  [ "$steps" -ge $((2 * k)) ] || steps=$((2 * k))
  local every=$(( steps / 8 / k * k ))
  [ "$every" -ge "$k" ] || every=$k
  echo "== $name: W=$w, $steps steps, eval every $every" >&2
  rm -rf "runs/$name"
  mpirun --oversubscribe --allow-run-as-root -np 2 "$build/fedshard" train --model tiny --data data/brown \
    --seq-len "$seq" --batch-size "$batch" --lr "$lr" --steps "$steps" --sync-every "$k" --threads 1 --seed 0 \
    --eval-every "$every" --set eval.windows=512 --set federation.eval_after_sync=false \
    --out "runs/$name" "$@" >"runs/$name.log" 2>&1 || { echo "run $name failed: runs/$name.log" >&2; exit 1; }
}

main=() sweep=()
train paper-fsdp-$wmax "$wmax" --strategy fsdp --emulate "$wmax"; main+=(runs/paper-fsdp-$wmax)
train paper-fl-fsdp-$wmax "$wmax" --strategy fl-fsdp --emulate "$((wmax / 4))x4"; main+=(runs/paper-fl-fsdp-$wmax)
train paper-hsdp-$wmax "$wmax" --strategy hsdp --shard-size 4 --emulate "$wmax"; main+=(runs/paper-hsdp-$wmax)
if [ "$wmax" -ge 32 ]; then
  train paper-fl-hsdp-$wmax "$wmax" --strategy fl-hsdp --shard-size 4 --emulate "$((wmax / 32))x32"
  main+=(runs/paper-fl-hsdp-$wmax)
fi
for w in 8 32; do
  [ "$w" -lt "$wmax" ] || continue
  train paper-fsdp-$w "$w" --strategy fsdp --emulate "$w"
  train paper-fl-fsdp-$w "$w" --strategy fl-fsdp --emulate "$((w / 4))x4"
  sweep+=(runs/paper-fsdp-$w runs/paper-fl-fsdp-$w)
done
sweep+=(runs/paper-fsdp-$wmax runs/paper-fl-fsdp-$wmax)

"$build/fedshard" plan --paper --json >"$out/plan.json"
"$build/fedshard" report "${main[@]}" --time-from-plan "$out/plan.json" --out "$out/w$wmax" >/dev/null
"$build/fedshard" report "${sweep[@]}" --out "$out/sweep" >/dev/null
python3 bench/paper_table.py "$out/plan.json" "${main[@]}" -- "${sweep[@]}" | tee "$out/table.md"
echo "figures: $out/w$wmax/ppl_vs_predicted_time.png, $out/w$wmax/ppl_vs_tokens.png, $out/sweep/ppl_vs_tokens.png" >&2
