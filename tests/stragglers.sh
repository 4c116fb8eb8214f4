#!/usr/bin/env bash
# Time-based rounds with an emulated straggler (federation.round = seconds:T, --slow): the slow group takes
# fewer steps per round, the job ends at the round where the fastest group reaches train.steps, checkpoints are
# written at rounds with every group's step, and a run killed with kill -9 resumes every group from its own
# step. (Which step closes a round depends on wall time, so a resumed run is not compared with an
# uninterrupted one number for number; tests/resume.sh does that for step-based rounds.)
# Usage: stragglers.sh FEDSHARD_BINARY
set -u
bin=$1
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/train_helpers.sh"
make_corpus
run() {  # OUT ARGS...
  local out=$1
  shift
  timeout 180 "${mpi[@]}" ${FEDSHARD_FAULT:+-x FEDSHARD_FAULT} -np 4 "$bin" train --model tiny --data "$tmp/corpus" \
    --seq-len 32 --batch-size 2 --steps 40 --threads 1 --eval-every 8 --set eval.windows=4 --checkpoint-every 1 \
    --strategy fl-ddp --group-size 2 --round seconds:0.15 --slow group:1=3 --out "$out" "$@" >"$out.log" 2>&1
}
rounds() { $py -c "
import json
for l in open('$1/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'round': print(*j['group_steps'])"; }
meta_steps() { $py -c "import json; print(*json.load(open('$1/meta.json'))['federation']['group_steps'])"; }

run "$tmp/timed" || fail "time-based run exited non-zero"
read -r fast slow <<<"$(rounds "$tmp/timed" | tail -1)"
[ "${fast:-0}" -eq 40 ] && [ "${slow:-99}" -lt 30 ] \
  && ok "slow group 1 (3x) took $slow steps while group 0 took $fast in $(rounds "$tmp/timed" | wc -l) rounds" \
  || fail "last round: group steps '$fast $slow' (want 40 and well under 40)"
ckpt="$tmp/timed/checkpoints/$(cat "$tmp/timed/checkpoints/latest")"
[ "$(meta_steps "$ckpt")" = "$fast $slow" ] && ok "final checkpoint $(basename "$ckpt") holds both groups' steps" \
  || fail "final checkpoint group_steps '$(meta_steps "$ckpt")'"

FEDSHARD_FAULT=kill:1:35 run "$tmp/killed" && fail "killed run exited 0"
ckpt="$tmp/killed/checkpoints/$(cat "$tmp/killed/checkpoints/latest")"
read -r c0 c1 <<<"$(meta_steps "$ckpt")"
run "$tmp/killed" --resume auto || fail "resume of the time-based run"
first=$($py -c "
import json
seen = False
for l in open('$tmp/killed/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'resume': seen = True
    elif seen and j['type'] == 'step': print(j['step']); break")
read -r end0 end1 <<<"$(rounds "$tmp/killed" | tail -1)"
[ "$first" = "$((c0 + 1))" ] && [ "${end0:-0}" -eq 40 ] && [ "${end1:-0}" -gt "${c1:-99}" ] \
  && ok "killed after a round at steps ($c0, $c1): resumed at group 0 step $first, ended at ($end0, $end1)" \
  || fail "resume: checkpoint ($c0, $c1), first step '$first', end ($end0, $end1)"

if [ "$fails" -ne 0 ]; then
  echo "$fails straggler case(s) failed"
  exit 1
fi
echo "all straggler cases passed"
