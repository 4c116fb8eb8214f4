#!/usr/bin/env bash
# Sites across facilities on a real shaped network (issue 61, item 6; docs/results.md §9). 4 sites of 2 ranks, each
# its own `mpirun` in its own network namespace, the round server's M shards (`fedshard serve`) in another; every
# connection mutual TLS with certificates made here with openssl. Each site reaches the server through a WAN link
# of its own: a pair of TUN devices (one in the site's namespace, one in a router's) shaped with tbf to MBIT in
# both directions, the propagation delay added by bench/wan_link.c (DELAY ms one way: this kernel has tbf but no
# netem); the server's namespace hangs off the router by a veth shaped to SERVER_MBIT, shared by its shards.
# Inside a site the two ranks talk TCP over the namespace's loopback, as in bench/multisite.sh.
#   goodput  `small` (12.3 MB of float32 per site and round), fsdp in each site, K = 2, 3 rounds after round 0:
#            each site's uplink goodput as the shards measured it (STATE/rounds.jsonl, sites/round_log.h: the site's
#            bytes over all shards over the span from its first byte to its last), for MBITS x DELAYS, one stream per
#            rank (M = 1) and four (M = 4: one per shard); and the shards' CPU seconds and peak memory per site and
#            round for M = 1, 2, 4 (at the first rate and delay).
#   quality  fl-fsdp as sites with docs/results.md §8.2's settings (tiny, seq 128, 4 sequences, lr 1e-2, K = 8,
#            STEPS steps, the global model evaluated every 16 steps on 64 windows), float32 and int4 rounds, at MBITS
#            with DELAY_QUALITY ms one way and with none: seconds to each target perplexity of §8.2 (training time on
#            the clock, site 0's step lines' time_s.total summed), beside `fedshard plan --sites`'s prediction.
# Usage: bench/sites.sh [BUILD_DIR] [goodput|quality|all]   (root; after make build and make demo's data)
#   env: MBITS ("20 50"), DELAYS ("20 50"), DELAY_QUALITY ("20 0"), SERVER_MBIT (1000), STEPS (200),
#        SHARDS (the goodput runs' M values; default "1 2 4" at the first rate and delay, "1 4" at the others),
#        OUT (docs/results/sites)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
what=${2:-all}
cd "$(dirname "$0")/.."
root=$(pwd)
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
"$build/fedshard" --version | grep -q "sites: yes" || { echo "$build/fedshard was built without sites (gRPC)" >&2; exit 1; }
mbits=${MBITS:-20 50} delays=${DELAYS:-20 50} quality_delays=${DELAY_QUALITY:-20 0} server_mbit=${SERVER_MBIT:-1000}
steps=${STEPS:-200} out=${OUT:-docs/results/sites}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/fedshard-sites.XXXXXX)
py=/usr/bin/python3
pfx=fw
nsites=4
link_pids=()
server_pids=()
vocab=$($py -c "import json; print(json.load(open('data/brown/manifest.json'))['tokenizer']['vocab_size'])")

gcc -O2 -o "$work/wan_link" bench/wan_link.c

wan_down() {
  for p in "${server_pids[@]}" "${link_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${server_pids[@]}" "${link_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  server_pids=() link_pids=()
  for n in srv rt s0 s1 s2 s3; do ip netns del "$pfx$n" 2>/dev/null || true; done
}
trap 'wan_down; rm -rf "$work"' EXIT

# wan_up MBIT DELAY_MS: the router, the server behind its veth (10.79.0.2), site i behind its TUN pair (10.78.i.2).
wan_up() {
  local mbit=$1 delay=$2 i
  wan_down
  for n in srv rt; do ip netns add "$pfx$n"; ip -n "$pfx$n" link set lo up; done
  ip netns exec "${pfx}rt" sysctl -qw net.ipv4.ip_forward=1
  ip -n "${pfx}rt" link add srv type veth peer name eth0 netns "${pfx}srv"
  ip -n "${pfx}rt" addr add 10.79.0.1/24 dev srv
  ip -n "${pfx}srv" addr add 10.79.0.2/24 dev eth0
  ip -n "${pfx}rt" link set srv up
  ip -n "${pfx}srv" link set eth0 up
  ip -n "${pfx}srv" route add default via 10.79.0.1
  ip netns exec "${pfx}rt" tc qdisc add dev srv root tbf rate "${server_mbit}mbit" burst 256kb latency 400ms
  ip netns exec "${pfx}srv" tc qdisc add dev eth0 root tbf rate "${server_mbit}mbit" burst 256kb latency 400ms
  for i in $(seq 0 $((nsites - 1))); do
    ip netns add "${pfx}s$i"
    ip -n "${pfx}s$i" link set lo up
    ip -n "${pfx}s$i" tuntap add dev wan mode tun
    ip -n "${pfx}rt" tuntap add dev "s$i" mode tun
    ip -n "${pfx}s$i" addr add "10.78.$i.2" peer "10.78.$i.1" dev wan
    ip -n "${pfx}rt" addr add "10.78.$i.1" peer "10.78.$i.2" dev "s$i"
    ip -n "${pfx}s$i" link set wan up
    ip -n "${pfx}rt" link set "s$i" up
    ip -n "${pfx}s$i" route add 10.79.0.0/24 dev wan
    # The site's uplink (what it sends) and its downlink (what the router sends it).
    ip netns exec "${pfx}s$i" tc qdisc add dev wan root tbf rate "${mbit}mbit" burst 64kb latency 400ms
    ip netns exec "${pfx}rt" tc qdisc add dev "s$i" root tbf rate "${mbit}mbit" burst 64kb latency 400ms
    nice -n -10 "$work/wan_link" "$delay" "${pfx}s$i" wan "${pfx}rt" "s$i" 2>>"$work/wan_link.log" &
    link_pids+=($!)
  done
  sleep 0.3
}

