#!/usr/bin/env bash
# fedshard under a running Slurm (a one-host cluster this script starts: tests/slurm/cluster.sh), each case
# checked from the run's metrics and checkpoints, every job the README's scripts/fedshard.sbatch:
#  1. sbatch trains to the end on 8 tasks (fl-fsdp, 2 groups of 4), launched by srun --mpi=pmix and by mpirun
#     inside the allocation: both runs' losses equal the same job's under plain mpirun, bit for bit.
#  2. Preemption: Slurm's notice to the batch shell (scancel --batch --signal=USR1, what --signal=B:USR1 sends)
#     mid-run: both groups stop, a checkpoint is written, exit 75, fedshard-elastic.sh requeues the job, the
#     requeued job resumes and finishes with the uninterrupted run's losses. Under srun and under mpirun.
#  3. One task's process killed (kill -9 of the PID Slurm lists for task 6): fedshard-elastic.sh reads srun's
#     message, drops group 1 and relaunches group 0 inside the allocation, continuing its own state (the losses of
#     a direct resume of group 0 from the same checkpoint).
#  4. Time limit: a job given one minute is signalled by Slurm before its limit (--signal=B:USR1@45),
#     checkpoints, is requeued and finishes on a next allocation.
#  5. Two sites of a federation across facilities as two sbatch jobs (scripts/fedshard-site.sbatch) against a round
#     server on this host: both finish with the same global model.
# Steps are held by FEDSHARD_FAULT stalls where a signal or kill must land, so nothing depends on the machine's
# speed. Exit 77 (skipped) with one line where Slurm cannot run here (not root, not installed).
# Usage: slurm.sh FEDSHARD_BINARY
set -u
bin=$(realpath "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
source "$here/../train_helpers.sh"
source "$here/cluster.sh"
trap 'slurm_down; pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
slurm_up "$tmp/slurm" 8
case $? in
  0) ;;
  2) echo "SKIP: no Slurm here: $slurm_why"; exit 77 ;;
  *) echo "FAIL: Slurm did not come up: $slurm_why (logs in $tmp/slurm/log)"; trap 'slurm_down' EXIT; exit 1 ;;
esac
echo "ok   Slurm $(sinfo -V | cut -d' ' -f2) up: $(sinfo -h -o '%P %D node, %c CPUs, %t')"
make_corpus
export FEDSHARD_BIN=$bin OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(--model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --threads 1 --eval-every 0 --set eval.windows=4
      --steps 8 --strategy fl-fsdp --group-size 4 --sync-every 2 --checkpoint-every 2 --set checkpoint.keep=10)
srun_launcher='srun --mpi=pmix --ntasks={NP}'
mpirun_launcher='mpirun -np {NP}'

# The README shows scripts/fedshard.sbatch as it is.
if $py - "$root/README.md" "$root/scripts/fedshard.sbatch" <<'EOF'; then ok "README shows scripts/fedshard.sbatch verbatim"; else fail "README's sbatch script is not scripts/fedshard.sbatch"; fi
import sys
sys.exit(0 if open(sys.argv[2]).read() in open(sys.argv[1]).read() else 1)
EOF

# submit NAME [SBATCH OPTIONS...] -- [TRAIN ARGS...]: prints the job id. One host, 8 tasks; the job's output in
# $tmp/NAME.out; run directory $tmp/NAME.
submit() {
  local name=$1 opts=()
  shift
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  sbatch --parsable --chdir "$root" --nodes=1 --ntasks=8 --ntasks-per-node=8 --cpus-per-task=1 \
    --output "$tmp/$name.out" "${opts[@]}" scripts/fedshard.sbatch "${args[@]}" --out "$tmp/$name" "$@"
}

