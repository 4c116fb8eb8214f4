#!/usr/bin/env bash
# Tokenizes data/raw/brown (from fetch-brown.sh) into data/brown with the bytes tokenizer, unless already done.
# Usage: scripts/prepare-brown.sh BUILD_DIR
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
die() {
  echo "prepare-brown: error: $*" >&2
  exit 1
}
build=$(cd "$1" 2>/dev/null && pwd) || die "no build directory $1"
[ -x "$build/fedshard" ] || die "$build/fedshard is not built"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -f data/brown/manifest.json ]; then
  echo "prepare-brown: data/brown already prepared"
  exit 0
fi
[ -f data/raw/brown/.complete ] || die "data/raw/brown is missing or incomplete (run scripts/fetch-brown.sh)"
"$build/fedshard" prepare --input data/raw/brown --out data/brown --tokenizer bytes --val-fraction 0.05 --seed 0
