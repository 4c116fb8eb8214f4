#!/usr/bin/env bash
# Real network shaping instead of emulation (bench/netns_lib.sh: a namespace per node, tbf-shaped veths, Open
# MPI over TCP), then the same config under fedshard's link emulation with the same bandwidth; both step
# times are printed side by side. Needs root (ip netns, tc).
# With RANKS_PER_NODE=2 (default) two ranks share each shaped link, as ranks of a node share its NIC; with 1
# every rank has its own link, which is what the emulation's per-rank alpha-beta model assumes.
# NETNS_TCP_LINKS=1 runs Open MPI's default single TCP connection per pair of ranks (bench/netns_lib.sh uses
# 2: with one, 2-rank rings run at about half the link rate; docs/cost-model.md section 8).
# Timed runs take /tmp/fedshard-bench.lock so they never overlap other benchmarks on this box.
# Usage: bench/netns.sh [BUILD_DIR] [STEPS] [BANDWIDTH_MBIT] [RANKS_PER_NODE]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-20}
mbit=${3:-100}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
rpn=${4:-2}
np=4
[ $((np % rpn)) -eq 0 ] || { echo "RANKS_PER_NODE must divide $np" >&2; exit 1; }

source bench/netns_lib.sh
trap netns_down EXIT
netns_up "$np" "$rpn" "$mbit"

common=(--config configs/demo.toml --batch-size 2 --threads 1 --ranks-per-node "$rpn" --steps "$steps" --eval-every 0
        --set eval.windows=16)
mean_step() {
  /usr/bin/python3 -c "
import json
s = [json.loads(l) for l in open('$1/metrics.jsonl') if '\"type\":\"step\"' in l]
s = [x['time_s']['total'] for x in s if x['step'] >= 3]
print(sum(s) / len(s))"
}
printf '%-9s %-28s %-28s %s\n' strategy "netns + tc (s/step)" "emulation (s/step)" "netns/emulation"
for s in fsdp fl-fsdp; do
  extra=()
  [ "$s" = fl-fsdp ] && extra=(--group-size 2 --sync-every 4)
  flock /tmp/fedshard-bench.lock bash -c 'source bench/netns_lib.sh; netns_mpirun "$@"' _ -np "$np" "$netns_wrap" "$build/fedshard" train "${common[@]}" --strategy "$s" "${extra[@]}" --out "runs/netns-rpn$rpn-$s" >"runs/netns-rpn$rpn-$s.log" 2>&1
  flock /tmp/fedshard-bench.lock mpirun --oversubscribe --allow-run-as-root -np "$np" "$build/fedshard" train "${common[@]}" --strategy "$s" "${extra[@]}" \
    --link "inter-node=${mbit}Mbit/s,100us" --link "inter-group=${mbit}Mbit/s,100us" --out "runs/emul-rpn$rpn-$s" >"runs/emul-rpn$rpn-$s.log" 2>&1
  a=$(mean_step "runs/netns-rpn$rpn-$s")
  b=$(mean_step "runs/emul-rpn$rpn-$s")
  printf '%-9s %-28.3f %-28.3f %.3f\n' "$s" "$a" "$b" "$(/usr/bin/python3 -c "print($a / $b)")"
done
