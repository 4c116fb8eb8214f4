#!/usr/bin/env bash
# Time to quality across sites, measured (issue 52, item 3): 8 ranks as 4 sites of 2 on a real shaped network
# (bench/netns_lib.sh netns_up: one network namespace per site, its two ranks talking TCP over the namespace's
# loopback, the site joined to the others by one veth shaped with tbf to MBIT in both directions: the site's
# uplink, shared by its two ranks). fsdp over all 8, hsdp with a shard per site and its 4 replicas across the
# sites, fl-fsdp with a group per site (float32 rounds and the codecs in CODECS), fl-hsdp with groups of two
# sites. Every arm: the same model, data, seed, lr and steps; the global model evaluated every EVAL steps.
# Time is the training time on the clock, each step line's time_s.total summed (start-up and the evaluations
# left out: they are the same work in every arm); beside it `fedshard plan`'s prediction of the same run on the
# same network (given, as bench/compare.sh does, the run's own measured compute and optimizer seconds per step;
# the site uplink as the inter-node and inter-group tier, the loopback as the node tier; latencies by ping;
# needs ping and tc: apt install iputils-ping iproute2).
# Writes every run's metrics.jsonl, config.json and plans, and the tables and figure, to OUT.
# Usage: bench/multisite.sh [BUILD_DIR] [STEPS] [MBIT]   (root; after make build and make demo's data)
#   env: MODEL (tiny), SEQ (128), BATCH (4), LR (1e-2), K (8), EVAL (16, a multiple of K: the global model exists at rounds), SEED (0), CODECS ("int8 int4"),
#        ARMS (all), NODE_LINK (the loopback's rate for the plan, 10Gbit/s), OUT (docs/results/multisite)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-200}
mbit=${3:-20}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
model=${MODEL:-tiny} seq=${SEQ:-128} batch=${BATCH:-4} lr=${LR:-1e-2} k=${K:-8} eval=${EVAL:-16} seed=${SEED:-0}
codecs=${CODECS:-int8 int4} out=${OUT:-docs/results/multisite} node_link=${NODE_LINK:-10Gbit/s}
arms=(fsdp hsdp fl-fsdp fl-hsdp)
for c in $codecs; do arms+=("fl-fsdp-$c"); done
[ -z "${ARMS:-}" ] || read -r -a arms <<<"$ARMS"
vocab=$(/usr/bin/python3 -c "import json; print(json.load(open('data/brown/manifest.json'))['tokenizer']['vocab_size'])")

source bench/netns_lib.sh
trap netns_down EXIT
netns_up 8 2 "$mbit"
lat_site=$(netns_latency 0 0)   # within a site: the namespace's loopback
lat_wan=$(netns_latency 0 1)    # site 0 to site 1, across two shaped uplinks
echo "one-way latency: within a site ${lat_site} us, between sites ${lat_wan} us" >&2
# The plan three times: with each rank's own link per tier (plan-per-rank.json, the model before issue 52); with
# the site uplink shared by the site's ranks (plan-shared.json: `,shared`, docs/cost-model.md section 3); and
# with that and this host's collective floor (plan-floor.json: --collective-floor, docs/cost-model.md section
# 8.4), measured first by a calibration run that is none of the arms: fl-fsdp whose sites never exchange (no
# round in its 30 steps), the mean seconds of its 2-rank 'shard' all-gathers and reduce-scatters over the
# sites' loopback (a few hundred KB each), 8 ranks and their comm threads on this box's two cores.
# REPLAN=1: no training (but the calibration where OUT has none); the plans made again for the runs in OUT.
links=(--link "node=$node_link,${lat_site}us" --link "inter-node=${mbit}Mbit/s,${lat_wan}us"
       --link "inter-group=${mbit}Mbit/s,${lat_wan}us")
shared=(--link "node=$node_link,${lat_site}us" --link "inter-node=${mbit}Mbit/s,${lat_wan}us,shared"
        --link "inter-group=${mbit}Mbit/s,${lat_wan}us,shared")
