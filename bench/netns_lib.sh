# Sourced by the netns benchmarks (needs root: ip netns, tc). netns_up NP RANKS_PER_NODE MBIT: each node's ranks
# run in their own network namespace, joined to a bridge by a veth pair whose two directions are shaped with
# tc's token bucket (tbf) to MBIT; Open MPI talks TCP over the veths (shared memory off), ranks of one node
# reach each other inside their namespace. The kernel here has tbf but not netem, so only bandwidth is
# shaped; latency is the veth's own. Then netns_mpirun ARGS... launches like mpirun over that network.
# TBF_QUEUE: how long a packet may wait in the shaper's queue (its buffer size). NETNS_PREFIX (default fs) and
# NETNS_SUBNET (default 10.77.0) name the namespaces, links and /24 network, so two benchmarks can run at once.
# netns_up_tiers (below) builds the three-tier network of bench/compare.sh netns instead: a namespace per rank
# and one shaped class per tier on every rank's link; HTB_QUEUE_PKTS is each class's queue in packets.
pfx=${NETNS_PREFIX:-fs}
net=${NETNS_SUBNET:-10.77.0}
netns_down() {
  for n in $(seq 0 15); do ip netns del "${pfx}n$n" 2>/dev/null || true; ip link del "${pfx}v$n" 2>/dev/null || true; done
  ip link del "${pfx}br" 2>/dev/null || true
  rm -f "${netns_wrap:-}"
}

# A fresh bridge (mpirun's PMIx server is reached over it), then namespace N joined to it by a veth pair.
netns_bridge() {
  netns_down
  ip link add "${pfx}br" type bridge
  ip addr add $net.254/24 dev "${pfx}br"
  ip link set "${pfx}br" up
}

netns_attach() {
  local n=$1
  ip netns add "${pfx}n$n"
  ip link add "${pfx}v$n" type veth peer name eth0 netns "${pfx}n$n"
  ip link set "${pfx}v$n" master "${pfx}br" up
  ip netns exec "${pfx}n$n" ip addr add "$net.$((n + 1))/24" dev eth0
  ip netns exec "${pfx}n$n" ip link set eth0 up
  ip netns exec "${pfx}n$n" ip link set lo up
}

# netns_wrapper RANKS_PER_NAMESPACE: the launcher that puts each MPI rank into its namespace.
netns_wrapper() {
  netns_wrap=$(mktemp)
  cat >"$netns_wrap" <<WRAP
#!/usr/bin/env bash
exec ip netns exec ${pfx}n\$(( OMPI_COMM_WORLD_RANK / $1 )) "\$@"
WRAP
  chmod +x "$netns_wrap"
}

netns_up() {
  local np=$1 rpn=$2 mbit=$3 queue=${TBF_QUEUE:-400ms}
  netns_bridge
  for n in $(seq 0 $((np / rpn - 1))); do
    netns_attach "$n"
    # Both directions of the node's link: egress in the namespace, and egress of the bridge port towards it.
    ip netns exec "${pfx}n$n" tc qdisc add dev eth0 root tbf rate "${mbit}mbit" burst 64kb latency "$queue"
    tc qdisc add dev "${pfx}v$n" root tbf rate "${mbit}mbit" burst 64kb latency "$queue"
  done
  netns_wrapper "$rpn"
}

# btl_tcp_links 2 (NETNS_TCP_LINKS): two TCP connections per pair of ranks instead of one. With one, a 2-rank
# ring's two directions share it, and each large message's rendezvous control (ob1's ACK, FIN) queues in the
# byte stream behind the peer's own bulk data, so the directions mostly take turns: 48-64 of 100 Mbit/s
# instead of 94 (docs/cost-model.md section 8). Rings of 3+ ranks send and receive on different connections.
netns_mpirun() {
  PMIX_MCA_ptl_tcp_if_include=$net.0/24 \
    mpirun --oversubscribe --allow-run-as-root --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 \
    --mca btl_tcp_links "${NETNS_TCP_LINKS:-2}" "$@"
}

# netns_up_tiers NP RANKS_PER_NODE GROUP_RANKS NODE_MBIT INTER_NODE_MBIT INTER_GROUP_MBIT: three shaped tiers.
# Every rank gets its own namespace and veth to the bridge; both directions of that veth carry an htb with one
# class per tier, and each peer's address is filtered into the class of the tier between the two ranks (same
# node, same group of GROUP_RANKS, else inter-group). So every rank has its own link per tier, which is what
# `fedshard plan` prices (per-rank alpha-beta, a collective at the rate of the slowest tier it spans). A
# bridge hierarchy with shared node/group uplinks would not be: hsdp's two replica rings, or fl-*'s rounds
# (one ring per shard), would split one uplink, while a single world ring would not. Traffic to the bridge
# address (mpirun's PMIx) falls into an unshaped default class.
netns_up_tiers() {
  local np=$1 rpn=$2 grp=$3 rates=("$4" "$5" "$6") queue=${HTB_QUEUE_PKTS:-10000}
  [ "$np" -le 16 ] || { echo "netns_up_tiers: at most 16 ranks (netns_down removes 16)" >&2; return 1; }
  netns_bridge
  for r in $(seq 0 $((np - 1))); do
    netns_attach "$r"
    # Egress inside the namespace (what r sends, matched by destination) and egress of the bridge port
    # towards it (what r receives, matched by source).
    local side dev ns match
    for side in out in; do
      if [ $side = out ]; then ns=(ip netns exec "${pfx}n$r"); dev=eth0; match=dst
      else ns=(); dev="${pfx}v$r"; match=src; fi
      "${ns[@]}" tc qdisc add dev $dev root handle 1: htb default 9 r2q 1000
      "${ns[@]}" tc class add dev $dev parent 1: classid 1:9 htb rate 10gbit quantum 60000
      local t
      for t in 1 2 3; do
        "${ns[@]}" tc class add dev $dev parent 1: classid 1:$t htb rate "${rates[t-1]}mbit" ceil "${rates[t-1]}mbit" burst 64kb cburst 64kb
        "${ns[@]}" tc qdisc add dev $dev parent 1:$t pfifo limit "$queue"
      done
      local q tier
      for q in $(seq 0 $((np - 1))); do
        [ "$q" -eq "$r" ] && continue
        if [ $((q / rpn)) -eq $((r / rpn)) ]; then tier=1
        elif [ $((q / grp)) -eq $((r / grp)) ]; then tier=2
        else tier=3; fi
        "${ns[@]}" tc filter add dev $dev parent 1: protocol ip prio 1 u32 match ip $match "$net.$((q + 1))/32" flowid 1:$tier
      done
    done
  done
  netns_wrapper 1
}

# netns_latency A B: one-way latency from rank A's namespace to rank B's, as half the mean ping round trip
# (small packets pass the shapers' burst unqueued), in microseconds.
netns_latency() {
  ip netns exec "${pfx}n$1" ping -q -c 1 "$net.$(($2 + 1))" >/dev/null  # ARP first, not in the mean
  ip netns exec "${pfx}n$1" ping -q -c 20 -i 0.02 "$net.$(($2 + 1))" |
    awk -F/ '/^rtt|^round-trip/ { printf "%.0f\n", $5 * 1000 / 2 }'
}
