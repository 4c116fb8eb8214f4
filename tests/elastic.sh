#!/usr/bin/env bash
# Preemption and lost groups, with real signals and real processes:
#  1-2. SIGTERM to a 1-rank run, SIGUSR1 to mpirun and SIGTERM to every rank of a 4-rank run: the step in
#       flight finishes, a checkpoint is written, the job exits 75; the resumed run's float32 losses equal
#       the uninterrupted run's bit for bit.
#  3.   fl-fsdp, 8 ranks in groups of 2, K=4, a checkpoint every 4 steps: both ranks of group 1 are killed
#       with SIGKILL mid-round; scripts/fedshard-elastic.sh relaunches on the 6 ranks left, groups 0, 2 and
#       3 continuing their own state, and finishes the run; a second, direct 6-rank resume from the same
#       checkpoint gives the same losses bit for bit; at most one checkpoint interval of steps is redone.
#  4.   Two groups to one: the survivor relaunched alone, continuing its own state.
#  5-6. Preemption with several groups: every group stops at its next step (pending rounds, the stop notice).
#  7.   A notice that ends a launch before its ranks can take it: relaunched with the notice standing.
#  8.   A notice after the run finished (Slurm's can come late on a loaded node): the job still ends 0.
# Signals and kills land at steps held by FEDSHARD_FAULT stalls, so no case depends on the machine's speed.
# Usage: elastic.sh FEDSHARD_BINARY
set -u
bin=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$here/train_helpers.sh"
make_corpus
base=(train --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --threads 1 --eval-every 0
      --set eval.windows=4 --set checkpoint.keep=10)

same_tail() {  # NAME RUN REF FIRST_STEP COUNT
  if diff <(losses "$2" "$4") <(losses "$3" "$4") >/dev/null && [ "$(losses "$2" "$4" | wc -l)" -eq "$5" ]; then
    ok "$1: $5 float32 losses from step $4 identical"
  else
    fail "$1: losses differ"
    diff <(losses "$2" "$4") <(losses "$3" "$4") | head -5 | sed 's/^/    /'
  fi
}

