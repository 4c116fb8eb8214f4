#!/usr/bin/env bash
# fedshard side by side with the real PyTorch peers, same model (`small`, byte tokenizer), same Brown windows
# (fedshard's iid sampling re-implemented in bench/peers/torch_peer.py), same batch, AdamW, LR schedule and
# clipping, 4 processes with one intra-op thread each, back to back:
#   fsdp      fedshard fsdp                       vs FSDP2 fully_shard (1-D mesh, Gloo)
#   ddp       fedshard ddp                        vs DistributedDataParallel (Gloo)
#   hsdp      fedshard hsdp --shard-size 2        vs FSDP2 on a 2-D mesh (replicate 2 x shard 2)
#   diloco    fedshard fl-fsdp, nesterov outer    vs torchft DiLoCo (Nesterov SGD outer), FSDP2 in each group
#   localsgd  fedshard fl-ddp, fedavg outer       vs torchft LocalSGD (parameter average), DDP in each group
# (federated pairs: 2 groups of 2 ranks = 2 torchft replica groups of 2, same K, outer lr and momentum)
# on two networks: shared memory (plain mpirun) and bench/netns_lib.sh's namespaces, one rank per namespace
# behind a tbf-shaped veth of MBIT. Every timed run holds /tmp/fedshard-bench.lock. Writes OUT/runs/ (logs,
# metrics, per-rank JSON, tc byte counters) and OUT/table.md + OUT/summary.json (bench/peers/table.py).
# Needs root (ip netns, tc). Sets up the Python side itself (scripts/setup-peers.sh).
# Usage: bench/peers.sh [FEDSHARD (binary or build dir; default build)] [STEPS (20)] [FED_STEPS (32)] [MBIT (100)]
# Env: PAIRS="fsdp ddp hsdp diloco localsgd"  NETS="shm netns"  BATCH=2  SYNC_EVERY=4  OUTER_LR=0.7
#      OUTER_MOMENTUM=0.9  EVAL_WINDOWS=128  OUT=docs/results/peers  PROFILE_PAIRS="" (fsdp ddp hsdp: peers re-run on shared
#      memory under torch.profiler, untimed)  SEED=0 (both sides' initial draws and data order)  SAME_INIT=0 (1: fedshard
#      starts from the peer's seeded initial weights, written as a Hugging Face directory, so only the training differs)
set -euo pipefail
die() {
  echo "peers: error: $*" >&2
  exit 1
}
fs=${1:-build}
if [ -d "$fs" ]; then fs=$fs/fedshard; fi
[ -x "$fs" ] || die "no fedshard binary at $fs (give a build dir or the binary)"
fs=$(realpath "$fs")
steps=${2:-20}
fed_steps=${3:-32}
mbit=${4:-100}
pairs=${PAIRS:-fsdp ddp hsdp diloco localsgd}
nets=${NETS:-shm netns}
batch=${BATCH:-2}
K=${SYNC_EVERY:-4}
outer_lr=${OUTER_LR:-0.7}
outer_mom=${OUTER_MOMENTUM:-0.9}
eval_windows=${EVAL_WINDOWS:-128}
seed=${SEED:-0}
same_init=${SAME_INIT:-0}
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-docs/results/peers}
runs=$out/runs
[ -f data/brown/manifest.json ] || die "data/brown is missing: run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first"
for c in mpirun flock ip tc; do command -v $c >/dev/null || die "$c not found"; done
scripts/setup-peers.sh || die "scripts/setup-peers.sh failed"
py=$root/.venv/bin/python3
mkdir -p "$runs"  # runs of other pairs/networks stay, so a bench can be completed in parts (PAIRS, NETS)

# Timed runs of different people never overlap: hold the shared lock for the length of each run.
exec 9>>/tmp/fedshard-bench.lock
locked() {
  flock 9
  local rc=0
  "$@" || rc=$?
  flock -u 9
  return $rc
}

export NETNS_PREFIX=${NETNS_PREFIX:-fsp} NETNS_SUBNET=${NETNS_SUBNET:-10.78.0}
source bench/netns_lib.sh
lh_pid=
stop_lighthouse() {  # (no bare && lists here: under set -e a killed lighthouse's status would end the script)
  if [ -n "$lh_pid" ]; then
    kill "$lh_pid" 2>/dev/null || true
    wait "$lh_pid" 2>/dev/null || true
  fi
  lh_pid=
}
trap 'stop_lighthouse; netns_down' EXIT

