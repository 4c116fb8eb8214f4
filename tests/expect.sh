# Sourced by the shell tests. expect NAME NEEDLE -- COMMAND...: passes when COMMAND exits non-zero (not by a
# timeout) with exactly one stderr line, containing NEEDLE; prints ok/FAIL and counts failures in $fails.
fails=0
expect() {
  local name=$1 needle=$2
  shift 3
  local out rc lines
  out=$(timeout 120 "$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$out" | grep -c .)
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ] || [ "$lines" -ne 1 ] || [[ "$out" != *"$needle"* ]]; then
    echo "FAIL $name: rc=$rc lines=$lines"
    printf '%s\n' "$out" | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "ok   $name: $out"
  fi
}
