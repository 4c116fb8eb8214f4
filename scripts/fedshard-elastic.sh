#!/usr/bin/env bash
# Keeps a fedshard training job going through failures and preemption, as torchelastic does with restarts.
#
#   scripts/fedshard-elastic.sh [--max-restarts N] --np N --launcher 'mpirun -np {NP}' -- fedshard train ARGS...
#
# Every launch runs LAUNCHER (with {NP} replaced by the number of ranks) followed by the train command and
# `--resume auto`, so it continues from the run directory's latest checkpoint (--out of the train command).
#   exit 0   the run is finished: exit 0.
#   exit 75  preempted (SIGTERM/SIGUSR1, e.g. Slurm's --signal): a checkpoint was written. Inside a Slurm job
#            the job is requeued (scontrol requeue); this script exits 75 either way. Not a failure.
#            SIGTERM or SIGUSR1 sent to this script itself is passed on to the ranks as SIGUSR1; if it ends the
#            launch before its ranks could take it, they are relaunched with FEDSHARD_PREEMPTED=1 set, which
#            stops them after their first step with a checkpoint.
#   other    a failure. The launcher's output names the failed rank ("process rank 3" from mpirun, "task 3:"
#            or "tasks 3,5-6:" from srun, before srun ends the step's other tasks). Under fl-* with several
#            groups, every group with a failed rank is dropped and the others continue from their own state on
#            the remaining ranks (train.resume_groups); with one group, the job goes on with one rank fewer per
#            failed rank. At most N restarts (default 3).
set -u

max_restarts=3
np=
launcher=
while [ $# -gt 0 ]; do
  case $1 in
    --max-restarts) max_restarts=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --launcher) launcher=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "fedshard-elastic: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ -z "$np" ] || [ -z "$launcher" ] || [ $# -eq 0 ]; then
  echo "fedshard-elastic: usage: $0 [--max-restarts N] --np N --launcher 'mpirun -np {NP}' -- fedshard train ARGS..." >&2
  exit 2
