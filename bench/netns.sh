#!/usr/bin/env bash
# Real network shaping instead of emulation: each emulated node's ranks run in their own network namespace,
# joined to a bridge by a veth pair whose two directions are shaped with tc's token bucket (tbf) to the given
# inter-node bandwidth; Open MPI talks TCP over the veths (shared memory off), ranks of one node reach each
# other inside their namespace. Then the same config runs under fedshard's link emulation with the same
# bandwidth, and both step times are printed side by side. Needs root (ip netns, tc).
# The kernel here has tbf but not netem, so only bandwidth is shaped; latency is the veth's own.
# With RANKS_PER_NODE=2 (default) two ranks share each shaped link, as ranks of a node share its NIC; with 1
# every rank has its own link, which is what the emulation's per-rank alpha-beta model assumes.
# Usage: bench/netns.sh [BUILD_DIR] [STEPS] [BANDWIDTH_MBIT] [RANKS_PER_NODE]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-20}
mbit=${3:-100}
queue=${TBF_QUEUE:-400ms}  # how long a packet may wait in the shaper's queue (its buffer size)
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
rpn=${4:-2}
np=4
[ $((np % rpn)) -eq 0 ] || { echo "RANKS_PER_NODE must divide $np" >&2; exit 1; }
nodes=$((np / rpn))

cleanup() {
  for n in $(seq 0 $((np - 1))); do ip netns del "fsn$n" 2>/dev/null || true; ip link del "fsv$n" 2>/dev/null || true; done
  ip link del fsbr 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip link add fsbr type bridge
ip addr add 10.77.0.254/24 dev fsbr  # mpirun's PMIx server is reached over the bridge
ip link set fsbr up
for n in $(seq 0 $((nodes - 1))); do
  ip netns add "fsn$n"
  ip link add "fsv$n" type veth peer name eth0 netns "fsn$n"
  ip link set "fsv$n" master fsbr up
  ip netns exec "fsn$n" ip addr add "10.77.0.$((n + 1))/24" dev eth0
  ip netns exec "fsn$n" ip link set eth0 up
  ip netns exec "fsn$n" ip link set lo up
  # Both directions of the node's link: egress in the namespace, and egress of the bridge port towards it.
  ip netns exec "fsn$n" tc qdisc add dev eth0 root tbf rate "${mbit}mbit" burst 64kb latency "$queue"
  tc qdisc add dev "fsv$n" root tbf rate "${mbit}mbit" burst 64kb latency "$queue"
done

wrap=$(mktemp)
cat >"$wrap" <<WRAP
#!/usr/bin/env bash
exec ip netns exec fsn\$(( OMPI_COMM_WORLD_RANK / $rpn )) "\$@"
WRAP
chmod +x "$wrap"

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
  PMIX_MCA_ptl_tcp_if_include=10.77.0.0/24 \
  mpirun --oversubscribe --allow-run-as-root -np "$np" --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 \
    "$wrap" "$build/fedshard" train "${common[@]}" --strategy "$s" "${extra[@]}" --out "runs/netns-rpn$rpn-$s" >"runs/netns-rpn$rpn-$s.log" 2>&1
  mpirun --oversubscribe --allow-run-as-root -np "$np" "$build/fedshard" train "${common[@]}" --strategy "$s" "${extra[@]}" \
    --link "inter-node=${mbit}Mbit/s,100us" --link "inter-group=${mbit}Mbit/s,100us" --out "runs/emul-rpn$rpn-$s" >"runs/emul-rpn$rpn-$s.log" 2>&1
  a=$(mean_step "runs/netns-rpn$rpn-$s")
  b=$(mean_step "runs/emul-rpn$rpn-$s")
  printf '%-9s %-28.3f %-28.3f %.3f\n' "$s" "$a" "$b" "$(/usr/bin/python3 -c "print($a / $b)")"
done
rm -f "$wrap"
