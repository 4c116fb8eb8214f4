#!/usr/bin/env bash
# 2-rank ring on the node tier (200 Mbit/s) of the three-tier network, 2 MiB all-reduces: idle box vs 6 busy
# loops (the other ranks' training threads). Does CPU contention slow shaped TCP collectives?
set -euo pipefail
cd /work/main
export NETNS_PREFIX=fsz NETNS_SUBNET=10.80.0
source bench/netns_lib.sh; trap 'kill ${hogs[*]} 2>/dev/null; netns_down' EXIT
hogs=()
netns_up_tiers 8 2 4 200 50 20
echo idle; netns_mpirun -np 2 $netns_wrap /tmp/netns-bin/ring_probe 2 8 | sort -t= -k5 -n | sed -n '4,5p'
for i in 1 2 3 4 5 6; do ( while :; do :; done ) & hogs+=($!); done
echo "6 busy loops"; netns_mpirun -np 2 $netns_wrap /tmp/netns-bin/ring_probe 2 8 | sort -t= -k5 -n | sed -n '4,5p'