fs_args() {  # fedshard's side of each pair
  case $1 in
    fsdp) echo "--strategy fsdp --steps $steps" ;;
    ddp) echo "--strategy ddp --steps $steps" ;;
    hsdp) echo "--strategy hsdp --shard-size 2 --steps $steps" ;;
    diloco) echo "--strategy fl-fsdp --group-size 2 --sync-every $K --steps $fed_steps --set federation.outer_optimizer=nesterov
                  --set federation.outer_lr=$outer_lr --set federation.outer_momentum=$outer_mom" ;;
    localsgd) echo "--strategy fl-ddp --group-size 2 --sync-every $K --steps $fed_steps --set federation.outer_optimizer=fedavg" ;;
    *) die "unknown pair $1 (fsdp ddp hsdp diloco localsgd)" ;;
  esac
}
# fl-*: evaluate once at the end, as the peers do (federation.eval_after_sync would evaluate after every round).
fed_eval=(--set federation.eval_after_sync=false)
# fedshard recomputes sharded units in backward (activation_checkpointing = auto); the peers do the same work.
ac_of() { case $1 in fsdp | hsdp | diloco) echo on ;; *) echo off ;; esac; }
steps_of() { case $1 in diloco | localsgd) echo "$fed_steps" ;; *) echo "$steps" ;; esac; }

wire_bytes() {  # bytes the 4 ranks' namespaces sent through their shaped links so far (tbf counters)
  local sum=0 n b
  for n in 0 1 2 3; do
    b=$(ip netns exec "${pfx}n$n" tc -s qdisc show dev eth0 | awk '/Sent/ {print $2; exit}')
    sum=$((sum + b))
  done
  echo $sum
}

port=29640
run_pair() {  # NET PAIR: fedshard, then the peer, each timed under the lock; failures are recorded, not fatal
  local where=$1 pair=$2 launch tag lh_addr addrs before rc
  local common=(--config configs/demo.toml --batch-size "$batch" --threads 1 --ranks-per-node 1 --eval-every 0
                --seed "$seed" --set eval.windows="$eval_windows"
                --set parallel.activation_checkpointing="$(ac_of "$pair")")
  if [ "$same_init" = 1 ]; then common+=(--init-from "$runs/init-s$seed"); fi
  if [ "$where" = shm ]; then
    launch=(mpirun --oversubscribe --allow-run-as-root -np 4)
    lh_addr=127.0.0.1 addrs=""
  else
    launch=(netns_mpirun -np 4 -x GLOO_SOCKET_IFNAME=eth0 "$netns_wrap")
    lh_addr=$net.254 addrs=$net.1,$net.2,$net.3,$net.4
  fi

  rm -rf "$runs/$where-fedshard-$pair" "$runs/$where-fedshard-$pair".* "$runs/$where-peer-$pair".*
  tag=$where-fedshard-$pair
  echo "peers: $tag" >&2
  if [ "$where" = netns ]; then before=$(wire_bytes); fi
  rc=0
  # shellcheck disable=SC2046  # fs_args is a word list by design
  locked "${launch[@]}" "$fs" train "${common[@]}" "${fed_eval[@]}" $(fs_args "$pair") --out "$runs/$tag" >"$runs/$tag.log" 2>&1 || rc=$?
  if [ "$where" = netns ]; then echo "$before $(wire_bytes)" >"$runs/$tag.wire"; fi
  rm -rf "$runs/$tag/checkpoints"  # the end-of-run checkpoint (~120 MB) is not part of the comparison
  [ $rc -eq 0 ] || grep -m1 'error' "$runs/$tag.log" >"$runs/$tag.error" || echo "exit status $rc" >"$runs/$tag.error"

  tag=$where-peer-$pair
  echo "peers: $tag" >&2
  port=$((port + 10))
  if [ "$pair" = diloco ] || [ "$pair" = localsgd ]; then  # torchft's lighthouse, local, outside the namespaces
    "$root/.venv/bin/torchft_lighthouse" --min_replicas 2 --join_timeout_ms 20000 --bind "$lh_addr:$((port + 5))" \
      >"$runs/$tag.lighthouse.log" 2>&1 9>&- &
    lh_pid=$!
    sleep 1
  fi
  if [ "$where" = netns ]; then before=$(wire_bytes); fi
  rc=0
  locked "${launch[@]}" "$py" bench/peers/torch_peer.py --mode "$pair" --steps "$(steps_of "$pair")" --batch "$batch" \
    --sync-every "$K" --outer-lr "$outer_lr" --outer-momentum "$outer_mom" --ac "$(ac_of "$pair")" \
    --eval-windows "$eval_windows" --seed "$seed" --port "$port" --lighthouse "http://$lh_addr:$((port + 5))" \
    ${addrs:+--addrs "$addrs"} --out "$runs/$tag" >"$runs/$tag.log" 2>&1 || rc=$?
  if [ "$where" = netns ]; then echo "$before $(wire_bytes)" >"$runs/$tag.wire"; fi
  stop_lighthouse
  [ $rc -eq 0 ] || grep -m1 'torch_peer: error' "$runs/$tag.log" >"$runs/$tag.error" ||
    echo "exit status $rc" >"$runs/$tag.error"
}

