# Sourced by the netns benchmarks (needs root: ip netns, tc). netns_up NP RANKS_PER_NODE MBIT: each node's ranks
# run in their own network namespace, joined to a bridge by a veth pair whose two directions are shaped with
# tc's token bucket (tbf) to MBIT; Open MPI talks TCP over the veths (shared memory off), ranks of one node
# reach each other inside their namespace. The kernel here has tbf but not netem, so only bandwidth is
# shaped; latency is the veth's own. Then netns_mpirun ARGS... launches like mpirun over that network.
# TBF_QUEUE: how long a packet may wait in the shaper's queue (its buffer size). NETNS_PREFIX (default fs) and
# NETNS_SUBNET (default 10.77.0) name the namespaces, links and /24 network, so two benchmarks can run at once.
pfx=${NETNS_PREFIX:-fs}
net=${NETNS_SUBNET:-10.77.0}
netns_down() {
  for n in $(seq 0 15); do ip netns del "${pfx}n$n" 2>/dev/null || true; ip link del "${pfx}v$n" 2>/dev/null || true; done
  ip link del "${pfx}br" 2>/dev/null || true
  rm -f "${netns_wrap:-}"
}

netns_up() {
  local np=$1 rpn=$2 mbit=$3 queue=${TBF_QUEUE:-400ms}
  netns_down
  ip link add "${pfx}br" type bridge
  ip addr add $net.254/24 dev "${pfx}br"  # mpirun's PMIx server is reached over the bridge
  ip link set "${pfx}br" up
  for n in $(seq 0 $((np / rpn - 1))); do
    ip netns add "${pfx}n$n"
    ip link add "${pfx}v$n" type veth peer name eth0 netns "${pfx}n$n"
    ip link set "${pfx}v$n" master "${pfx}br" up
    ip netns exec "${pfx}n$n" ip addr add "$net.$((n + 1))/24" dev eth0
    ip netns exec "${pfx}n$n" ip link set eth0 up
    ip netns exec "${pfx}n$n" ip link set lo up
    # Both directions of the node's link: egress in the namespace, and egress of the bridge port towards it.
    ip netns exec "${pfx}n$n" tc qdisc add dev eth0 root tbf rate "${mbit}mbit" burst 64kb latency "$queue"
    tc qdisc add dev "${pfx}v$n" root tbf rate "${mbit}mbit" burst 64kb latency "$queue"
  done
  netns_wrap=$(mktemp)
  cat >"$netns_wrap" <<WRAP
#!/usr/bin/env bash
exec ip netns exec ${pfx}n\$(( OMPI_COMM_WORLD_RANK / $rpn )) "\$@"
WRAP
  chmod +x "$netns_wrap"
}

netns_mpirun() {
  PMIX_MCA_ptl_tcp_if_include=$net.0/24 \
    mpirun --oversubscribe --allow-run-as-root --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 "$@"
}
