#!/usr/bin/env bash
# Issue 5's side-by-side: ddp, fsdp, hsdp, fl-fsdp and fl-hsdp on one config (8 ranks as 4 emulated nodes of 2,
# `small` on Brown, identical hyperparameters and steps) under one emulated three-tier network, next to what
# `fedshard plan` predicts for the same configuration. The plan is given each run's own measured compute per
# step (time_s.compute: the time the training thread did not wait on a collective, and time_s.optimizer) and
# predicts the rest: every collective's alpha-beta time and how much of it the engine's schedule hides. The
# links are slow enough that emulated time dominates the real cost of MPI on this oversubscribed box
# (otherwise real shared-memory copies, which no link model describes, would decide the step time).
# Prints the table and writes figures + report.md to docs/results/compare/.
# With `netns` as third argument it instead shapes a real network at the same three rates (bench/netns_lib.sh netns_up_tiers: a
# namespace per rank, htb per rank and tier, Open MPI over TCP; needs root), and the plan gets each tier's
# latency as measured by ping instead of the emulated one; results go to docs/results/netns/. The network's
# groups are the strategy's groups (one group for ddp/fsdp/hsdp, S ranks for fl-*), as `comm::Layout::tier`
# assigns tiers, so the plan call keeps the same tiers as under emulation.
# NETNS_TCP_LINKS=1: Open MPI's default single TCP connection per pair, before the fix of section 8.
# Usage: bench/compare.sh [BUILD_DIR] [STEPS] [emulate|netns]
set -euo pipefail
build=${1:-build}
steps=${2:-40}
network=${3:-emulate}
cd "$(dirname "$0")/.."
case $network in emulate|netns) ;; *) echo "network must be emulate or netns, not '$network'" >&2; exit 1 ;; esac
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
links=(node=200Mbit/s,20us inter-node=50Mbit/s,200us inter-group=20Mbit/s,2ms)
mbit=(200 50 20)  # the same rates for netns; latency there is the veths' own
common=(--config configs/demo.toml --batch-size 2 --threads 1 --ranks-per-node 2 --set eval.windows=64)
declare -A spec=(
  [ddp]="--strategy ddp"
  [fsdp]="--strategy fsdp"
  [hsdp]="--strategy hsdp --shard-size 2"
  [fl-fsdp]="--strategy fl-fsdp --group-size 2 --sync-every 8"
  [fl-hsdp]="--strategy fl-hsdp --group-size 4 --shard-size 2 --sync-every 8"
)
declare -A plan_spec=([ddp]=ddp [fsdp]=fsdp [hsdp]=hsdp:H=2 [fl-fsdp]=fl-fsdp:S=2,K=8 [fl-hsdp]=fl-hsdp:S=4,H=2,K=8)
declare -A group_ranks=([ddp]=8 [fsdp]=8 [hsdp]=8 [fl-fsdp]=2 [fl-hsdp]=4)
mpirun=(mpirun --oversubscribe --allow-run-as-root -np 8 "$build/fedshard" train)
link_flags=()
for l in "${links[@]}"; do link_flags+=(--link "$l"); done
results=docs/results/compare
if [ "$network" = netns ]; then
  results=docs/results/netns/compare
  build=$(cd "$build" && pwd)
  source bench/netns_lib.sh
  trap netns_down EXIT