if [ "$same_init" = 1 ]; then
  "$py" bench/peers/torch_peer.py --save-init "$runs/init-s$seed" --seed "$seed" || die "the peer's initial model"
fi
for where in $nets; do  # not $net: netns_lib.sh keeps its subnet in that name
  case $where in
    shm) ;;
    netns)
      # Another benchmark on the same /24 would get crossed routes: refuse rather than disturb it.
      if ip -br addr | grep -v "^${pfx}br " | grep -q " $net\.254/"; then
        die "$net.0/24 is in use by another interface (set NETNS_SUBNET to a free /24)"
      fi
      netns_up 4 1 "$mbit" ;;
    *) die "unknown network $where (shm netns)" ;;
  esac
  for pair in $pairs; do run_pair "$where" "$pair"; done
  if [ "$where" = netns ]; then netns_down; fi
done
rm -rf "$runs/init-s$seed"  # 12 MB of weights the same seed writes again; not part of the comparison

for pair in ${PROFILE_PAIRS:-}; do  # where the peer's step time goes (untimed; not in the table's numbers)
  echo "peers: profile peer $pair" >&2
  port=$((port + 10))
  locked mpirun --oversubscribe --allow-run-as-root -np 4 "$py" bench/peers/torch_peer.py --mode "$pair" --steps 6 \
    --batch "$batch" --ac "$(ac_of "$pair")" --port "$port" --profile "$runs/profile-peer-$pair.txt" \
    --out "$runs/profile-peer-$pair" >"$runs/profile-peer-$pair.log" 2>&1 || echo "peers: profile of $pair failed" >&2
done

{
  echo "fedshard: $("$fs" --version 2>&1 | head -1)"
  echo "torch: $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "torchft: $("$py" -c 'from importlib.metadata import version; print(version("torchft"))')"
  echo "open mpi: $(mpirun --version 2>&1 | head -1)"
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
} >"$out/versions.txt"
# Every invocation that wrote into OUT/runs, in order (a table may be completed in parts with PAIRS/NETS).
echo "$(date -u +%FT%TZ) PAIRS=\"$pairs\" NETS=\"$nets\" SEED=$seed SAME_INIT=$same_init BATCH=$batch SYNC_EVERY=$K OUTER_LR=$outer_lr OUTER_MOMENTUM=$outer_mom EVAL_WINDOWS=$eval_windows PROFILE_PAIRS=\"${PROFILE_PAIRS:-}\" bench/peers.sh $*" >>"$out/commands.txt"
/usr/bin/env python3 bench/peers/table.py "$out" --mbit "$mbit" || die "bench/peers/table.py failed"
if ls "$runs"/*.error >/dev/null 2>&1; then
  die "$(ls "$runs"/*.error | wc -l) run(s) failed: $(cd "$runs" && ls -- *.error | tr '\n' ' ')(see $runs)"
fi
