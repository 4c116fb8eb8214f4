#!/usr/bin/env bash
# 8 ranks, every hop of the world ring at RATE Mbit/s (all three tiers the same): can this box carry 8 x RATE?
set -euo pipefail
cd /work/main
export NETNS_PREFIX=fsz NETNS_SUBNET=10.80.0
source bench/netns_lib.sh; trap netns_down EXIT
for rate in ${RATES:-50 200}; do
  netns_up_tiers 8 2 8 $rate $rate $rate
  echo "rate $rate Mbit/s per rank"
  flock /tmp/fedshard-bench.lock bash -c "source bench/netns_lib.sh; netns_mpirun -np 8 $netns_wrap /tmp/netns-bin/ring_probe 16 3"
  flock /tmp/fedshard-bench.lock bash -c "source bench/netns_lib.sh; netns_mpirun -np 2 $netns_wrap /tmp/netns-bin/ring_probe 16 3"
done
