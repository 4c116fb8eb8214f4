#!/usr/bin/env bash
# Preemption and lost groups, with real signals and real processes:
#  1-2. SIGTERM to a 1-rank run, SIGUSR1 to mpirun and SIGTERM to every rank of a 4-rank run: the step in
#       flight finishes, a checkpoint is written, the job exits 75; the resumed run's float32 losses equal
#       the uninterrupted run's bit for bit.
#  3.   fl-fsdp, 8 ranks in groups of 2, K=4, a checkpoint every 4 steps: both ranks of group 1 are killed
#       with SIGKILL mid-round; scripts/fedshard-elastic.sh relaunches on the 6 ranks left, groups 0, 2 and
#       3 continuing their own state, and finishes the run; a second, direct 6-rank resume from the same
#       checkpoint gives the same losses bit for bit; at most one checkpoint interval of steps is redone.
# Usage: elastic.sh FEDSHARD_BINARY
set -u
bin=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$here/train_helpers.sh"
make_corpus
# Link emulation slows the steps enough (tens of ms) for a signal to land mid-run.
base=(train --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --threads 1 --eval-every 0
      --set eval.windows=4 --link node=100Mbit/s,2ms --set checkpoint.keep=10)

same_tail() {  # NAME RUN REF FIRST_STEP COUNT
  if diff <(losses "$2" "$4") <(losses "$3" "$4") >/dev/null && [ "$(losses "$2" "$4" | wc -l)" -eq "$5" ]; then
    ok "$1: $5 float32 losses from step $4 identical"
  else
    fail "$1: losses differ"
    diff <(losses "$2" "$4") <(losses "$3" "$4") | head -5 | sed 's/^/    /'
  fi
}

preempted_ok() {  # NAME RUN RC
  local stop
  stop=$($py -c "
import json
for l in open('$2/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'preempted': print(j['step'])")
  if [ "$3" -eq 75 ] && [ -n "$stop" ] && [ "$(cat "$2/checkpoints/latest")" = "$(printf 'step-%08d' "$stop")" ]; then
    ok "$1: exit 75 after step $stop, checkpoint step $stop written"
  else
    fail "$1: rc=$3, preempted at '${stop}', latest $(cat "$2/checkpoints/latest" 2>/dev/null)"
  fi
}

mkdir -p "$tmp/runs"
# 1. One rank, SIGTERM to the process.
one=("${base[@]}" --steps 30 --seq-len 128 --batch-size 16 --checkpoint-every 100)
timeout 120 "$bin" "${one[@]}" --out "$tmp/runs/ref1" >"$tmp/runs/ref1.log" 2>&1 || fail "reference 1-rank run"
timeout 120 "$bin" "${one[@]}" --out "$tmp/runs/p1" >"$tmp/runs/p1.log" 2>&1 &
pid=$!
wait_for_step "$tmp/runs/p1" 6 && kill -TERM "$pid"
wait "$pid"
preempted_ok "SIGTERM, 1 rank" "$tmp/runs/p1" $?
timeout 120 "$bin" "${one[@]}" --out "$tmp/runs/p1" --resume auto >>"$tmp/runs/p1.log" 2>&1 || fail "1-rank resume"
same_tail "SIGTERM, 1 rank, resumed" "$tmp/runs/p1" "$tmp/runs/ref1" 1 30

# 2. Four ranks: SIGUSR1 to mpirun (it forwards it), and SIGTERM to every rank (what Slurm's --signal does).
four=("${base[@]}" --steps 14 --checkpoint-every 100)
timeout 180 "${mpi[@]}" -np 4 "$bin" "${four[@]}" --out "$tmp/runs/ref4" >"$tmp/runs/ref4.log" 2>&1 || fail "reference 4-rank run"
for how in usr1-mpirun term-ranks; do
  run="$tmp/runs/p4-$how"
  timeout 180 "${mpi[@]}" -np 4 "$bin" "${four[@]}" --out "$run" >"$run.log" 2>&1 &
  pid=$!
  if wait_for_step "$run" 4; then
    if [ "$how" = usr1-mpirun ]; then kill -USR1 $(pgrep -P "$pid" mpirun); else kill -TERM $(rank_pids "$run" 0 1 2 3); fi
  fi
  wait "$pid"
  preempted_ok "$how, 4 ranks" "$run" $?
  timeout 180 "${mpi[@]}" -np 4 "$bin" "${four[@]}" --out "$run" --resume auto >>"$run.log" 2>&1 || fail "$how resume"
  same_tail "$how, 4 ranks, resumed" "$run" "$tmp/runs/ref4" 1 14
done

# 3. A lost group. Kill both ranks of group 1 once step 5 is done (the round is at step 8).
fl=("${base[@]}" --steps 12 --checkpoint-every 4 --strategy fl-fsdp --sync-every 4)
run="$tmp/runs/lost"
(wait_for_step "$run" 5 && kill -9 $(rank_pids "$run" 2 3)) &
timeout 300 bash "$here/../scripts/fedshard-elastic.sh" --max-restarts 1 --np 8 \
  --launcher "${mpi[*]} -np {NP}" -- "$bin" "${fl[@]}" --group-size 2 --out "$run" >"$run.log" 2>&1
rc=$?
wait
resume=$($py -c "
import json
for l in open('$run/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'relayout' and j['old_groups'] == [2, 2, 2, 2] and j['new_groups'] == [2, 2, 2] \
       and j['group_ids'] == [0, 2, 3]: print(j['step'])")
if [ "$rc" -eq 0 ] && [ -n "$resume" ] && grep -q "relaunching on 6 ranks as groups 2,2,2 (ids 0,2,3)" "$run.log"; then
  ok "lost group: fedshard-elastic.sh relaunched on 6 ranks (groups 0, 2, 3) from step $resume and finished"
else
  fail "lost group: rc=$rc, relayout at '${resume}'"
  tail -5 "$run.log" | sed 's/^/    /'
fi
# The relaunch redoes only what followed the latest checkpoint.
reached=$(grep -oE "step [0-9]+/12" "$run.elastic-1.log" | tail -1 | grep -oE "[0-9]+" | head -1)
if [ -n "$resume" ] && [ -n "$reached" ] && [ "$reached" -ge 5 ] && [ $((reached - resume)) -le 4 ]; then
  ok "lost group: killed after step $reached, resumed from step $resume (at most one checkpoint interval back)"
else
  fail "lost group: killed after step '${reached}', resumed from step '${resume}'"
fi
# The same continuation, launched directly on 6 ranks from the same checkpoint.
if [ -n "$resume" ]; then
  timeout 180 "${mpi[@]}" -np 6 "$bin" "${fl[@]}" --groups 2,2,2 --set train.resume_groups=0,2,3 \
    --resume "$run/checkpoints/$(printf 'step-%08d' "$resume")" --out "$tmp/runs/direct" >"$tmp/runs/direct.log" 2>&1 \
    || fail "direct 6-rank resume"
  same_tail "lost group, elastic vs direct resume" "$run" "$tmp/runs/direct" $((resume + 1)) $((12 - resume))
fi

if [ "$fails" -ne 0 ]; then
  echo "$fails preemption/elastic case(s) failed"
  exit 1
fi
echo "all preemption and elastic cases passed"
