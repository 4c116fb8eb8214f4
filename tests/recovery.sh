#!/usr/bin/env bash
# In-job recovery under ULFM (mpirun --with-ft ulfm): fl-fsdp, 4 groups of 2 on 8 ranks, K = 4, 12 steps. Group
# 2's ranks are killed (kill -9 from FEDSHARD_FAULT, by launch rank) at the round's step 8; then only rank 5, at
# step 6 between rounds, whose partner must leave (comm/survivors.h says why), and the same with rank 1, whose
# partner is rank 0, the metrics writer; then rank 0 while it writes the step-8 checkpoint (after the round; group
# 0 leaves, the metrics writer with it); then two losses in a row: group 0 at the round's step 4, rank 6 in the
# step-8 evaluation; rank 5 at step 6, then rank 2 during that recovery; rank 5 in the end-of-run summary; in groups
# of 3,3,2, rank 6 at step 6; and under time-based rounds with a slow group, rank 5 at step 6, rank 1 at step 6 and
# rank 1 in the final checkpoint. Each time the kept groups hold the round (or the evaluation, or the checkpoint)
# again without the lost group and finish the job in the same processes, no checkpoint read:
#  - the steps and evaluations before the first loss's round are the uninterrupted run's, bit for bit;
#  - every round leaves every group with the same global model (federation.audit), with the groups left then;
#  - the steps after the last recovery differ from the uninterrupted run's and equal, with the evaluations,
#    those of a relaunch of the kept groups from the checkpoint the recovered job wrote at that round: the
#    rebuilt engine, the handed-over state and the data dealt over the kept groups are what a fresh start from
#    the same state gives;
#  - one step line for each step (the first kept rank writes those a lost writer did not, with its own group's
#    loss), one "final validation" line, printed by the first kept rank;
#  - where rank 0 is lost, TensorBoard (the venv's, $FEDSHARD_VENV) shows metrics.jsonl's steps and evaluations,
#    each once, the mirror continued by the first kept rank.
# Usage: recovery.sh FEDSHARD_BINARY   (RECORD=DIR keeps every run's metrics.jsonl and audit files there, for a
# comparison of two binaries' behaviour: tests/same_behaviour.py)
set -u
bin=$(realpath "$1")
tmp=$(mktemp -d)
keep() {
  [ -n "${RECORD:-}" ] || return 0
  (cd "$tmp" && find . -name metrics.jsonl -o -path '*/audit/*.jsonl' | while read -r f; do
    mkdir -p "$RECORD/$(dirname "$f")" && cp "$f" "$RECORD/$f"; done)
}
trap 'keep; pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${FEDSHARD_VENV:-$(dirname "$here")/.venv}
source "$here/train_helpers.sh"
if ! "$venv/bin/python3" -c 'import tensorboard' 2>/dev/null; then
  echo "recovery: no tensorboard in $venv; create it with: bash scripts/setup-hf.sh"
  exit 1
fi
make_corpus
args=(train --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --steps 12 --threads 1 --eval-every 4
      --set eval.windows=4 --strategy fl-fsdp --group-size 2 --sync-every 4 --checkpoint-every 4
      --set federation.audit=true)

