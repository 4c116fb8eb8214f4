#!/usr/bin/env bash
# train.tensorboard read back by the real TensorBoard (tests/tensorboard_check.py): 2 fsdp ranks train 6 steps
# with event files, resume from the step-3 checkpoint (steps 4-6 trained again), and then
#  - every record's CRCs hold and TensorBoard's EventAccumulator has each scalar of each step once, equal to
#    metrics.jsonl's value (as the float32 an event holds);
#  - `tensorboard --logdir` on localhost serves the loss curve over HTTP.
# Needs the venv of scripts/setup-hf.sh ($FEDSHARD_VENV, default <repo>/.venv).
# Usage: tensorboard.sh FEDSHARD_BINARY
set -u
bin=$(realpath "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${FEDSHARD_VENV:-$(dirname "$here")/.venv}
tmp=$(mktemp -d)
trap 'pkill -f "$tmp/run/tb" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$here/train_helpers.sh"
if ! "$venv/bin/python3" -c 'import tensorboard' 2>/dev/null; then
  echo "tensorboard: no tensorboard in $venv; create it with: bash scripts/setup-hf.sh"
  exit 1
fi
make_corpus
train() {
  timeout 180 "${mpi[@]}" -np 2 "$bin" train --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --steps 6 \
    --threads 1 --strategy fsdp --eval-every 3 --set eval.windows=4 --checkpoint-every 3 --out "$tmp/run" \
    --tensorboard "$tmp/run/tb" "$@" >>"$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; fail "train $* exited non-zero"; }
}
train
# The first file as a host whose clock is 1000 s ahead would name it: the resumed run's file must still sort after
# it, as TensorBoard reads a directory's files in name order.
first=$(ls "$tmp/run/tb")
IFS=. read -r _ _ _ stamp rest <<<"$first"
mv "$tmp/run/tb/$first" "$tmp/run/tb/events.out.tfevents.$((stamp + 1000)).$rest"
train --resume "$tmp/run/checkpoints/step-00000003"
[ "$(ls "$tmp/run/tb" | grep -c '^events\.out\.tfevents\.')" = 2 ] && ok "the resumed run wrote a second event file" \
  || fail "event files: $(ls "$tmp/run/tb")"
[ "$(ls -t "$tmp/run/tb" | head -1)" = "$(ls "$tmp/run/tb" | tail -1)" ] &&
  ok "the resumed run's file sorts after the first one's, whose time is 1000 s ahead" ||
  fail "the resumed run's file does not sort last: $(ls "$tmp/run/tb")"
PYTHONDONTWRITEBYTECODE=1 timeout 240 "$venv/bin/python3" "$here/tensorboard_check.py" "$tmp/run" || fail "tensorboard_check.py"
if [ "$fails" -ne 0 ]; then
  echo "$fails tensorboard case(s) failed"
  exit 1
fi