job_field() { scontrol show job "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | head -1 | cut -d= -f2; }

# Waits (up to 300 s) until job ID ends; prints its final state. A requeued job is held by Slurm for two
# minutes (its BeginTime, past the lifetime of the old allocation's credential); the test releases it once it has
# been pending for two seconds on the clock, as an administrator may, and again every two seconds while it is
# held. Not at once: slurmd refuses a batch job whose credential is from the same second as the old allocation's
# kill ("already killed, do not launch batch job"), and the job ends FAILED. (A start time in the future instead
# would wait for Slurm's next scheduling pass, up to a minute.)
wait_job() {  # ID
  local state held_since=
  for _ in $(seq 1500); do
    state=$(job_field "$1" JobState)
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) echo "$state"; return ;;
      PENDING)
        if [ "$(job_field "$1" Reason)" = BeginTime ]; then
          [ -n "$held_since" ] || held_since=$SECONDS
          if [ $((SECONDS - held_since)) -ge 2 ]; then
            scontrol update JobId="$1" StartTime=now 2>/dev/null
            held_since=$SECONDS
          fi
        else
          held_since=
        fi ;;
      *) held_since= ;;
    esac
    sleep 0.2
  done
  scancel "$1"
  echo "still ${state:-unknown} after 300 s"
}

# Waits (up to 120 s) until FILE has a line containing TEXT.
wait_for() {  # FILE TEXT
  for _ in $(seq 600); do grep -qs -- "$2" "$1" && return 0; sleep 0.2; done
  return 1
}

same_losses() {  # NAME RUN
  if [ -s "$tmp/ref/metrics.jsonl" ] && diff <(losses "$2") <(losses "$tmp/ref") >/dev/null; then
    ok "$1: the 8 float32 losses equal plain mpirun's"
  else
    fail "$1: losses differ from plain mpirun's"
    diff <(losses "$2") <(losses "$tmp/ref") | head -4 | sed 's/^/    /'
  fi
}

# The last lines of job NAME's output other than step lines, indented under a failure.
job_tail() {  # NAME
  grep -v "^step" "$tmp/$1.out" | tail -8 | sed 's/^/    /'
}

