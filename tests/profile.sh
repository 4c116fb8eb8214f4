#!/usr/bin/env bash
# train.profile_steps on 2 fsdp ranks: every rank writes its op table for exactly the profiled steps, the
# tables' self times add up to about the wall time (ops nest: counting a parent's children twice would pass
# 100% by far), the metrics mark the profiled steps, and where the LibTorch has Kineto the Chrome trace holds
# the matmuls (elsewhere one note line says why there is none).
# Usage: profile.sh FEDSHARD_BINARY
set -u
bin=$1
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/train_helpers.sh"
make_corpus
# Each rank's output goes to its own file, where no other process writes into its lines.
timeout 180 "${mpi[@]}" -np 2 $(rank_files "$tmp/ranks") "$bin" train --model tiny --data "$tmp/corpus" \
  --seq-len 32 --batch-size 2 --steps 4 --threads 1 --strategy fsdp --eval-every 0 --set eval.windows=2 \
  --profile-steps 2:3 --out "$tmp/run" >"$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; fail "profiled run exited non-zero"; }
rank_output "$tmp/ranks" >"$tmp/ranks.err"

for r in 0 1; do
  table=$tmp/run/profile/rank$r.txt
  [ -s "$table" ] || { fail "rank $r wrote no $table"; continue; }
  head -1 "$table" | grep -q "rank $r, steps 2-3 (2 profiled)" && ok "rank $r: $(head -1 "$table")" \
    || fail "rank $r table header: $(head -1 "$table")"
  share=$(awk '$1 == "cpu" && $NF == "(all)" { sub("%", "", $4); print $4 }' "$table")
  awk -v s="${share:-0}" 'BEGIN { exit !(s >= 10 && s <= 101) }' && ok "rank $r: CPU self time is $share% of the wall time" \
    || fail "rank $r: CPU self time $share% of the wall time (want 10-101%)"
  mm=$(awk '$1 == "cpu" && ($NF == "aten::mm" || $NF == "aten::addmm") { n += $2 } END { print n + 0 }' "$table")
  [ "$mm" -gt 0 ] && ok "rank $r: $mm matmul calls" || fail "rank $r: no aten::mm/addmm row"
done

marks=$($py -c "
import json
print(*[j['step'] for j in map(json.loads, open('$tmp/run/metrics.jsonl')) if j['type'] == 'step' and j['profiled']])")
[ "$marks" = "2 3" ] && ok "metrics mark steps $marks as profiled" || fail "profiled steps in metrics: '$marks'"

if [ -f "$tmp/run/profile/trace-rank0.json" ]; then
  $py -c "
import json, sys
names = {e.get('name') for e in json.load(open('$tmp/run/profile/trace-rank0.json'))['traceEvents']}
sys.exit(0 if names & {'aten::mm', 'aten::addmm'} else 1)" && ok "Chrome trace holds the matmuls" \
    || fail "trace-rank0.json is not a Chrome trace with aten::mm"
else
  grep -q "fedshard: note: no Chrome trace of the profiled steps" "$tmp/ranks.err" && ok "no Kineto: $(grep -m1 'note: no Chrome' "$tmp/ranks.err")" \
    || fail "no trace and no note saying why"
fi

if [ "$fails" -ne 0 ]; then
  echo "$fails profile case(s) failed"
  exit 1
fi
echo "all profile cases passed"