# rtt_ms: site 0 to the server, the median of 10 TCP connects (a SYN and its answer).
rtt_ms() {
  ip netns exec "${pfx}srv" $py -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('10.79.0.2', 5999)); s.listen(16)
for _ in range(10): s.accept()[0].close()" &
  local listener=$!
  sleep 0.3
  ip netns exec "${pfx}s0" $py -c "
import socket, statistics, time
t = []
for _ in range(10):
    a = time.perf_counter(); c = socket.create_connection(('10.79.0.2', 5999)); t.append(time.perf_counter() - a); c.close()
print(f'{statistics.median(t) * 1e3:.1f}')"
  wait $listener
}

# The federation's CA, the server's certificate (every shard's), the sites'.
source bench/certs.sh
federation_certs "$work" DNS:roundserver,IP:10.79.0.2 roundserver site-0 site-1 site-2 site-3

# serve M RUN: the M shards in the server's namespace, state under RUN/server; sets $addresses.
serve() {
  local m=$1 run=$2 i
  addresses=
  for i in $(seq 0 $((m - 1))); do
    local dir=$run/server/s$i
    mkdir -p "$dir"
    local coord=()
    [ "$i" -eq 0 ] || coord=(--coordinator "10.79.0.2:$(cat "$run/server/s0.port")")
    ip netns exec "${pfx}srv" "$build/fedshard" serve --shard "$i/$m" --address 10.79.0.2 --state "$dir" \
      --port-file "$dir.port" --tls-cert "$work/roundserver.pem" --tls-key "$work/roundserver.key" \
      --tls-ca "$work/ca.pem" --quorum $nsites --round-deadline 600 "${coord[@]}" >"$dir.log" 2>&1 &
    server_pids+=($!)
    for _ in $(seq 300); do [ -s "$dir.port" ] && break; sleep 0.1; done
    [ -s "$dir.port" ] || { echo "shard $i/$m did not start: $(tail -n 2 "$dir.log")" >&2; exit 1; }
    # Its memory before any site: what the rounds add is measured from here.
    awk '/VmRSS/ { print $2 * 1024 }' "/proc/${server_pids[-1]}/status" >"$dir.base_rss"
    addresses+="${addresses:+,}10.79.0.2:$(cat "$dir.port")"
  done
}

# sites RUN ARGS...: the 4 sites' jobs, each its own mpirun in its namespace; waits for all. Each mpirun sees 2 ranks
# on 2 cores, not oversubscribed, so its ranks would spin while they wait (8 spinning ranks on 2 cores nearly
# doubled the compute time of a step); real sites have their own cores, and bench/multisite.sh's one mpirun of 8
# yields, so these yield too.
sites() {
  local run=$1 i pids=()
  shift
  for i in $(seq 0 $((nsites - 1))); do
    ip netns exec "${pfx}s$i" mpirun --oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1 --mca btl tcp,self \
      --mca btl_tcp_if_include lo -np 2 "$build/fedshard" train --data data/brown --threads 1 --ranks-per-node 2 \
      --strategy fsdp --site "site-$i" --server "$addresses" --tls-cert "$work/site-$i.pem" \
      --tls-key "$work/site-$i.key" --tls-ca "$work/ca.pem" --set "sites.data=$i/$nsites" --out "$run/site-$i" "$@" \
      >"$run/site-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { echo "site $i failed: $run/site-$i.log: $(tail -n 2 "$run/site-$i.log")" >&2; exit 1; }
  done
  for p in "${server_pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  server_pids=()
}

