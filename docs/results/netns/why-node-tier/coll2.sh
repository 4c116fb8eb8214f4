#!/usr/bin/env bash
# bench_collectives on 2 ranks, one namespace each, node tier (200 Mbit/s htb class, as netns_up_tiers), idle
# and with LOAD busy loops (stand-ins for the training threads) on the box. Usage: [NODE_MBIT=200] coll2.sh LOAD OUTFILE
set -u
cd /work/main  # (OUTFILE is taken relative to the caller)
export NETNS_PREFIX=fsc NETNS_SUBNET=10.79.0
source bench/netns_lib.sh
trap netns_down EXIT
load=$1 out=$2  # OUTFILE: an absolute path
netns_up_tiers 2 2 2 "${NODE_MBIT:-200}" 50 20  # NODE_MBIT: the node rate
pids=()
for i in $(seq 1 "$load"); do (while :; do :; done) & pids+=($!); done
timeout 200 bash -c "source bench/netns_lib.sh; netns_mpirun -np 2 $netns_wrap stdbuf -oL /tmp/c-bin/bench_collectives" >"$out" 2>&1
for p in "${pids[@]}"; do kill "$p"; done
