#!/usr/bin/env bash
# Time-based rounds with an emulated straggler (federation.round = seconds:T, --slow) on an emulated clock
# (federation.clock = emulated:S: each step counts S seconds times its group's slow factor), so which step
# closes a round is the same on any machine: the slow group takes fewer steps per round, the job ends at the
# round where the fastest group reaches train.steps, checkpoints are written at rounds with every group's
# step, a run killed with kill -9 resumes every group from its own step and reproduces the uninterrupted
# run's losses bit for bit, and a finished run whose group 0 was the slow one resumes to "nothing left".
# Usage: stragglers.sh FEDSHARD_BINARY
set -u
bin=$1
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/train_helpers.sh"
make_corpus
run() {  # OUT SLOW ARGS...
  local out=$1 slow=$2
  shift 2
  timeout 180 "${mpi[@]}" ${FEDSHARD_FAULT:+-x FEDSHARD_FAULT} -np 4 --output-filename "$out.ranks:nocopy" "$bin" train \
    --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --steps 40 --threads 1 --eval-every 8 \
    --set eval.windows=4 --checkpoint-every 1 --set checkpoint.keep=100 --strategy fl-ddp --group-size 2 \
    --round seconds:0.15 --set federation.clock=emulated:0.05 --slow "$slow" --out "$out" "$@" >"$out.log" 2>&1
}
rounds() { $py -c "
import json
for l in open('$1/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'round': print(*j['group_steps'])"; }
meta_steps() { $py -c "import json; print(*json.load(open('$1/meta.json'))['federation']['group_steps'])"; }

# Group 0 counts 0.05 s a step and closes its round after 3 steps (0.15 s); group 1, three times slower, after
# one. 13 rounds of (3, 1) steps, then group 0 reaches 40 at the 14th.
run "$tmp/timed" group:1=3 || fail "time-based run exited non-zero"
read -r fast slow <<<"$(rounds "$tmp/timed" | tail -1)"
[ "$(rounds "$tmp/timed" | head -2 | tr '\n' ' ')" = "3 1 6 2 " ] && [ "${fast:-0}" -eq 40 ] && [ "${slow:-0}" -eq 14 ] \
  && ok "slow group 1 (3x) took $slow steps while group 0 took $fast in $(rounds "$tmp/timed" | wc -l) rounds" \
  || fail "rounds: $(rounds "$tmp/timed" | head -2 | tr '\n' ' ')... last '$fast $slow' (want 3 1, 6 2, ... 40 14)"
ckpt="$tmp/timed/checkpoints/$(cat "$tmp/timed/checkpoints/latest")"
[ "$(meta_steps "$ckpt")" = "$fast $slow" ] && ok "final checkpoint $(basename "$ckpt") holds both groups' steps" \
  || fail "final checkpoint group_steps '$(meta_steps "$ckpt")'"

# Killed at group 0's step 35: the last checkpoint is the round at (33, 11).
FEDSHARD_FAULT=kill:1:35 run "$tmp/killed" group:1=3 && fail "killed run exited 0"
ckpt="$tmp/killed/checkpoints/$(cat "$tmp/killed/checkpoints/latest")"
read -r c0 c1 <<<"$(meta_steps "$ckpt")"
run "$tmp/killed" group:1=3 --resume auto || fail "resume of the time-based run"
if [ "$c0 $c1" = "33 11" ] && diff <(losses "$tmp/killed") <(losses "$tmp/timed") >/dev/null \
   && [ "$(losses "$tmp/killed" | wc -l)" -eq 40 ] && diff <(rounds "$tmp/killed") <(rounds "$tmp/timed") >/dev/null; then
  ok "killed after the round at steps ($c0, $c1): resumed, all 40 losses and every round identical to the uninterrupted run"
else
  fail "resume from ($c0, $c1): losses or rounds differ from the uninterrupted run"
  diff <(losses "$tmp/killed") <(losses "$tmp/timed") | head -5 | sed 's/^/    /'
fi

# Group 0 the slow one: the job ends when group 1 reaches 40, group 0 far behind; resuming it finds nothing
# left to train (before: group 0's step named the checkpoint, group 0 trained on and group 1 waited forever).
run "$tmp/slow0" group:0=3 || fail "run with a slow group 0 exited non-zero"
run "$tmp/slow0" group:0=3 --resume auto
rc=$?
errors=$(cat "$tmp/slow0.ranks"/1/rank.*/stderr | grep "fedshard: error")
[ "$rc" -eq 2 ] && [ "$(grep -c . <<<"$errors")" -eq 1 ] && [[ "$errors" == *"nothing left to train"* ]] \
  && ok "finished with group 0 behind, resumed: ${errors#*error: }" \
  || { fail "finished with group 0 behind, resumed: rc=$rc"; printf '%s\n' "$errors" | sed 's/^/    /'; }

if [ "$fails" -ne 0 ]; then
  echo "$fails straggler case(s) failed"
  exit 1
fi
echo "all straggler cases passed"