goodput() {
  local first_mbit=${mbits%% *} first_delay=${delays%% *} mbit delay m run rtt
  for mbit in $mbits; do
    for delay in $delays; do
      wan_up "$mbit" "$delay"
      rtt=$(rtt_ms)
      echo "== goodput: $mbit Mbit/s, $delay ms one way (RTT $rtt ms by TCP connect)" >&2
      local ms=${SHARDS:-1 4}
      [ -z "${SHARDS:-}" ] && [ "$mbit" = "$first_mbit" ] && [ "$delay" = "$first_delay" ] && ms="1 2 4"
      for m in $ms; do
        run=$out/goodput-${mbit}mbit-${delay}ms-m$m
        rm -rf "$run"
        mkdir -p "$run"
        echo "$rtt" >"$run/rtt_ms"
        serve "$m" "$run"
        sites "$run" --model small --seq-len 64 --batch-size 2 --steps 6 --sync-every 2 --eval-every 0 \
          --set eval.windows=4
        # Keep what the tables read: the shards' round logs and base memory, each site's metrics and config.
        for i in $(seq 0 $((nsites - 1))); do
          find "$run/site-$i" -mindepth 1 -maxdepth 1 ! -name metrics.jsonl ! -name config.json -exec rm -rf {} +
        done
        find "$run/server" -name '*.safetensors' -delete
        # The upload time and the server's memory the plan predicts (the compute does not enter either).
        "$build/fedshard" plan --sites 4x2 --ranks-per-node 2 --model small --vocab-size "$vocab" --strategy fsdp:K=2 \
          --compute-seconds 1 --site-link "${mbit}Mbit/s,${delay}ms" --server-link "${server_mbit}Mbit/s,0us,shared" \
          --server-shards "$m" --json >"$run/plan.json"
      done
    done
  done
  $py bench/sites_table.py goodput "$out" | tee "$out/goodput.md"
}

quality() {
  local mbit delay codec run floor
  # This host's collective floor, as bench/multisite.sh measured it (2-rank collectives within a site).
  floor=$($py -c "
import json
s = [json.loads(l) for l in open('docs/results/multisite/multisite-tiny-calibration-20mbit-s0/metrics.jsonl') if '\"type\":\"summary\"' in l][0]
c = s['bytes_by_communicator']['shard']
print(c['seconds'] / c['calls'])")
  for mbit in $mbits; do
    for delay in $quality_delays; do
      wan_up "$mbit" "$delay"
      for codec in none int4; do
        run=$out/quality-${codec}-${mbit}mbit-${delay}ms
        echo "== quality: $codec rounds, $mbit Mbit/s, $delay ms one way" >&2
        rm -rf "$run"
        mkdir -p "$run"
        serve 1 "$run"
        sites "$run" --model tiny --seq-len 128 --batch-size 4 --lr 1e-2 --steps "$steps" --seed 0 --sync-every 8 \
          --eval-every 16 --set eval.windows=64 --set federation.eval_after_sync=false --compress "$codec"
        for i in $(seq 0 $((nsites - 1))); do
          find "$run/site-$i" -mindepth 1 -maxdepth 1 ! -name metrics.jsonl ! -name config.json -exec rm -rf {} +
        done
        find "$run/server" -name '*.safetensors' -delete
        read -r compute optimizer < <($py -c "
import json, statistics
s = [json.loads(l) for l in open('$run/site-0/metrics.jsonl') if '\"type\":\"step\"' in l and json.loads(l)['step'] >= 3]
print(statistics.median(x['time_s']['compute'] for x in s), statistics.median(x['time_s']['optimizer'] for x in s))")
        "$build/fedshard" plan --sites 4x2 --ranks-per-node 2 --model tiny --vocab-size "$vocab" \
          --strategy fsdp:K=8 --batch 4 --seq 128 --bytes-per-element 4 --compute-seconds "$compute" \
          --optimizer-seconds "$optimizer" --link node=10Gbit/s,20us --collective-floor "$floor" \
          --site-link "${mbit}Mbit/s,${delay}ms" --server-link "${server_mbit}Mbit/s,0us,shared" --server-shards 1 \
          --compress "$codec" --json >"$run/plan.json"
      done
    done
  done
  $py bench/sites_table.py quality "$out" | tee "$out/quality.md"
}

case $what in
  goodput) goodput ;;
  quality) quality ;;
  all) goodput; quality ;;
  *) echo "usage: bench/sites.sh [BUILD_DIR] [goodput|quality|all]" >&2; exit 2 ;;
esac
