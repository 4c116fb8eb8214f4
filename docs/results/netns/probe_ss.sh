#!/usr/bin/env bash
# One ring_probe run with ss -tin / tc -s sampled in ranks 0 and 1's namespaces every 0.25 s.
# Usage: probe_ss.sh NP TAG [MPIRUN ARGS...]
set -euo pipefail
cd /work/main
np=$1 tag=$2; shift 2
export NETNS_PREFIX=fsx NETNS_SUBNET=10.78.0
source bench/netns_lib.sh
trap netns_down EXIT
netns_up 4 1 100
out=/work/main/docs/results/netns/probe-$tag; mkdir -p "$out"
( while :; do date +%s.%N; for n in 0 1; do echo "ns$n"; ip netns exec fsxn$n ss -tin state established; ip netns exec fsxn$n tc -s qdisc show dev eth0; done; sleep 0.25; done ) > "$out/ss.txt" 2>&1 &
sampler=$!
flock /tmp/fedshard-bench.lock bash -c "source bench/netns_lib.sh; netns_mpirun -np $np $* $netns_wrap /tmp/netns-bin/ring_probe ${MIB:-16} 3" | tee "$out/probe.txt"
kill $sampler
