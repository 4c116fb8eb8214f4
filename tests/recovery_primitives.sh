#!/usr/bin/env bash
# Lost ranks under ULFM (tests/recovery_primitives.cpp): both ranks of group 2 killed, then one rank of it (its
# partner must leave too, comm/survivors.h says why). Every survivor sees the loss, agrees on the lost ranks and
# averages across the 3 kept groups over rebuilt communicators; no rank hangs.
# Usage: recovery_primitives.sh PROGRAM
set -u
source "$(dirname "${BASH_SOURCE[0]}")/train_helpers.sh"
prog=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

scenario() {  # NAME KILLED... : survivors' files must say the same
  local name=$1
  shift
  local dir="$tmp/$name"
  mkdir -p "$dir"
  # -k: an mpirun that ignores the TERM of a hang is killed, so the survivors' files are still read and reported.
  timeout -k 10 120 mpirun --with-ft ulfm --oversubscribe --allow-run-as-root -np 8 "$prog" "$dir" "$@" \
    >"$dir/mpirun.log" 2>&1
  local rc=$? before=$fails
  [ "$rc" -lt 124 ] || fail "$name: mpirun timed out or was killed (exit $rc): $(tail -3 "$dir/mpirun.log" | tr "\n" " ")"
  local killed=" $* " lost_groups=" 2"
  for r in 0 1 2 3 4 5 6 7; do
    local f="$dir/rank.$r"
    grep -q "^before: world sum 8$" "$f" 2>/dev/null || fail "$name: rank $r did not take part before the loss"
    if [[ "$killed" == *" $r "* ]]; then
      [ "$(wc -l <"$f")" -eq 1 ] || fail "$name: killed rank $r went on"
      continue
    fi
    grep -q "^peer lost$" "$f" || fail "$name: rank $r saw no PeerLost: $(tail -1 "$f")"
    grep -q "^lost: $*$" "$f" || fail "$name: rank $r: $(grep '^lost' "$f"), want lost: $*"
    grep -q "^lost groups:$lost_groups$" "$f" || fail "$name: rank $r: $(grep '^lost groups' "$f")"
    if [ "$r" -ge 4 ] && [ "$r" -le 5 ]; then
      grep -q "^left$" "$f" || fail "$name: rank $r of the lost group did not leave"
    else
      # Kept groups 0, 1, 3: the segment sum over them of (group id + 1) is 1 + 2 + 4.
      grep -q "^groups 3x2, segments [1-9][0-9]*, segment sum 7$" "$f" ||
        fail "$name: rank $r: $(grep '^groups' "$f" || echo 'no average after the regroup')"
    fi
    grep -q "^done$" "$f" || fail "$name: rank $r did not finish"
  done
  [ "$fails" -eq "$before" ] && ok "$name: survivors $(grep -l '^done$' "$dir"/rank.* | wc -l) of 8, lost groups$lost_groups, mpirun exit $rc"
}

scenario "group 2 lost (ranks 4 and 5 killed)" 4 5
scenario "one rank of group 2 lost (rank 5 killed)" 5
[ "$fails" -eq 0 ]
