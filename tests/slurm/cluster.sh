# Sourced by tests/slurm/slurm.sh: a one-host Slurm cluster of its own (munge, slurmctld, slurmd) in a
# private directory, on free ports, run as root, ended by PID: nothing outside that directory is touched and
# no other Slurm or munge on the machine is used or stopped.
#   slurm_up DIR CPUS   start it (SLURM_CONF exported); returns 2 when it cannot run here (not installed, not
#                       root) and 1 when it did not come up, with the reason in $slurm_why
#   slurm_down          end the daemons it started
slurm_pids=()

# Two TCP ports free now, distinct (both held open until both are known).
free_ports() {
  python3 -c '
import socket
held = [socket.socket() for _ in range(2)]
for s in held: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in held))'
}

slurm_up() {
  local dir=$1 cpus=$2 node
  node=$(hostname -s)
  slurm_why=
  for tool in munged mungekey slurmctld slurmd sinfo sbatch scontrol scancel squeue; do
    command -v "$tool" >/dev/null || { slurm_why="$tool not installed (apt: munge slurmctld slurmd slurm-client)"; return 2; }
  done
  [ "$(id -u)" -eq 0 ] || { slurm_why="not root: munged and slurmd need it"; return 2; }
  mkdir -p "$dir"/{munge,state,spool,log}
  chmod 700 "$dir/munge"
  mungekey --create --keyfile "$dir/munge/munge.key" 2>"$dir/log/mungekey.log" || { slurm_why="mungekey failed"; return 1; }
  munged --force --socket "$dir/munge/socket" --key-file "$dir/munge/munge.key" --pid-file "$dir/munge/pid" \
    --log-file "$dir/log/munged.log" --seed-file "$dir/munge/seed" 2>>"$dir/log/munged.log" \
    || { slurm_why="munged did not start ($(tail -1 "$dir/log/munged.log"))"; return 1; }
  slurm_pids+=("$(cat "$dir/munge/pid")")
  # Our ranks oversubscribe the cores: Slurm is told of CPUS cores (config_overrides lets slurmd accept more
  # than it finds). Processes are tracked by process group (no cgroups here); requeue is allowed, and a job
  # signalled before its time limit (--signal) is given 60 s before it is killed.
  local ports
  read -r -a ports < <(free_ports)
  cat >"$dir/slurm.conf" <<CONF
ClusterName=fedshard-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=${ports[0]}
SlurmdPort=${ports[1]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
JobRequeue=1
KillWait=60
ReturnToService=2
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -D -i -f "$SLURM_CONF" >>"$dir/log/slurmctld.out" 2>&1 &
  slurm_pids+=($!)
  slurmd -D -f "$SLURM_CONF" -N "$node" >>"$dir/log/slurmd.out" 2>&1 &
  slurm_pids+=($!)
  local state=
  for _ in $(seq 300); do
    state=$(sinfo -h -n "$node" -o %t 2>/dev/null)
    [ "$state" = idle ] && return 0
    sleep 0.2
  done
  slurm_why="the node is '${state:-not known}' after 60 s, not idle ($(tail -1 "$dir/log/slurmctld.log" 2>/dev/null))"
  return 1
}

slurm_down() {
  local pid
  for pid in "${slurm_pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${slurm_pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  slurm_pids=()
}