fi
mkdir -p "$results"
runs=()
for s in ddp fsdp hsdp fl-fsdp fl-hsdp; do
  echo "== $s" >&2
  out=runs/compare-$s
  if [ "$network" = emulate ]; then
    flock /tmp/fedshard-bench.lock "${mpirun[@]}" "${common[@]}" ${spec[$s]} --steps "$steps" --eval-every 8 "${link_flags[@]}" \
      --out "$out" >/dev/null 2>&1
  else
    out=runs/compare-netns-$s
    netns_up_tiers 8 2 "${group_ranks[$s]}" "${mbit[@]}"
    # Rank 0 to a node peer, an inter-node peer, an inter-group peer (a strategy with one group has none:
    # its inter-group latency is never used, so it takes the inter-node one).
    lat=("$(netns_latency 0 1)" "$(netns_latency 0 2)")
    lat+=("$([ "${group_ranks[$s]}" -lt 8 ] && netns_latency 0 "${group_ranks[$s]}" || echo "${lat[1]}")")
    link_flags=(--link "node=${mbit[0]}Mbit/s,${lat[0]}us" --link "inter-node=${mbit[1]}Mbit/s,${lat[1]}us"
                --link "inter-group=${mbit[2]}Mbit/s,${lat[2]}us")
    echo "   one-way latency node/inter-node/inter-group: ${lat[*]} us" >&2
    flock /tmp/fedshard-bench.lock bash -c "source bench/netns_lib.sh; netns_mpirun -np 8 $netns_wrap \"\$@\"" _ \
      "$build/fedshard" train "${common[@]}" ${spec[$s]} --steps "$steps" --eval-every 8 --out "$out" >"$out.log" 2>&1 ||
      { echo "$s failed on the shaped network, see $out.log" >&2; exit 1; }
    netns_down
  fi
  read -r compute optimizer < <(/usr/bin/python3 -c "
import json, statistics
s = [json.loads(l) for l in open('$out/metrics.jsonl') if '\"type\":\"step\"' in l and json.loads(l)['step'] >= 3]
print(statistics.median(x['time_s']['compute'] for x in s), statistics.median(x['time_s']['optimizer'] for x in s))")
  "$build/fedshard" plan --nodes 4 --ranks-per-node 2 --model small --vocab-size 258 --strategy "${plan_spec[$s]}" \
    --batch 2 --seq 256 --bytes-per-element 4 --compute-seconds "$compute" --optimizer-seconds "$optimizer" \
    "${link_flags[@]}" --json > "$out/plan.json"
  runs+=("$out")
done
"$build/fedshard" report "${runs[@]}" --out "$results" | grep '^|'
# Bytes, counted at the MPI sends: summed over the ranks (the summary's step_bytes_by_rank) they must equal the
# plan's per-rank bytes summed over the ranks, to the byte (a ring moves exactly (p-1) or 2(p-1) buffers in
# all). Rank 0's step lines may differ from the formula's average by < 16 bytes per collective where a buffer
# does not split into equal ring segments: within 1e-4 of the plan's step (plan.json amortises the round over K
# in bytes_per_step; an aggregation step carries one whole round).
/usr/bin/python3 - "${runs[@]}" <<'PY'
import json, sys
bad = 0
for run in sys.argv[1:]:
    plan = json.load(open(f"{run}/plan.json"))["plans"][0]
    k = plan.get("sync_every") or 1
    lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    steps = [s for s in lines if s["type"] == "step"]
    summary = next(s for s in lines if s["type"] == "summary")
    rounds = sum(s["aggregated"] for s in steps)
    diffs = []
    for s in steps:
        for tier, counted in s["bytes"].items():
            expected = plan["bytes_per_step"][tier] - plan["bytes_per_round"][tier] / k
            if s["aggregated"]:
                expected += plan["bytes_per_round"][tier]
            if abs(counted - expected) > 1e-4 * expected + 0.5:
                diffs.append(f"step {s['step']} {tier}: counted {counted:.0f}, predicted {expected:.0f}")
    for tier in plan["bytes_per_step"]:
        counted = sum(r[tier] for r in summary["step_bytes_by_rank"])
        want = sum(size * (summary["steps"] * g["bytes_per_step"][tier] + rounds * g["bytes_per_round"][tier])
                   for g, size in zip(plan["per_group_rank"], plan["group_sizes"]))
        if abs(counted - want) > 0.5:
            diffs.append(f"all ranks, {tier}: counted {counted:.0f}, predicted {want:.0f}")
    print(f"{run}: bytes per tier {'as planned' if not diffs else 'DIFFER'} ({len(steps)} step lines, all ranks' totals)",
          *diffs[:3], sep="\n  ")
    bad += bool(diffs)
sys.exit(1 if bad else 0)
PY