preempted_ok() {  # NAME RUN RC STEP
  local stop
  stop=$($py -c "
import json
for l in open('$2/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'preempted': print(j['step'])")
  if [ "$3" -eq 75 ] && [ "$stop" = "$4" ] && [ "$(cat "$2/checkpoints/latest")" = "$(printf 'step-%08d' "$stop")" ]; then
    ok "$1: exit 75 after step $stop, checkpoint step $stop written"
  else
    fail "$1: rc=$3, preempted at '${stop}', latest $(cat "$2/checkpoints/latest" 2>/dev/null)"
  fi
}

mkdir -p "$tmp/runs"
# 1. One rank, SIGTERM to the process. A stall (FEDSHARD_FAULT) holds it in step 7 until the signal arrives,
# so the signal lands in step 7 however fast or loaded the machine.
one=("${base[@]}" --steps 30 --seq-len 128 --batch-size 16 --checkpoint-every 100)
timeout 120 "$bin" "${one[@]}" --out "$tmp/runs/ref1" >"$tmp/runs/ref1.log" 2>&1 || fail "reference 1-rank run"
FEDSHARD_FAULT=stall:0:7 timeout 120 "$bin" "${one[@]}" --out "$tmp/runs/p1" >"$tmp/runs/p1.log" 2>&1 &
pid=$!
wait_for_step "$tmp/runs/p1" 6 && kill -TERM "$pid"
wait "$pid"
preempted_ok "SIGTERM, 1 rank" "$tmp/runs/p1" $? 7
timeout 120 "$bin" "${one[@]}" --out "$tmp/runs/p1" --resume auto >>"$tmp/runs/p1.log" 2>&1 || fail "1-rank resume"
same_tail "SIGTERM, 1 rank, resumed" "$tmp/runs/p1" "$tmp/runs/ref1" 1 30

# 2. Four ranks: SIGUSR1 to mpirun (it forwards it), and SIGTERM to every rank (what Slurm's --signal does);
# rank 0 held in step 5 until then.
four=("${base[@]}" --steps 14 --checkpoint-every 100)
timeout 180 "${mpi[@]}" -np 4 "$bin" "${four[@]}" --out "$tmp/runs/ref4" >"$tmp/runs/ref4.log" 2>&1 || fail "reference 4-rank run"
for how in usr1-mpirun term-ranks; do
  run="$tmp/runs/p4-$how"
  FEDSHARD_FAULT=stall:0:5 timeout 180 "${mpi[@]}" -np 4 -x FEDSHARD_FAULT "$bin" "${four[@]}" --out "$run" >"$run.log" 2>&1 &
  pid=$!
  if wait_for_step "$run" 4; then
    if [ "$how" = usr1-mpirun ]; then kill -USR1 $(pgrep -P "$pid" mpirun); else kill -TERM $(rank_pids "$run" 0 1 2 3); fi
  fi
  wait "$pid"
  preempted_ok "$how, 4 ranks" "$run" $? 5
  timeout 180 "${mpi[@]}" -np 4 "$bin" "${four[@]}" --out "$run" --resume auto >>"$run.log" 2>&1 || fail "$how resume"
  same_tail "$how, 4 ranks, resumed" "$run" "$tmp/runs/ref4" 1 14
done

# 3. A lost group. Rank 7 (group 3, which exists in the first launch only) is held in step 6, so no checkpoint
# after step 4 can complete; once it is there, both ranks of group 1 are killed.
fl=("${base[@]}" --steps 12 --checkpoint-every 4 --strategy fl-fsdp --sync-every 4)
run="$tmp/runs/lost"
(for _ in $(seq 1200); do grep -qs "stalls at step" "$run.ranks-8/1/rank.7/stderr" && break; sleep 0.05; done
 kill -9 $(rank_pids "$run" 2 3)) &
# Each launch's ranks write to their own files (RUN.ranks-NP, NP differing per launch): rank 0's progress lines
# say how far the first launch got, with nothing of another process inside them.
FEDSHARD_FAULT=stall:7:6 timeout 300 bash "$here/../scripts/fedshard-elastic.sh" --max-restarts 1 --np 8 \
  --launcher "${mpi[*]} -x FEDSHARD_FAULT --output-filename $run.ranks-{NP} -np {NP}" -- "$bin" "${fl[@]}" \
  --group-size 2 --out "$run" >"$run.log" 2>&1
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
reached=$(grep -oE "step [0-9]+/12" "$run.ranks-8/1/rank.0/stderr" | tail -1 | grep -oE "[0-9]+" | head -1)
if [ "$resume" = 4 ] && [ -n "$reached" ] && [ "$reached" -ge 5 ] && [ $((reached - resume)) -le 4 ]; then
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

# 4. Two groups to one: rank 2 (group 1) is killed at step 6 (FEDSHARD_FAULT, so the step is known);
# fedshard-elastic.sh relaunches group 0 alone on 2 ranks, continuing its own state (before, the relaunch was
# refused: train.resume_groups did not apply to one group, ten times over).
fl4=("${base[@]}" --steps 12 --checkpoint-every 4 --strategy fl-fsdp --sync-every 4)
run="$tmp/runs/to-one"
FEDSHARD_FAULT=kill:2:6 timeout 300 bash "$here/../scripts/fedshard-elastic.sh" --max-restarts 1 --np 4 \
  --launcher "${mpi[*]} -x FEDSHARD_FAULT -np {NP}" -- "$bin" "${fl4[@]}" --group-size 2 --out "$run" >"$run.log" 2>&1
rc=$?
resume=$($py -c "
import json
for l in open('$run/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'relayout' and j['old_groups'] == [2, 2] and j['new_groups'] == [2] and j['group_ids'] == [0]:
        print(j['step'])")
if [ "$rc" -eq 0 ] && [ "$resume" = 4 ] && grep -q "relaunching on 2 ranks as groups 2 (ids 0)" "$run.log"; then
  ok "two groups to one: relaunched group 0 alone on 2 ranks from step $resume and finished"
  timeout 180 "${mpi[@]}" -np 2 "$bin" "${fl4[@]}" --groups 2 --set train.resume_groups=0 \
    --resume "$run/checkpoints/step-00000004" --out "$tmp/runs/one-direct" >"$tmp/runs/one-direct.log" 2>&1 \
    || fail "direct 2-rank resume of group 0"
  same_tail "two groups to one, elastic vs direct resume" "$run" "$tmp/runs/one-direct" 5 8
else
  fail "two groups to one: rc=$rc, relayout at '${resume}'"
  grep "fedshard-elastic\|error" "$run.log" | head -5 | sed 's/^/    /'
fi

# 5-6. Preemption with several groups stops every group at its next step, not at its next round (K = 8 here:
# up to 7 steps, past a grace time). fl-fsdp, 2 groups of 2, 12 steps. Stalls (FEDSHARD_FAULT) hold ranks at
# known steps; a rank's "stalls at step" line in its own output file says it is there.
pre=("${base[@]}" --steps 12 --checkpoint-every 100 --strategy fl-fsdp --group-size 2 --sync-every 8)
timeout 180 "${mpi[@]}" -np 4 "$bin" "${pre[@]}" --out "$tmp/runs/pre-ref" >"$tmp/runs/pre-ref.log" 2>&1 \
  || fail "reference run of the preemption cases"
stalled() {  # RUN RANK: waits (up to 60 s) until RANK of RUN is held in its stall
  for _ in $(seq 1200); do
    grep -qs "stalls at step" "$1.ranks/1/rank.$2/stderr" && return 0
    sleep 0.05
  done
  return 1
}
preempt() {  # NAME RUN FAULTS "STALLED_RANKS" SIGNALLED_RANK WAIT_STEP WANT_STEPS WANT_PENDING
  local name=$1 run=$2 faults=$3 held=$4 rank=$5 wait=$6 want_steps=$7 want_pending=$8
  FEDSHARD_FAULT=$faults timeout 180 "${mpi[@]}" -np 4 -x FEDSHARD_FAULT --output-filename "$run.ranks:nocopy" \
    "$bin" "${pre[@]}" --out "$run" >"$run.log" 2>&1 &
  local pid=$! rc got r ready=1
  for r in $held; do stalled "$run" "$r" || ready=0; done
  if [ "$ready" = 1 ] && wait_for_step "$run" "$wait"; then kill -TERM $(rank_pids "$run" "$rank"); fi
  wait "$pid"
  rc=$?
  got=$($py -c "
import json
f = json.load(open('$run/checkpoints/' + open('$run/checkpoints/latest').read().strip() + '/meta.json'))['federation']
print(','.join(map(str, f['group_steps'])), ','.join(str(int(p)) for p in f['pending_rounds']) or '-')" 2>/dev/null)
  if [ "$rc" -eq 75 ] && [ "$got" = "$want_steps $want_pending" ]; then
    ok "$name: exit 75, groups stopped at steps $want_steps (pending rounds: $want_pending)"
  else
    fail "$name: rc=$rc, checkpoint groups/pending '$got' (want '$want_steps $want_pending')"
  fi
  timeout 180 "${mpi[@]}" -np 4 "$bin" "${pre[@]}" --out "$run" --resume auto >>"$run.log" 2>&1 || fail "$name: resume"
  same_tail "$name, resumed" "$run" "$tmp/runs/pre-ref" 1 12
}
# 5. Group 1 held at step 3 and signalled once group 0 has logged step 7 (so it is in step 8, whose round
# waits for group 1): group 1 stops at 3 instead of training on to 8; group 0 stops at its round, which is
# held first thing after the resume.
preempt "one group signalled, the other at its round" "$tmp/runs/pre-round" stall:2:3 2 2 7 "8,3" "1,0"
# 6. Group 0 held at step 3, group 1 at step 5; only rank 0 is signalled: group 0 stops at 3 and its notice
# releases group 1, which stops at 5, its next step (no round: none pending).
preempt "one group signalled, the other told by its notice" "$tmp/runs/pre-notice" stall:0:3,stall:2:5 "0 2" 0 2 "3,5" "0,0"

# 7. A notice that comes while a launch is still starting, before its ranks have a handler (on a loaded node, a
# requeued job's notice can): the launcher is held before it starts the ranks (a wrapper that waits while
# $tmp/hold exists) and the notice ends it. fedshard-elastic.sh relaunches with the notice standing
# (FEDSHARD_PREEMPTED): the ranks stop after their first step with a checkpoint, exit 75, and a resume
# finishes with the uninterrupted run's losses.
run="$tmp/runs/notice-at-start"
printf '%s\n' "if [ -e $tmp/hold ]; then mv $tmp/hold $tmp/holding; while true; do sleep 0.1; done; fi" 'exec "$@"' \
  >"$tmp/held-launcher.sh"
touch "$tmp/hold"
timeout 300 bash "$here/../scripts/fedshard-elastic.sh" --max-restarts 1 --np 4 \
  --launcher "bash $tmp/held-launcher.sh ${mpi[*]} -np {NP}" -- "$bin" "${four[@]}" --out "$run" >"$run.log" 2>&1 &
pid=$!
usr1_trapped() {  # PID: its SigCgt mask has SIGUSR1 (10), i.e. fedshard-elastic.sh's trap is set
  local mask
  mask=$(awk '/^SigCgt/ {print $2}' "/proc/$1/status" 2>/dev/null)
  [ -n "$mask" ] && (((16#$mask >> 9) & 1))
}
elastic=
for _ in $(seq 600); do
  elastic=$(pgrep -P "$pid" -f fedshard-elastic.sh)  # under timeout
  [ -e "$tmp/holding" ] && [ -n "$elastic" ] && usr1_trapped "$elastic" && break
  sleep 0.1
done
kill -USR1 "$elastic"
wait "$pid"
preempted_ok "notice while the launch starts" "$run" $? 1
grep -q "by the preemption notice before its ranks could take it" "$run.log" ||
  fail "notice while the launch starts: no relaunch with the notice standing in the log"
timeout 180 "${mpi[@]}" -np 4 "$bin" "${four[@]}" --out "$run" --resume auto >>"$run.log" 2>&1 || fail "notice resume"
same_tail "notice while the launch starts, resumed" "$run" "$tmp/runs/ref4" 1 14

# 8. Notices that come after the launch ended, while fedshard-elastic.sh tidies up: its echo of the launch's log
# (`tail`, here a wrapper first on PATH) sends them to the script once the launch is over, until the script says it
# took one. Bash's default action for SIGUSR1 would end the script there and fail a job whose training had finished.
run="$tmp/runs/notice-after-end"
mkdir -p "$tmp/late-bin"
cat >"$tmp/late-bin/tail" <<EOF
#!/usr/bin/env bash
$(command -v tail) "\$@"
for _ in \$(seq 3000); do
  grep -q "preemption notice after the launch ended" "$run.log" && exit 0
  kill -USR1 "\$PPID" 2>/dev/null || exit 0
  sleep 0.05
done
EOF
chmod +x "$tmp/late-bin/tail"
PATH="$tmp/late-bin:$PATH" timeout 300 bash "$here/../scripts/fedshard-elastic.sh" --np 1 \
  --launcher "${mpi[*]} -np {NP}" -- "$bin" "${one[@]}" --steps 4 --out "$run" >"$run.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "fedshard-elastic: finished" "$run.log" \
   && grep -q "preemption notice after the launch ended" "$run.log"; then
  ok "a notice after the run finished: taken, exit 0, finished"
else
  fail "a notice after the run finished: rc=$rc"
  tail -3 "$run.log" | sed 's/^/    /'
fi

if [ "$fails" -ne 0 ]; then
  echo "$fails preemption/elastic case(s) failed"
  exit 1
fi
echo "all preemption and elastic cases passed"
