#!/usr/bin/env bash
# fedshard's Hugging Face checkpoints against the real transformers (tests/hf_conformance.py): a trained model
# exported (single file and sharded) and loaded by LlamaForCausalLM, random transformers Llamas (tied, untied,
# GQA, llama3 rope scaling, bfloat16, sharded) evaluated by fedshard, greedy generation token for token, and a
# missing shard refused. Needs the venv of scripts/setup-hf.sh ($FEDSHARD_VENV, default <repo>/.venv).
# Usage: hf_conformance.sh FEDSHARD_BINARY
set -euo pipefail
bin=$(realpath "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${FEDSHARD_VENV:-$(dirname "$here")/.venv}
py=$venv/bin/python3
if ! [ -x "$py" ] || ! "$py" -c 'import transformers' 2>/dev/null; then
  echo "hf_conformance: no transformers in $venv; create it with: bash scripts/setup-hf.sh"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 \
  OMP_NUM_THREADS=1

# A small bytes-tokenized corpus: four license texts, whitespace runs squeezed so that a briefly trained model's
# greedy continuation is not just spaces; half held out for eval's windows.
mkdir -p "$tmp/raw/gnu" "$tmp/raw/other"
for f in GPL-3 LGPL-2.1; do tr -s ' \n' <"/usr/share/common-licenses/$f" >"$tmp/raw/gnu/$f"; done
for f in Apache-2.0 MPL-2.0; do tr -s ' \n' <"/usr/share/common-licenses/$f" >"$tmp/raw/other/$f"; done
"$bin" prepare --input "$tmp/raw" --out "$tmp/corpus" --val-fraction 0.5 >/dev/null

# A tiny model trained on 2 fsdp ranks (so export has to gather shards) long enough to have learned something,
# with a mid-run checkpoint; the last checkpoint is what gets exported.
timeout 120 mpirun --oversubscribe --allow-run-as-root -np 2 "$bin" train --model tiny --data "$tmp/corpus" \
  --strategy fsdp --seq-len 64 --batch-size 8 --steps 150 --checkpoint-every 75 --threads 1 --eval-every 0 \
  --set optim.lr=3e-3 --out "$tmp/run" >"$tmp/train.log" 2>&1 ||
  { echo "FAIL train"; tail -5 "$tmp/train.log"; exit 1; }
ckpt=$tmp/run/checkpoints/$(cat "$tmp/run/checkpoints/latest")

if timeout 150 "$py" "$here/hf_conformance.py" "$bin" "$tmp" "$ckpt" "$tmp/corpus"; then
  echo "all Hugging Face conformance cases passed"
else
  echo "Hugging Face conformance failed (rc $?)"
  exit 1
fi