run() {  # NP OUT [ARGS...]: exit status of mpirun (under ULFM, with each rank's output in its own files)
  local np=$1 out=$2
  shift 2
  timeout -k 5 240 mpirun --with-ft ulfm ${PLACEMENT:---oversubscribe} --allow-run-as-root \
    ${FEDSHARD_FAULT:+-x FEDSHARD_FAULT} -np "$np" $(rank_files "$out.ranks") "$bin" "${args[@]}" --out "$out" "$@" >"$out.log" 2>&1 &
  local job=$! gone=0
  # Open MPI 5.0.11's mpirun (prterun --with-ft ulfm) stays after every rank has ended, deaf to SIGTERM, when a rank
  # crashed in MPI_Finalize (docs/robustness.md; a rank that crashes fails the run below): 15 s after the run's last
  # rank is gone it is ended, the run's summary standing for its exit status.
  while kill -0 "$job" 2>/dev/null; do
    sleep 1
    if pgrep -f -- "^$bin .*--out $out( |\$)" >/dev/null; then gone=0; else gone=$((gone + 1)); fi
    if [ "$gone" -gt 15 ]; then
      pkill -9 -f -- "$out.ranks" 2>/dev/null
      wait "$job" 2>/dev/null
      echo "note: mpirun stayed after every rank of $out had ended; ended it" >&2
      if rank_output "$out.ranks" | grep -aq "crashed (SIG"; then fail "$out: a rank crashed"; return 1; fi
      grep -q '"type":"summary"' "$out/metrics.jsonl" 2>/dev/null
      return
    fi
  done
  wait "$job"
  local rc=$?
  if rank_output "$out.ranks" | grep -aq "crashed (SIG"; then fail "$out: a rank crashed"; return 1; fi
  return $rc
}
# "step N loss" and "eval N val_loss" lines of a run, floats printed exactly: those up to the round at step AT
# (steps 1-AT, evaluations before AT) or after it.
numbers() {  # RUN before|after AT
  $py -c "
import json
for l in open('$1/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] not in ('step', 'eval'): continue
    before = j['step'] <= $3 if j['type'] == 'step' else j['step'] < $3
    after = j['step'] > $3
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
        if 'round' not in j: continue  # a join's state checksum
        sums[j['round']][j['group']] = (sums[j['round']][j['group']] + j['checksum']) % 2**64
for r in sorted(sums):
    print(f\"{r}: {len(sums[r])} groups, {'equal' if len(set(sums[r].values())) == 1 else 'DIFFERENT'}\")"
}

run 8 "$tmp/ref" || fail "the uninterrupted run"

# NAME DIR FAULT LOST LEAVING-RANK AUDIT [tensorboard]: LOST is "step|lost ids|kept ids|lost ranks;" per group_lost
# line; with "tensorboard", the run mirrors its metrics to TensorBoard, read back by tests/tensorboard_check.py.
# The uninterrupted run is $tmp/ref$variant; the relaunch of the kept groups runs on relaunch_np ranks (two per kept
# group unless set) with relaunch_args added.
variant="" relaunch_args=() relaunch_np=""

scenario() {
  local name=$1 dir="$tmp/$2" expected_lost=$4 leaving=$5 expected_audit=$6 tb=() ref=$tmp/ref$variant
  [ "${7:-}" = tensorboard ] && tb=(--tensorboard "$tmp/$2/tb")
  FEDSHARD_FAULT=$3 run 8 "$dir" "${tb[@]}"
  local rc=$? errors lost seconds first last kept
  [ "$rc" -lt 124 ] || { fail "$name: mpirun timed out (exit $rc)"; return; }
  errors=$(rank_output "$dir.ranks" | grep "fedshard: error")
  [ -z "$errors" ] || { fail "$name: $errors"; return; }
  grep -q '"type":"summary"' "$dir/metrics.jsonl" || { fail "$name: the job did not finish"; return; }
  lost=$($py -c "
import json
for l in open('$dir/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'group_lost': print(j['step'], j['lost_group_ids'], j['group_ids'], j['lost_ranks'], sep='|', end=';')")
  [ "$lost" = "$expected_lost" ] || { fail "$name: group_lost lines: '$lost'"; return; }
  seconds=$(grep '"type":"group_lost"' "$dir/metrics.jsonl" | sed 's/.*"recover_s":\([0-9.]*\).*/\1/' | paste -sd/)
  if [ -n "$leaving" ]; then
    rank_output "$dir.ranks" | grep -q "rank $leaving of group [0-9]: .* leave the job, which goes on with groups" ||
      { fail "$name: rank $leaving did not say it leaves"; return; }
  fi
  local twice
  twice=$($py -c "
import collections, json
n = collections.Counter((j['type'], j['step']) for j in map(json.loads, open('$dir/metrics.jsonl')) if j['type'] in ('step', 'eval'))
print(' '.join(f'{t} {s}' for (t, s), c in sorted(n.items()) if c > 1))")
  [ -z "$twice" ] || { fail "$name: metrics lines written twice: $twice"; return; }
  [ "$(rank_output "$dir.ranks" | grep -c "^final validation")" -eq 1 ] ||
    { fail "$name: not one 'final validation' line (the first kept rank prints it)"; return; }
  first=${lost%%|*} last=${lost%;} last=${last##*;}
  kept=$(echo "$last" | cut -d'|' -f3 | tr -cd ',' | wc -c) kept=$((kept + 1)) last=${last%%|*}
  # Step lines carry rank 0's group's loss: where group 0 is lost, the lines after its group_lost line are the
  # new writer's, with its own group's loss (the steps the lost writer had not written among them).
  local upto=$first
  [[ $(cut -d'|' -f2 <<<"$lost") =~ ^\[0[],] ]] && upto=$($py -c "
import json
steps = [0]
for j in map(json.loads, open('$dir/metrics.jsonl')):
    if j['type'] == 'group_lost': break
    if j['type'] == 'step': steps.append(j['step'])
print(max(steps))")
  [ "$($py -c "
import json
print(sorted(j['step'] for j in map(json.loads, open('$dir/metrics.jsonl')) if j['type'] == 'step'))")" = \
    "$(seq -s ', ' 1 12 | sed 's/.*/[&]/')" ] || { fail "$name: not one step line for each of steps 1-12"; return; }
  cmp -s <(numbers "$dir" before "$upto") <(numbers "$ref" before "$upto") ||
    { fail "$name: steps 1-$upto differ from the uninterrupted run"; return; }
  local taken_over
  taken_over=$($py -c "
import json
ref = {j['step']: j['loss'] for j in map(json.loads, open('$ref/metrics.jsonl')) if j['type'] == 'step'}
print(' '.join(str(j['step']) for j in map(json.loads, open('$dir/metrics.jsonl'))
               if j['type'] == 'step' and $upto < j['step'] <= $first and j['loss'] != ref[j['step']]))")
  [ "$taken_over" = "$(seq -s ' ' $((upto + 1)) "$first")" ] ||
    { fail "$name: steps $((upto + 1))-$first are not the new writer's group's (differ from group 0's: '$taken_over')"
      return; }
  cmp -s <(numbers "$dir" after "$last") <(numbers "$ref" after "$last") &&
    { fail "$name: steps after $last are the 4 groups' (a lost group still averaged?)"; return; }
  # The run's tokens after a loss under step rounds: every group's through the last round before it, then the kept
  # groups' only (the lost groups' steps since never reached the global model), whichever agreement a kept rank saw
  # the loss in. (Time-based rounds, whose lines say `round`, count each group's own steps.)
  local miscounted
  miscounted=$($py -c "
import json
lines = list(map(json.loads, open('$dir/metrics.jsonl')))
tokens = {0: 0}
tokens.update({j['step']: j['tokens'] for j in lines if j['type'] == 'step'})
kept = {j['step']: sum(j['group_sizes']) * 2 * 32 for j in lines if j['type'] == 'group_lost'}
for j in lines:
    if any(k['type'] == 'round' for k in lines): break
    if j['type'] != 'group_lost' or j['step'] + 1 not in tokens: continue
    s = j['step']
    seen = j['during'].split(',')[0]
    last_round = s if seen in ('checkpoint', 'evaluation', 'summary', 'rejoin') else s - 4
    want = tokens[last_round] + (s + 1 - last_round) * kept[s]
    if tokens[s + 1] != want: print(f'step {s + 1}: {tokens[s + 1]}, not {want} (seen in: {j[\"during\"]})')
")
  [ -z "$miscounted" ] || { fail "$name: tokens after the loss: $miscounted"; return; }
  [ "$(audit "$dir" | tr '\n' ' ')" = "$expected_audit " ] ||
    { fail "$name: audit of the rounds: $(audit "$dir" | tr '\n' ' ')"; return; }
  run "${relaunch_np:-$((2 * kept))}" "$dir.relaunch" "${relaunch_args[@]}" --resume "$dir/checkpoints/$(printf step-%08d "$last")" ||
    { fail "$name: the relaunch from step $last"; return; }
  cmp -s <(numbers "$dir" after "$last") <(numbers "$dir.relaunch" after "$last") &&
    [ "$(numbers "$dir" after "$last" | grep -c ^step)" -eq $((12 - last)) ] ||
    { fail "$name: steps after $last differ from a relaunch of the kept groups"
      diff <(numbers "$dir" after "$last") <(numbers "$dir.relaunch" after "$last") | head -4; return; }
  if [ ${#tb[@]} -gt 0 ]; then
    PYTHONDONTWRITEBYTECODE=1 timeout 240 "$venv/bin/python3" "$here/tensorboard_check.py" "$dir" 12 \
      >"$dir.tb.log" 2>&1 ||
      { fail "$name: TensorBoard's events are not metrics.jsonl's"; sed 's/^/    /' "$dir.tb.log"; return; }
  fi
  ok "$name: ${lost%;}; recovered in $seconds s, every round's groups equal, the steps after $last a relaunch's (mpirun exit $rc)"
}
four_then_three="1: 4 groups, equal 2: 3 groups, equal 3: 3 groups, equal"
scenario "both ranks of group 2 killed at the round's step" at-round kill:4:8,kill:5:8 "8|[2]|[0, 1, 3]|[4, 5];" "" "$four_then_three"
scenario "rank 5 killed (step 6), its partner leaves" one-rank kill:5:6 "8|[2]|[0, 1, 3]|[5];" 4 "$four_then_three"
# The partner that leaves is rank 0, the metrics writer: launch rank 2 writes on, steps 6 and 7 (which rank 0 did
# not write) with its own group's loss.
scenario "rank 1 killed (step 6), its partner rank 0 leaves" writer-leaves kill:1:6 "8|[0]|[1, 2, 3]|[1];" 0 \
  "$four_then_three" tensorboard
# After the step-8 round: the checkpoint is written again by the kept groups, and the next round is theirs.
# Rank 0 (group 0) is the one lost: launch rank 2 writes metrics.jsonl and prints the final lines from then on.
# Its TensorBoard mirror goes on in a new event file of launch rank 2's: every step and evaluation once.
scenario "rank 0 killed while writing the step-8 checkpoint" checkpoint kill:0:8:checkpoint "8|[0]|[1, 2, 3]|[0];" 1 \
  "1: 4 groups, equal 2: 4 groups, equal 3: 3 groups, equal" tensorboard
# Two losses: group 0 (the metrics writer's) at the round's step 4, whose step line the new writer writes; the
# second in the evaluation after the step-8 round (then done again by groups 1 and 2 alone).
scenario "group 0 killed at step 4, then rank 6 in the step-8 evaluation" twice kill:0:4,kill:1:4,kill:6:8:eval \
  "4|[0]|[1, 2, 3]|[0, 1];8|[3]|[1, 2]|[6];" 7 "1: 3 groups, equal 2: 3 groups, equal 3: 2 groups, equal" tensorboard
# A loss during a recovery: rank 2 killed while the kept groups rebuild after rank 5's loss (kill:2:8:recovery);
# they recover once more, without group 1 as well.
scenario "rank 5 killed (step 6), then rank 2 during the recovery" in-recovery kill:5:6,kill:2:8:recovery \
  "8|[2]|[0, 1, 3]|[5];8|[1]|[0, 3]|[2];" 3 "1: 4 groups, equal 2: 2 groups, equal 3: 2 groups, equal"
# Rank 5 killed in the end-of-run summary's gather (after every step and the final evaluation): the kept groups
# gather again, the summary holds the 3 of them, and the steps are the uninterrupted run's.
summary_run=$tmp/summary
FEDSHARD_FAULT=kill:5:12:summary run 8 "$summary_run"
rc=$?
said=$($py -c "
import json
lines = [j for j in map(json.loads, open('$summary_run/metrics.jsonl')) if j['type'] in ('group_lost', 'summary')]
print(' '.join(f\"{j['type']} {j.get('during', j.get('group_sizes'))}\" for j in lines))" 2>&1)
if [ "$rc" -ne 0 ] || [ "$said" != "group_lost summary summary [2, 2, 2]" ] ||
   ! rank_output "$summary_run.ranks" | grep -q "rank 4 of group 2: .* leave the job" ||
   ! cmp -s <(numbers "$summary_run" before 12) <(numbers "$tmp/ref" before 12); then
  fail "rank 5 killed in the summary: exit $rc, '$said'"
else
  ok "rank 5 killed in the summary: the kept groups gathered it again, its groups [2, 2, 2], the steps the uninterrupted run's (mpirun exit $rc)"
fi

# Groups of different sizes, 3,3,2: rank 6 killed at step 6, its partner rank 7 leaves. The kept groups of 3 keep the
# launch's padding (a multiple of 6, not their own 3: comm/survivors.cpp), so each kept rank takes its own state over
# in memory; the relaunch onto groups 3,3 reslices the checkpoint into their own padding.
equal_args=("${args[@]}") args=()
for ((k = 0; k < ${#equal_args[@]}; k++)); do
  if [ "${equal_args[k]}" = --group-size ]; then args+=(--groups 3,3,2) k=$((k + 1)); else args+=("${equal_args[k]}"); fi
done
variant=-unequal relaunch_args=(--groups 3,3) relaunch_np=6
run 8 "$tmp/ref-unequal" || fail "the uninterrupted run of groups 3,3,2"
scenario "groups 3,3,2: rank 6 killed (step 6), its partner leaves" unequal kill:6:6 "8|[2]|[0, 1]|[6];" 7 \
  "1: 3 groups, equal 2: 2 groups, equal 3: 2 groups, equal"
args=("${equal_args[@]}") variant="" relaunch_args=() relaunch_np=""

# Time-based rounds on an emulated clock (a step counts 0.05 s, a round 0.2 s) with group 3 twice as slow: the
# rounds come after steps 4, 8 and 12 of groups 0-2 and steps 2, 4 and 6 of group 3. Rank 5 killed at step 6, its
# partner leaves; each kept group goes on from its own step, and the relaunch of the kept groups (the slow one now
# group 2) from the step-8 checkpoint takes each on from there too.
args=()
for ((k = 0; k < ${#equal_args[@]}; k++)); do
  if [ "${equal_args[k]}" = --sync-every ]; then k=$((k + 1)); else args+=("${equal_args[k]}"); fi
done
args+=(--round seconds:0.2 --set federation.clock=emulated:0.05 --slow group:3=2)
variant=-timed relaunch_args=(--slow group:2=2)
run 8 "$tmp/ref-timed" || fail "the uninterrupted run of time-based rounds"
scenario "time-based rounds, group 3 slow: rank 5 killed (step 6), its partner leaves" timed kill:5:6 \
  "8|[2]|[0, 1, 3]|[5];" 4 "$four_then_three"
# The metrics writer's group lost: under time-based rounds its step lines since the last round were held, not
# written (RunLog); the new writer, launch rank 2, writes steps 5-8 with its own group's loss.
scenario "time-based rounds, group 3 slow: rank 1 killed (step 6), its partner rank 0 leaves" timed-writer kill:1:6 \
  "8|[0]|[1, 2, 3]|[1];" 0 "$four_then_three"
# The writer's group lost in the final checkpoint, after the last round, where the new writer's group (group 1, now
# the slow one) stands at step 6 to the writer's 12: the lost writer's lines through its step 12 stay (every round
# and evaluation once; the new writer's steps 7-12 are not written again), the checkpoint is written again with the
# kept groups' own steps, and --resume auto finds nothing left.
final=$tmp/timed-final
run 8 "$tmp/ref-timed-final" --slow group:1=2 || fail "the uninterrupted run of time-based rounds, group 1 slow"
FEDSHARD_FAULT=kill:1:12:checkpoint run 8 "$final" --slow group:1=2
rc=$?
said=$($py -c "
import json
lines = [j for j in map(json.loads, open('$final/metrics.jsonl'))]
print(' '.join(f\"{j['type']} {j['step']}\" + (f\" {j['group_steps']}\" if j['type'] == 'round' else '')
               for j in lines if j['type'] in ('round', 'eval', 'group_lost')),
      [j['step'] for j in lines if j['type'] == 'step'] == list(range(1, 13)))
meta = json.load(open('$final/checkpoints/' + open('$final/checkpoints/latest').read().strip() + '/meta.json'))
print(meta['federation']['group_ids'], meta['federation']['group_steps'])" 2>&1)
want="round 4 [4, 2, 4, 4] eval 4 round 8 [8, 4, 8, 8] eval 8 round 12 [12, 6, 12, 12] eval 12 group_lost 6 True
[1, 2, 3] [6, 12, 12]"
finals=$(rank_output "$final.ranks" | grep -c "^final validation")
run 8 "$final" --slow group:1=2 --resume auto  # its output joins the run's in $final.ranks
resumed=$?
if [ "$rc" -ne 0 ] || [ "$said" != "$want" ] || [ "$finals" -ne 1 ] ||
   ! cmp -s <(numbers "$final" before 12) <(numbers "$tmp/ref-timed-final" before 12) || [ "$resumed" -ne 2 ] ||
   ! rank_output "$final.ranks" | grep -q "its groups are at steps \[6,12,12\], train.steps is 12: nothing left"; then
  fail "time-based rounds, the writer's group lost in the final checkpoint: exit $rc, '$said', resume exit $resumed"
else
  ok "time-based rounds, the writer's group lost in the final checkpoint, the new writer's behind: each round and evaluation once, the steps the uninterrupted run's, the checkpoint's groups [1, 2, 3] at steps [6, 12, 12] (mpirun exit $rc)"
fi
args=("${equal_args[@]}") variant="" relaunch_args=()

# NAME DIR FAULT LOST JOINED FAILED AUDIT [RELAUNCH-STEP [ARGS...]]: with federation.rejoin_after = 1 the kept
# ranks start replacements for the lost group's ranks (MPI_Comm_spawn) after the round held without it. LOST and
# AUDIT as above, JOINED "step|joined ids|group ids|joined ranks;" per group_joined line (a replacement audits the
# round it joins after), FAILED "step|group ids;" per rejoin_failed line. Every replacement's whole state (model, inner and outer optimizer state, step counts) equals
# that of the rank at its position in the first group, which gave it (federation.audit's join lines), and the
# bytes of state received add up to those sent and to group_joined's state_bytes; with
# RELAUNCH-STEP (- for none), the steps after it equal a relaunch of 8 ranks from the grown job's checkpoint of
# that step. ARGS: more train flags, for this run and an uninterrupted reference of its own.
rejoin_scenario() {
  local name=$1 dir="$tmp/$2" expected_lost=$4 expected_joined=$5 expected_failed=$6 expected_audit=$7
  local relaunch=${8:--} ref="$tmp/ref" extra=("${@:9}")
  relaunch=${relaunch#-}
  if [ ${#extra[@]} -gt 0 ]; then
    ref="$dir.ref"
    run 8 "$ref" "${extra[@]}" || { fail "$name: the uninterrupted run"; return; }
  fi
  FEDSHARD_FAULT=$3 run 8 "$dir" --set federation.rejoin_after=1 "${extra[@]}"
  local rc=$? errors lost joined failed states sizes seconds twice
  # mpirun's fault tolerance covers the launched ranks only: a replacement killed (137) or leaving without
  # MPI_Finalize (1) sets its exit status, after the job finished.
  [ "$rc" -ne 124 ] || { fail "$name: mpirun timed out"; return; }
  # The one error expected: a replacement whose partner could not start says why it does not join either.
  errors=$(rank_output "$dir.ranks" | grep "fedshard: error" | grep -v "another replacement could not start")
  [ -z "$errors" ] || { fail "$name: $errors"; return; }
  grep -q '"type":"summary"' "$dir/metrics.jsonl" || { fail "$name: the job did not finish"; return; }
  lost=$($py -c "
import json
for j in map(json.loads, open('$dir/metrics.jsonl')):
    if j['type'] == 'group_lost':
        print(j['step'], j['lost_group_ids'], j['group_ids'], j['lost_ranks'], sep='|', end=';')")
  [ "$lost" = "$expected_lost" ] || { fail "$name: group_lost lines: '$lost'"; return; }
  joined=$($py -c "
import json
for j in map(json.loads, open('$dir/metrics.jsonl')):
    if j['type'] == 'group_joined':
        print(j['step'], j['joined_group_ids'], j['group_ids'], j['joined_ranks'], sep='|', end=';')")
  [ "$joined" = "$expected_joined" ] || { fail "$name: group_joined lines: '$joined'"; return; }
  failed=$($py -c "
import json
for j in map(json.loads, open('$dir/metrics.jsonl')):
    if j['type'] == 'rejoin_failed': print(j['step'], j['group_ids'], sep='|', end=';')")
  [ "$failed" = "$expected_failed" ] || { fail "$name: rejoin_failed lines: '$failed'"; return; }
  twice=$($py -c "
import collections, json
n = collections.Counter((j['type'], j['step']) for j in map(json.loads, open('$dir/metrics.jsonl'))
                        if j['type'] in ('step', 'eval'))
print(' '.join(f'{t} {s}' for (t, s), c in sorted(n.items()) if c > 1))")
  [ -z "$twice" ] || { fail "$name: metrics lines written twice: $twice"; return; }
  [ "$($py -c "
import json
print(sorted(j['step'] for j in map(json.loads, open('$dir/metrics.jsonl')) if j['type'] == 'step'))")" = \
    "$(seq -s ', ' 1 12 | sed 's/.*/[&]/')" ] || { fail "$name: not one step line for each of steps 1-12"; return; }
  [ "$(rank_output "$dir.ranks" | grep -c "^final validation")" -eq 1 ] ||
    { fail "$name: not one 'final validation' line"; return; }
  # Before the step of the first loss (whose step line a new writer may have written, with its group's loss).
  local before=$((${lost%%|*} - 1))
  cmp -s <(numbers "$dir" before "$before") <(numbers "$ref" before "$before") ||
    { fail "$name: steps 1-$before differ from the uninterrupted run"; return; }
  [ "$(audit "$dir" | tr '\n' ' ')" = "$expected_audit " ] ||
    { fail "$name: audit of the rounds: $(audit "$dir" | tr '\n' ' ')"; return; }
  # Per join: each replacement's state checksum and the one of the first group's rank at its position.
  states=$($py -c "
import glob, json
lines = [j for f in glob.glob('$dir/audit/rank-*.jsonl') for j in map(json.loads, open(f)) if 'join_step' in j]
for g in (j for j in map(json.loads, open('$dir/metrics.jsonl')) if j['type'] == 'group_joined'):
    at = [j for j in lines if j['join_step'] == g['step']]
    for new in (j for j in at if j['group'] in g['joined_group_ids']):
        donor = [j for j in at if j['group'] == g['group_ids'][0] and j['position'] == new['position']]
        print('ok' if len(donor) == 1 and donor[0]['state_checksum'] == new['state_checksum'] else
              f\"group {new['group']} position {new['position']}: {new['state_checksum']} vs {donor}\")
    # The bytes the replacements' receives counted, those the donors handed to MPI_Send, and the metrics line's.
    received = sum(j['state_bytes'] for j in at if j['group'] in g['joined_group_ids'])
    sent = sum(j['state_bytes'] for j in at if j['group'] not in g['joined_group_ids'])
    print('ok' if received == sent == g['state_bytes'] > 0 else
          f\"state bytes: received {received}, sent {sent}, group_joined {g['state_bytes']}\")")
  [ -z "$joined" ] || { [ -n "$states" ] && ! grep -qv '^ok$' <<<"$states"; } ||
    { fail "$name: a replacement's state is not its donor's: ${states:-no join lines in the audit}"; return; }
  sizes=$($py -c "
import json
print([j for j in map(json.loads, open('$dir/metrics.jsonl')) if j['type'] == 'summary'][0]['group_sizes'])")
  seconds=$(grep '"type":"group_joined"' "$dir/metrics.jsonl" | sed 's/.*"join_s":\([0-9.]*\).*/\1/' | paste -sd/)
  if [ -n "$relaunch" ]; then
    run 8 "$dir.relaunch" --resume "$dir/checkpoints/$(printf step-%08d "$relaunch")" "${extra[@]}" ||
      { fail "$name: the relaunch from step $relaunch"; return; }
    cmp -s <(numbers "$dir" after "$relaunch") <(numbers "$dir.relaunch" after "$relaunch") &&
      [ "$(numbers "$dir" after "$relaunch" | grep -c ^step)" -eq $((12 - relaunch)) ] ||
      { fail "$name: steps after $relaunch differ from a relaunch of the grown job's checkpoint"
        diff <(numbers "$dir" after "$relaunch") <(numbers "$dir.relaunch" after "$relaunch") | head -4; return; }
  fi
  local said="${lost%;}"
  [ -z "$joined" ] || said+=", joined ${joined%;} in $seconds s, every replacement's state its donor's"
  [ -z "$failed" ] || said+=", rejoin failed ${failed%;}"
  [ -z "$relaunch" ] || said+=", the steps after $relaunch as a relaunch gives them"
  ok "$name: $said; every round's groups equal, groups at the end $sizes (mpirun exit $rc)"
}
all_four="1: 4 groups, equal 2: 4 groups, equal 3: 4 groups, equal"
rejoin_scenario "group 2 killed at the step-4 round, replaced after it" rejoin kill:4:4,kill:5:4 \
  "4|[2]|[0, 1, 3]|[4, 5];" "4|[2]|[0, 1, 3, 2]|[4, 5];" "" "$all_four" 8
# With DiLoCo's outer step, whose momentum is outer optimizer state a replacement must receive.
rejoin_scenario "rank 5 killed (step 6), its partner leaves, both replaced after the step-8 round; Nesterov" \
  rejoin-one-rank kill:5:6 "8|[2]|[0, 1, 3]|[5];" "8|[2]|[0, 1, 3, 2]|[4, 5];" "" "$all_four" - \
  --set federation.outer_optimizer=nesterov --set federation.outer_lr=0.7 --set federation.outer_momentum=0.9
# A replacement killed as it starts up (FEDSHARD_FAULT's join point): the kept ranks and the other replacement
# learn it in the start-up agreement; the other one leaves too, rank 0 says why, and the job goes on with the
# 3 kept groups (no new attempt: what stops a replacement's start-up would stop the next one's).
rejoin_scenario "a replacement killed as it starts up" rejoin-start kill:4:4,kill:5:4,kill:4:4:join \
  "4|[2]|[0, 1, 3]|[4, 5];" "" "4|[2];" "1: 3 groups, equal 2: 3 groups, equal 3: 3 groups, equal"
# The donor of position 1 (rank 1, group 0, partner of the metrics writer) killed before it sends: every
# replacement leaves, the kept ranks recover without groups 0 and 2 (rank 0 leaves; launch rank 2 writes on) and
# both rejoin after the next round, the new replacements taking group 1's state.
rejoin_scenario "a donor killed before it sends: all replacements leave, both lost groups rejoin a round later" \
  rejoin-donor kill:4:4,kill:5:4,kill:1:4:join "4|[2]|[0, 1, 3]|[4, 5];4|[0, 2]|[1, 3]|[1, 4, 5];" \
  "8|[0, 2]|[1, 3, 0, 2]|[0, 1, 4, 5];" "4|[2];" "1: 3 groups, equal 2: 4 groups, equal 3: 4 groups, equal"
# No room for replacements: 8 slots for the 8 ranks, not oversubscribed. Open MPI 5.0.11 does not give a failed
# rank's slot to a spawned process ("All nodes which are allocated for this job are already filled"), so the spawn
# fails: rank 0 says so once, and the job finishes with the 3 kept groups (mpirun exits non-zero for the refused
# spawn, after the job finished).
no_room=$tmp/no-room
PLACEMENT="--host localhost:8 --bind-to none" FEDSHARD_FAULT=kill:4:4,kill:5:4 run 8 "$no_room" \
  --set federation.rejoin_after=1
rc=$?
failed=$($py -c "
import json
lines = [j for j in map(json.loads, open('$no_room/metrics.jsonl')) if j['type'] in ('rejoin_failed', 'summary')]
print(' '.join(f\"{j['type']} {j.get('group_ids', j.get('group_sizes'))}\" for j in lines))" 2>&1)
if [ "$rc" -eq 124 ]; then
  fail "no room for replacements: mpirun timed out"
elif [ "$failed" != "rejoin_failed [2] summary [2, 2, 2]" ] ||
     [ "$(rank_output "$no_room.ranks" | grep -ac "groups \[2\] did not rejoin after step 4 (MPI_Comm_spawn")" -ne 1 ] ||
     [ "$(audit "$no_room" | grep -vc "equal$")" -ne 0 ]; then
  fail "no room for replacements: '$failed'; $(rank_output "$no_room.ranks" | grep -a "fedshard" | tail -2)"
else
  ok "no room for replacements: the spawn refused, said once, the job finished with 3 groups (mpirun exit $rc)"
fi
[ "$fails" -eq 0 ] && echo "every recovery case holds"
[ "$fails" -eq 0 ]