fi
[[ "$launcher" == *"{NP}"* ]] || { echo "fedshard-elastic: --launcher must contain {NP}" >&2; exit 2; }
train=("$@")
out=
for ((i = 0; i < ${#train[@]}; i++)); do
  [ "${train[$i]}" = "--out" ] && out=${train[$((i + 1))]:-}
done
[ -n "$out" ] || { echo "fedshard-elastic: the train command needs --out RUN_DIR" >&2; exit 2; }
command -v python3 >/dev/null || { echo "fedshard-elastic: needs python3 to read $out/config.json" >&2; exit 2; }

say() { echo "fedshard-elastic: $*" >&2; }

# The run's groups after dropping those of the failed ranks: prints "NP GROUPS IDS" (GROUPS empty: one group).
survivors() {  # FAILED_RANKS...
  python3 - "$out/config.json" "$np" "$@" <<'EOF'
import json, sys
config, np, failed = sys.argv[1], int(sys.argv[2]), [int(r) for r in sys.argv[3:]]
r = json.load(open(config))["resolved"]
sizes, ids = r["group_sizes"], r.get("group_ids") or list(range(len(r["group_sizes"])))
if len(sizes) == 1:
    print(np - len(set(failed)), "", "")
    sys.exit()
first = [sum(sizes[:g]) for g in range(len(sizes))]
lost = {max(g for g in range(len(sizes)) if first[g] <= rank) for rank in failed}
keep = [g for g in range(len(sizes)) if g not in lost]
print(sum(sizes[g] for g in keep), ",".join(str(sizes[g]) for g in keep), ",".join(str(ids[g]) for g in keep))
EOF
}

# The ranks a launch lost, from its launcher's messages: mpirun's "process rank 3 ... exited on signal 9", srun's
# "srun: error: NODE: task 3: Killed" or, for tasks that failed together, "tasks 2,5-6: Exited with exit code 1".
# srun's lines after "Job step aborted" (or slurmstepd's "STEP ... CANCELLED") name the tasks it ended itself.
failed_ranks() {  # LOG
  python3 - "$1" <<'EOF'
import re, sys
ranks = set()
for line in open(sys.argv[1], errors="replace"):
    if "Job step aborted" in line or re.search(r"\*\*\* STEP \S+ ON \S+ CANCELLED", line):
        break
    m = re.search(r"process rank (\d+)", line)
    if m:
        ranks.add(int(m.group(1)))
    m = re.search(r"^srun: error: \S+: tasks? ([\d,-]+): ", line)
    if m:
        for part in m.group(1).split(","):
            first, _, last = part.partition("-")
            ranks.update(range(int(first), int(last or first) + 1))
print(" ".join(map(str, sorted(ranks))))
EOF
}

# A preemption notice (SIGTERM, or Slurm's --signal=B:USR1 when this script is the batch shell) is passed on to a
# running launch as SIGUSR1, which mpirun and srun forward to every rank (mpirun would turn a SIGTERM into a kill of
# the job); the ranks then checkpoint and the launcher exits 75. One that comes while a launch is being started is
# passed on once its pid is known; one after a launch ended stands for the next launch (FEDSHARD_PREEMPTED), and
# after a finished run changes nothing. The trap is kept for the script's whole life: bash's default action for
# SIGUSR1 would end this script and fail a job whose training had finished.
launched=
starting=0
on_notice() {
  notified=1
  if [ -n "$launched" ]; then
    noticed=1
    say "preemption notice: passed on to the ranks"
    kill -USR1 "$launched" 2>/dev/null
  elif [ "$starting" = 1 ]; then
    noticed=1
    held=1
  else
    say "preemption notice after the launch ended: a next launch, if any, stops with a checkpoint after its first step"
    export FEDSHARD_PREEMPTED=1
  fi
}
trap on_notice TERM USR1
# The launcher runs in the background, where SIGINT (Ctrl-C) does not reach it: end the job and stop.
on_interrupt() {
  if [ "$starting" = 1 ]; then
    interrupted=1
    return
  fi
  if [ -n "$launched" ]; then
    kill -TERM "$launched" 2>/dev/null
    while kill -0 "$launched" 2>/dev/null; do wait "$launched"; done
  fi
  exit 130
}
trap on_interrupt INT

extra=()
restarts=0
attempt=0
while true; do
  attempt=$((attempt + 1))
  log="$out.elastic-$attempt.log"
  mkdir -p "$(dirname "$out")"
  say "launch $attempt on $np ranks: ${launcher//\{NP\}/$np} ${train[*]} --resume auto ${extra[*]}"
  : >"$log"
  noticed=0 held=0 interrupted=0
  started_preempted=${FEDSHARD_PREEMPTED:-}
  starting=1
  # shellcheck disable=SC2086  # the launcher is a command line to split
  ${launcher//\{NP\}/$np} "${train[@]}" --resume auto "${extra[@]}" >"$log" 2>&1 &
  launched=$!
  starting=0
  [ "$interrupted" = 1 ] && on_interrupt
  if [ "$held" = 1 ]; then
    say "preemption notice: passed on to the ranks"
    kill -USR1 "$launched" 2>/dev/null
  fi
  tail -n +1 -f --pid="$launched" "$log" &
  echoed=$!
  while true; do
    notified=0
    wait "$launched"
    rc=$?
    # A trapped signal ends the wait early (status > 128) while the launcher runs on: wait again.
    [ "$notified" = 1 ] && [ "$rc" -gt 128 ] && continue
    break
  done
  launched=
  # A trapped notice ends this wait early too.
  until wait "$echoed"; do kill -0 "$echoed" 2>/dev/null || break; done
  if [ "$rc" -eq 0 ]; then
    say "finished"
    exit 0
  fi
  if [ "$rc" -eq 75 ]; then
    say "preempted after a checkpoint; requeue to continue"
    if [ -n "${SLURM_JOB_ID:-}" ] && command -v scontrol >/dev/null; then scontrol requeue "$SLURM_JOB_ID"; fi
    exit 75
  fi
  # A notice that reached the launch before its ranks could take it (still starting: no handler yet) ended it
  # without a checkpoint. The notice still stands: relaunch with it, and the ranks stop with a checkpoint after
  # their first step (FEDSHARD_PREEMPTED; srun and a local mpirun pass the environment on to the ranks).
  if [ "$noticed" = 1 ] && [ -z "$started_preempted" ]; then
    say "launch $attempt ended (exit $rc) by the preemption notice before its ranks could take it; relaunching them to stop with a checkpoint"
    export FEDSHARD_PREEMPTED=1
    continue
  fi
  restarts=$((restarts + 1))
  if [ "$restarts" -gt "$max_restarts" ]; then
    say "launch $attempt failed (exit $rc); no restarts left (--max-restarts $max_restarts)"
    exit "$rc"
  fi
  failed=$(failed_ranks "$log")
  if [ -z "$failed" ] || [ ! -f "$out/config.json" ]; then
    say "launch $attempt failed (exit $rc) without naming a rank; relaunching on $np ranks"
    continue
  fi
  read -r np groups ids < <(survivors $failed)
  if [ "$np" -lt 1 ]; then
    say "no ranks left after losing rank(s) $failed"
    exit "$rc"
  fi
  extra=()
  [ -n "$groups" ] && extra=(--group-size 0 --groups "$groups" --set "train.resume_groups=$ids")
  say "launch $attempt failed (exit $rc), rank(s) $failed lost; relaunching on $np ranks${groups:+ as groups $groups (ids $ids)}"
done
