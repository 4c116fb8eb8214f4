#!/usr/bin/env bash
# fsdp on 4 ranks, one per shaped 100 Mbit/s link: btl_tcp_links 1 vs 2, twice each, alternating.
set -euo pipefail
cd /work/main
export NETNS_PREFIX=fsy NETNS_SUBNET=10.79.0
source bench/netns_lib.sh; trap netns_down EXIT
netns_up 4 1 100
for rep in 1 2; do for l in 1 2; do
  NETNS_TCP_LINKS=$l flock /tmp/fedshard-bench.lock bash -c 'source bench/netns_lib.sh; netns_mpirun "$@"' _ -np 4 "$netns_wrap" /tmp/netns-bin/fedshard train --config configs/demo.toml --batch-size 2 --threads 1 --ranks-per-node 1 --steps 20 --eval-every 0 --set eval.windows=16 --strategy fsdp --out runs/ab-fsdp-links$l-$rep > runs/ab-fsdp-links$l-$rep.log 2>&1
  python3 -c "
import json, statistics as st
s=[json.loads(l) for l in open('runs/ab-fsdp-links$l-$rep/metrics.jsonl') if '\"type\":\"step\"' in l]
s=[x for x in s if x['step']>=3]
print('links=$l rep=$rep', {k: round(st.mean([x['time_s'][k] for x in s]),3) for k in ['total','compute','comm_exposed','comm_real']})"
done; done
