#!/usr/bin/env bash
# In-job recovery under ULFM (mpirun --with-ft ulfm): fl-fsdp, 4 groups of 2 on 8 ranks, K = 4, 12 steps. Group
# 2's ranks are killed (kill -9 from FEDSHARD_FAULT) at the round's step 8 and, separately, at step 6 between
# rounds; then only rank 5, whose partner must leave (comm/survivors.h says why). Each time the kept groups
# hold the step-8 round again without group 2 and finish the job in the same processes, no checkpoint read:
#  - steps 1-8 and the evaluations before that round are the uninterrupted run's, bit for bit;
#  - every round leaves every group with the same global model (federation.audit), 3 groups from step 8 on;
#  - steps 9-12 differ from the uninterrupted run's (group 2 is out of the average) and equal, with the
#    evaluations, those of a relaunch of the kept groups on 6 ranks from the step-8 checkpoint the recovered
#    job wrote: the rebuilt engine, the handed-over state and the data dealt over the kept groups are what a
#    fresh start from the same state gives.
# Usage: recovery.sh FEDSHARD_BINARY
set -u
bin=$(realpath "$1")
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/train_helpers.sh"
make_corpus
args=(train --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --steps 12 --threads 1 --eval-every 4
      --set eval.windows=4 --strategy fl-fsdp --group-size 2 --sync-every 4 --checkpoint-every 4
      --set federation.audit=true)

run() {  # NP OUT [ARGS...]: exit status of mpirun (under ULFM, with each rank's output in its own files)
  local np=$1 out=$2
  shift 2
  timeout 240 mpirun --with-ft ulfm --oversubscribe --allow-run-as-root ${FEDSHARD_FAULT:+-x FEDSHARD_FAULT} \
    -np "$np" $(rank_files "$out.ranks") "$bin" "${args[@]}" --out "$out" "$@" >"$out.log" 2>&1
}
# "step N loss" and "eval N val_loss" lines of a run, floats printed exactly: those before the step-8 round
# (steps 1-8, evaluations before 8) or from step 9 on.
numbers() {  # RUN before|after
  $py -c "
import json
for l in open('$1/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] not in ('step', 'eval'): continue
    before = j['step'] <= 8 if j['type'] == 'step' else j['step'] < 8
    after = j['step'] >= 9
    if (before and '$2' == 'before') or (after and '$2' == 'after'):
        print(j['type'], j['step'], repr(j['loss'] if j['type'] == 'step' else j['val_loss']))"
}
# Per round: the groups' global-model checksums (each the sum of its ranks' parts), "round: n groups, equal".
audit() {  # RUN
  $py -c "
import collections, glob, json
sums = collections.defaultdict(lambda: collections.defaultdict(int))
for f in glob.glob('$1/audit/rank-*.jsonl'):
    for l in open(f):
        j = json.loads(l)
        sums[j['round']][j['group']] = (sums[j['round']][j['group']] + j['checksum']) % 2**64
for r in sorted(sums):
    print(f\"{r}: {len(sums[r])} groups, {'equal' if len(set(sums[r].values())) == 1 else 'DIFFERENT'}\")"
}

run 8 "$tmp/ref" || fail "the uninterrupted run"

scenario() {  # NAME DIR FAULT LOST-RANKS LEAVING-RANK
  local name=$1 dir="$tmp/$2" lost_ranks=$4 leaving=$5
  FEDSHARD_FAULT=$3 run 8 "$dir"
  local rc=$? errors lost seconds
  [ "$rc" -lt 124 ] || { fail "$name: mpirun timed out (exit $rc)"; return; }
  errors=$(rank_stderr "$dir.ranks" | grep "fedshard: error")
  [ -z "$errors" ] || { fail "$name: $errors"; return; }
  grep -q '"type":"summary"' "$dir/metrics.jsonl" || { fail "$name: the job did not finish"; return; }
  lost=$($py -c "
import json
for l in open('$dir/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'group_lost': print(j['step'], j['lost_group_ids'], j['group_ids'], j['lost_ranks'], sep='|')")
  [ "$lost" = "8|[2]|[0, 1, 3]|$lost_ranks" ] || { fail "$name: group_lost line: '$lost'"; return; }
  seconds=$(grep '"type":"group_lost"' "$dir/metrics.jsonl" | sed 's/.*"recover_s":\([0-9.]*\).*/\1/')
  if [ -n "$leaving" ]; then
    rank_stderr "$dir.ranks" | grep -q "rank $leaving of group 2: .* groups \[2\] leave the job, which goes on with groups \[0,1,3\]" ||
      { fail "$name: rank $leaving did not say it leaves"; return; }
  fi
  cmp -s <(numbers "$dir" before) <(numbers "$tmp/ref" before) ||
    { fail "$name: steps 1-8 differ from the uninterrupted run"; return; }
  cmp -s <(numbers "$dir" after) <(numbers "$tmp/ref" after) &&
    { fail "$name: steps 9-12 are the 4 groups' (group 2 still averaged?)"; return; }
  [ "$(audit "$dir" | tr '\n' ' ')" = "1: 4 groups, equal 2: 3 groups, equal 3: 3 groups, equal " ] ||
    { fail "$name: audit of the rounds: $(audit "$dir" | tr '\n' ' ')"; return; }
  run 6 "$dir.relaunch" --resume "$dir/checkpoints/step-00000008" || { fail "$name: the relaunch from step 8"; return; }
  cmp -s <(numbers "$dir" after) <(numbers "$dir.relaunch" after) && [ "$(numbers "$dir" after | grep -c ^step)" -eq 4 ] ||
    { fail "$name: steps 9-12 differ from a relaunch of the kept groups"; diff <(numbers "$dir" after) <(numbers "$dir.relaunch" after) | head -4; return; }
  ok "$name: group 2 lost, the step-8 round held again by groups 0, 1, 3 in $seconds s, every round's groups equal, steps 9-12 a relaunch's (mpirun exit $rc)"
}
scenario "both ranks of group 2 killed at the round's step" at-round kill:4:8,kill:5:8 "[4, 5]" ""
scenario "both ranks of group 2 killed between rounds (step 6)" between kill:4:6,kill:5:6 "[4, 5]" ""
scenario "rank 5 killed (step 6), its partner leaves" one-rank kill:5:6 "[5]" 4
[ "$fails" -eq 0 ] && echo "every recovery case holds"
[ "$fails" -eq 0 ]
