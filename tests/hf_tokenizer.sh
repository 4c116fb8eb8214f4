#!/usr/bin/env bash
# fedshard's tokenizer.json reader against the real Hugging Face tokenizers library (tests/hf_tokenizer.py) on
# the Brown corpus (converted from $FEDSHARD_BROWN_TARBALL, which make exports) and an adversarial set. Needs the
# venv of scripts/setup-hf.sh ($FEDSHARD_VENV, default <repo>/.venv).
# Usage: hf_tokenizer.sh FEDSHARD_BINARY
set -euo pipefail
bin=$(realpath "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${FEDSHARD_VENV:-$(dirname "$here")/.venv}
py=$venv/bin/python3
if ! [ -x "$py" ] || ! "$py" -c 'import tokenizers' 2>/dev/null; then
  echo "hf_tokenizer: no tokenizers in $venv; create it with: bash scripts/setup-hf.sh"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash "$here/../scripts/fetch-brown.sh" "$tmp/brown" >"$tmp/fetch.log" 2>&1 ||
  { echo "FAIL fetching Brown:"; tail -3 "$tmp/fetch.log"; exit 1; }
PYTHONDONTWRITEBYTECODE=1 timeout 300 "$py" "$here/hf_tokenizer.py" "$bin" "$tmp/brown" "$tmp"