mkdir -p "$out" runs
replan=${REPLAN:-0}
calibration=multisite-$model-calibration-${mbit}mbit-s$seed
if [ "$replan" != 1 ] || [ ! -f "$out/$calibration/metrics.jsonl" ]; then
  rm -rf "runs/$calibration"
  flock /tmp/fedshard-bench.lock bash -c 'source bench/netns_lib.sh; netns_mpirun "$@"' _ -np 8 "$netns_wrap" \
    "$build/fedshard" train --model "$model" --data data/brown --seq-len "$seq" --batch-size "$batch" --steps 30 \
    --seed "$seed" --threads 1 --ranks-per-node 2 --eval-every 0 --set eval.windows=4 --strategy fl-fsdp \
    --group-size 2 --sync-every 1000 --out "runs/$calibration" >"runs/$calibration.log" 2>&1 ||
    { echo "the calibration run failed: runs/$calibration.log" >&2; exit 1; }
  mkdir -p "$out/$calibration"
  cp "runs/$calibration/metrics.jsonl" "runs/$calibration/config.json" "$out/$calibration/"
fi
floor=$(/usr/bin/python3 -c "
import json
s = [json.loads(l) for l in open('$out/$calibration/metrics.jsonl') if '\"type\":\"summary\"' in l][0]
c = s['bytes_by_communicator']['shard']
print(c['seconds'] / c['calls'])")
echo "collective floor (calibration, 2-rank calls within a site): $floor s" >&2
common=(--model "$model" --data data/brown --seq-len "$seq" --batch-size "$batch" --lr "$lr" --steps "$steps"
        --seed "$seed" --threads 1 --ranks-per-node 2 --eval-every "$eval" --set eval.windows=64
        --set federation.eval_after_sync=false)
runs=()
for arm in "${arms[@]}"; do
  case $arm in
    fsdp) train=(--strategy fsdp) plan=(--strategy fsdp) ;;
    hsdp) train=(--strategy hsdp --shard-size 2) plan=(--strategy hsdp:H=2) ;;
    fl-fsdp) train=(--strategy fl-fsdp --group-size 2 --sync-every "$k") plan=(--strategy "fl-fsdp:S=2,K=$k") ;;
    fl-fsdp-*) train=(--strategy fl-fsdp --group-size 2 --sync-every "$k" --compress "${arm#fl-fsdp-}")
               plan=(--strategy "fl-fsdp:S=2,K=$k" --compress "${arm#fl-fsdp-}") ;;
    fl-hsdp) train=(--strategy fl-hsdp --group-size 4 --shard-size 2 --sync-every "$k")
             plan=(--strategy "fl-hsdp:S=4,H=2,K=$k") ;;
    *) echo "unknown arm $arm" >&2; exit 1 ;;
  esac
  name=multisite-$model-$arm-${mbit}mbit-s$seed
  run=runs/$name
  echo "== $arm" >&2
  if [ "$replan" = 1 ]; then
    run=$out/$name
  else
    rm -rf "$run"
    flock /tmp/fedshard-bench.lock bash -c 'source bench/netns_lib.sh; netns_mpirun "$@"' _ -np 8 "$netns_wrap" \
      "$build/fedshard" train "${common[@]}" "${train[@]}" --out "$run" >"$run.log" 2>&1 ||
      { echo "$arm failed on the shaped network: $run.log" >&2; exit 1; }
  fi
  read -r compute optimizer < <(/usr/bin/python3 -c "
import json, statistics
s = [json.loads(l) for l in open('$run/metrics.jsonl') if '\"type\":\"step\"' in l and json.loads(l)['step'] >= 3]
print(statistics.median(x['time_s']['compute'] for x in s), statistics.median(x['time_s']['optimizer'] for x in s))")
  for network in per-rank shared floor; do
    case $network in
      per-rank) link_flags=("${links[@]}") ;;
      shared) link_flags=("${shared[@]}") ;;
      floor) link_flags=("${shared[@]}" --collective-floor "$floor") ;;
    esac
    "$build/fedshard" plan --nodes 4 --ranks-per-node 2 --model "$model" --vocab-size "$vocab" "${plan[@]}" \
      --batch "$batch" --seq "$seq" --bytes-per-element 4 --compute-seconds "$compute" \
      --optimizer-seconds "$optimizer" "${link_flags[@]}" --json >"$run/plan-$network.json"
  done
  if [ "$replan" != 1 ]; then
    mkdir -p "$out/$name"
    cp "$run/metrics.jsonl" "$run/config.json" "$run"/plan-*.json "$out/$name/"
  fi
  runs+=("$arm=$out/$name")
done
/usr/bin/python3 bench/multisite_table.py "$mbit" "${runs[@]}" | tee "$out/table-${model}-${mbit}mbit-s$seed.md"
