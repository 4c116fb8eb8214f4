#!/usr/bin/env bash
# One hsdp H=2 run (compare.sh's config, STEPS steps) on the three-tier network (node 200, inter-node 50,
# inter-group 20 Mbit/s, a namespace per rank), with rank 0's TCP sockets sampled (ss -tinm) every 0.5 s.
# Usage: [INTER_MBIT=50] [STRATEGY_ARGS="--strategy hsdp --shard-size 2"] hsdp_comm.sh NAME STEPS [NODE_MBIT] [fedshard args]; results in runs/why-NAME and ./NAME.*
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd /work/main
export NETNS_PREFIX=fsc NETNS_SUBNET=10.79.0
source bench/netns_lib.sh
trap netns_down EXIT
name=$1 steps=$2 node=${3:-200}; shift 3 || shift $#
netns_up_tiers 8 2 8 "$node" "${INTER_MBIT:-50}" 20  # INTER_MBIT: inter-node rate
out=runs/why-$name; rm -rf "$out"
( while :; do echo "t $(date +%s.%N)"; ip netns exec fscn0 ss -tinm dst 10.79.0.0/24; sleep 0.5; done ) >"$here/$name.ss" 2>&1 &
sspid=$!
grep -E "^cpu |^softirq" /proc/stat >"$here/$name.stat0"; grep -E "NET_TX|NET_RX" /proc/softirqs >>"$here/$name.stat0"
for p in $(pgrep ksoftirqd); do echo "$p $(cut -d" " -f14,15 /proc/$p/stat)"; done >"$here/$name.ksoft0"
netns_mpirun -np 8 "$netns_wrap" /tmp/c-bin/fedshard train --config configs/demo.toml --batch-size 2 --threads 1 \
  --ranks-per-node 2 --set eval.windows=64 ${STRATEGY_ARGS:---strategy hsdp --shard-size 2} --steps "$steps" --eval-every 1000 \
  --out "$out" "$@" >"$here/$name.log" 2>&1
kill $sspid
grep -E "^cpu |^softirq" /proc/stat >"$here/$name.stat1"; grep -E "NET_TX|NET_RX" /proc/softirqs >>"$here/$name.stat1"
for p in $(pgrep ksoftirqd); do echo "$p $(cut -d" " -f14,15 /proc/$p/stat)"; done >"$here/$name.ksoft1"
cp "$out/metrics.jsonl" "$here/$name.metrics.jsonl"
python3 - "$out/metrics.jsonl" <<'PY' | tee "$here/$name.summary.txt"
import json, sys, statistics
L = [json.loads(l) for l in open(sys.argv[1])]
st = [l for l in L if l.get('type') == 'step' and l['step'] >= 3]
for k in ('total', 'compute', 'comm_real', 'comm_exposed'):
    print(k, round(statistics.mean(s['time_s'][k] for s in st), 3))
s = [l for l in L if l.get('type') == 'summary'][0]
n = s['steps']
for c, v in s['bytes_by_communicator'].items():
    print(c, 'calls/step', v['calls'] / n, 'MB/step', round(v['sent_bytes'] / n / 1e6, 3), 's/step', round(v['seconds'] / n, 3),
          'Mbit/s sent', round(v['sent_bytes'] * 8 / 1e6 / max(v['seconds'], 1e-9), 1))
PY
