#!/usr/bin/env bash
# docs/federation.md's tables of refused combinations and of what a resume may change are the declaration's
# (src/train/option_space.cpp): they must equal `fedshard options --markdown`, byte for byte.
# Usage: docs_tables.sh FEDSHARD_BINARY
set -u
bin=$1
doc="$(dirname "${BASH_SOURCE[0]}")/../docs/federation.md"
got=$(sed -n '/^<!-- generated: fedshard options --markdown -->$/,/^<!-- end of generated -->$/p' "$doc" | sed '1d;$d')
want=$("$bin" options --markdown) || { echo "FAIL: fedshard options --markdown exited non-zero"; exit 1; }
if [ -z "$got" ]; then
  echo "FAIL: docs/federation.md has no generated tables"
  exit 1
fi
if [ "$got" != "$want" ]; then
  echo "FAIL: docs/federation.md's tables differ from fedshard options --markdown (regenerate them):"
  diff <(printf '%s\n' "$got") <(printf '%s\n' "$want") | head -20
  exit 1
fi
echo "ok   docs/federation.md's tables are the declared option space ($(grep -c '^| `' <<<"$want") rows)"