# The step a run was preempted after, and whether its checkpoint of that step is the latest one.
preempted_at() {  # RUN
  local step
  step=$($py -c "
import json
for l in open('$1/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'preempted': print(j['step'])" 2>/dev/null | head -1)
  [ -n "$step" ] && [ -d "$1/checkpoints/$(printf 'step-%08d' "$step")" ] && echo "$step"
}

timeout 120 "${mpi[@]}" -np 8 "$bin" train "${args[@]}" --out "$tmp/ref" >"$tmp/ref.log" 2>&1 || fail "plain mpirun reference run"

# 1. The README's job, under both launchers.
for launcher in srun mpirun; do
  var=${launcher}_launcher
  id=$(FEDSHARD_LAUNCHER=${!var} submit "train-$launcher" --)
  state=$(wait_job "$id")
  if [ "$state" = COMPLETED ] && grep -q "fedshard-elastic: finished" "$tmp/train-$launcher.out"; then
    ok "sbatch, $launcher inside the allocation: job $id $state"
    same_losses "sbatch, $launcher" "$tmp/train-$launcher"
  else
    fail "sbatch, $launcher: job $id $state"
    job_tail "train-$launcher"
  fi
done

# 2. Preemption: rank 0 (group 0) is held in step 3 until the notice reaches it; group 1 meets it at the round.
for launcher in srun mpirun; do
  var=${launcher}_launcher
  name=preempt-$launcher
  id=$(FEDSHARD_FAULT=stall:0:3 FEDSHARD_LAUNCHER=${!var} submit "$name" --)
  if wait_for "$tmp/$name.out" "rank 0 stalls at step 3"; then
    scancel --batch --signal=USR1 "$id"
  fi
  state=$(wait_job "$id")
  stop=$(preempted_at "$tmp/$name")
  restarts=$(job_field "$id" Restarts)
  if [ "$state" = COMPLETED ] && [ "$stop" = 3 ] && [ "$restarts" = 1 ] \
     && grep -q "preempted after a checkpoint; requeue" "$tmp/$name.out" \
     && grep -q "resuming from .*step-00000003" "$tmp/$name.out"; then
    ok "preemption, $launcher: notice to the batch shell, checkpoint of step 3, exit 75, requeued, resumed, $state"
    same_losses "preemption, $launcher" "$tmp/$name"
  else
    fail "preemption, $launcher: job $id $state, preempted after step '${stop}', restarts '${restarts}'"
    job_tail "$name"
  fi
done

# 3. A lost task: rank 6 (group 1) is held in step 3; its process, as Slurm lists it, is killed.
name=lost-task
id=$(FEDSHARD_FAULT=stall:6:3 FEDSHARD_LAUNCHER=$srun_launcher submit "$name" --)
killed=
if wait_for "$tmp/$name.out" "rank 6 stalls at step 3"; then
  pid=$(scontrol listpids "$id.0" 2>/dev/null | awk '$5 == 6 { print $1 }' | head -1)
  [ -n "$pid" ] && kill -9 "$pid" && killed=$pid
fi
state=$(wait_job "$id")
relayout=$($py -c "
import json
for l in open('$tmp/$name/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'relayout' and j['old_groups'] == [4, 4] and j['new_groups'] == [4] and j['group_ids'] == [0]:
        print(j['step'])" 2>/dev/null)
if [ -n "$killed" ] && [ "$state" = COMPLETED ] && [ "$relayout" = 2 ] \
   && grep -q "srun: error: .*: task 6: Killed" "$tmp/$name.out" \
   && grep -q "rank(s) 6 lost; relaunching on 4 ranks as groups 4 (ids 0)" "$tmp/$name.out"; then
  ok "lost task: kill -9 of task 6 (pid $killed from scontrol listpids), srun named it, group 0 relaunched alone from step 2, $state"
  timeout 120 "${mpi[@]}" -np 4 "$bin" train "${args[@]}" --group-size 0 --groups 4 --set train.resume_groups=0 \
    --resume "$tmp/$name/checkpoints/step-00000002" --out "$tmp/direct" >"$tmp/direct.log" 2>&1 || fail "direct resume of group 0"
  if diff <(losses "$tmp/$name" 3) <(losses "$tmp/direct" 3) >/dev/null && [ "$(losses "$tmp/direct" 3 | wc -l)" -eq 6 ]; then
    ok "lost task: group 0 continued its own state (steps 3-8 equal a direct resume of group 0 from step 2)"
  else
    fail "lost task: the relaunch's losses differ from a direct resume of group 0"
  fi
else
  fail "lost task: killed '${killed}', job $id $state, relayout at '${relayout}'"
  job_tail "$name"
fi

# 4. A time limit of one minute, the notice 45 s before it; rank 0 is held in step 3 until the notice comes.
# Slurm sends it on its own schedule, from 15 s into each allocation: on a loaded machine it may come before
# step 3, and the requeued job be signalled again. Every allocation but the last must stop with a checkpoint
# that the next one resumes from, and the run end with the uninterrupted run's losses.
name=time-limit
id=$(FEDSHARD_FAULT=stall:0:3 FEDSHARD_LAUNCHER=$srun_launcher submit "$name" --time=1 --signal=B:USR1@45 --)
state=$(wait_job "$id")
restarts=$(job_field "$id" Restarts)
stops=$($py -c "
import json, os
stops = [j['step'] for j in map(json.loads, open('$tmp/$name/metrics.jsonl')) if j['type'] == 'preempted']
out = open('$tmp/$name.out').read()
ok = all(os.path.isdir('$tmp/$name/checkpoints/step-%08d' % s) and 'step-%08d (step %d)' % (s, s) in out for s in stops)
print(' '.join(map(str, stops)) if ok else 'unresumed')" 2>/dev/null)
if [ "$state" = COMPLETED ] && [ -n "$stops" ] && [ "$stops" != unresumed ] && [ "$restarts" = "$(wc -w <<<"$stops")" ] \
   && grep -q "preemption notice: passed on to the ranks" "$tmp/$name.out"; then
  ok "time limit: Slurm's notice before the limit, stopped after step(s) $stops with a checkpoint, requeued $restarts time(s), finished"
  same_losses "time limit" "$tmp/$name"
else
  fail "time limit: job $id $state, preempted after step(s) '${stops}', restarts '${restarts}'"
  job_tail "$name"
fi

# 5. Two sites of a federation as two sbatch jobs (scripts/fedshard-site.sbatch, 2 tasks each) against a round
# server on this host: both finish with the same global model (federation.audit's checksums after every round). The
# server waits for both in every round (--quorum 2): Slurm may start one job rounds before the other.
if "$bin" --version | grep -q "sites: yes"; then
  (
    cd "$tmp" || exit 1
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 -subj "/CN=slurm-test-ca" 2>/dev/null
    for n in roundserver site-a site-b; do
      openssl req -newkey rsa:2048 -nodes -keyout $n.key -out $n.csr -subj "/CN=$n" 2>/dev/null
      printf "subjectAltName=DNS:localhost,IP:127.0.0.1\n" >$n.ext
      openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $n.pem -days 30 -extfile $n.ext 2>/dev/null
    done
  )
  "$bin" serve --shard 0/1 --state "$tmp/rounds" --port-file "$tmp/rounds.port" --tls-cert "$tmp/roundserver.pem" \
    --tls-key "$tmp/roundserver.key" --tls-ca "$tmp/ca.pem" --round-deadline 300 --quorum 2 >"$tmp/rounds.log" 2>&1 &
  server=$!
  wait_for "$tmp/rounds.port" "" || true
  site_ids=()
  for s in a b; do
    site_ids+=("$(sbatch --parsable --chdir "$root" --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 \
      --output "$tmp/site-$s.out" scripts/fedshard-site.sbatch --model tiny --data "$tmp/corpus" --seq-len 32 \
      --batch-size 2 --threads 1 --eval-every 0 --set eval.windows=4 --steps 8 --strategy fsdp --sync-every 2 \
      --set federation.audit=true --site site-$s --server "localhost:$(cat "$tmp/rounds.port")" \
      --tls-cert "$tmp/site-$s.pem" --tls-key "$tmp/site-$s.key" --tls-ca "$tmp/ca.pem" --out "$tmp/site-$s")")
  done
  states="$(wait_job "${site_ids[0]}") $(wait_job "${site_ids[1]}")"
  kill -9 $server 2>/dev/null
  wait $server 2>/dev/null
  sums() { $py -c "import json; print(' '.join(str(j['checksum']) for j in map(json.loads, open('$1/audit/rank-00000.jsonl'))))" 2>/dev/null; }
  if [ "$states" = "COMPLETED COMPLETED" ] && [ -n "$(sums "$tmp/site-a")" ] && [ "$(sums "$tmp/site-a")" = "$(sums "$tmp/site-b")" ] &&
     [ "$(grep -c 'committed with sites \[site-a, site-b\]' "$tmp/rounds.log")" -eq 4 ]; then
    ok "two sites as two sbatch jobs (scripts/fedshard-site.sbatch) through the round server: $states, the same global model after all 4 rounds"
  else
    fail "two sites as sbatch jobs: $states; global models '$(sums "$tmp/site-a")' and '$(sums "$tmp/site-b")'"
    job_tail site-a
  fi
else
  echo "skip two sites as sbatch jobs: this build has no sites"
fi

if [ "$fails" -ne 0 ]; then
  trap 'slurm_down; pkill -9 -f "$tmp" 2>/dev/null' EXIT  # the jobs' output and the daemons' logs stay
  echo "$fails Slurm case(s) failed; jobs' output in $tmp, the daemons' logs in $tmp/slurm/log"
  exit 1
fi
echo "every Slurm case holds"
