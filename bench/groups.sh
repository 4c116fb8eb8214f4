#!/usr/bin/env bash
# Issue 12's side-by-side: fsdp, fl-fsdp in four groups of 2 and fl-fsdp in groups of 4, 2 and 2, on 8 ranks
# as 4 emulated nodes of 2 under bench/compare.sh's three-tier link emulation (`small` on Brown, identical
# hyperparameters and steps), and the four-group run losing group 1 mid-run: its ranks are killed with
# SIGKILL after step LOSE_AT, scripts/fedshard-elastic.sh relaunches groups 0, 2 and 3 on 6 ranks from the
# latest checkpoint. Prints a table (step time, bytes per tier and rank, perplexity at equal tokens) and
# writes figures + report.md to docs/results/groups/.
# Usage: bench/groups.sh [BUILD_DIR] [STEPS] [LOSE_AT]
set -euo pipefail
build=${1:-build}
steps=${2:-40}
lose_at=${3:-20}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
links=(node=200Mbit/s,20us inter-node=50Mbit/s,200us inter-group=20Mbit/s,2ms)
link_flags=()
for l in "${links[@]}"; do link_flags+=(--link "$l"); done
common=(--config configs/demo.toml --batch-size 2 --threads 1 --ranks-per-node 2 --set eval.windows=64
        --steps "$steps" --eval-every 8 --sync-every 8 --checkpoint-every 8 "${link_flags[@]}")
declare -A spec=(
  [fsdp]="--strategy fsdp"
  [fl-fsdp-2x4]="--strategy fl-fsdp --group-size 2"
  [fl-fsdp-4,2,2]="--strategy fl-fsdp --groups 4,2,2"
)
mpi=(mpirun --oversubscribe --allow-run-as-root)
runs=()
for s in fsdp fl-fsdp-2x4 fl-fsdp-4,2,2; do
  echo "== $s" >&2
  out=runs/groups-$s
  rm -rf "$out"
  "${mpi[@]}" -np 8 "$build/fedshard" train "${common[@]}" ${spec[$s]} --out "$out" >/dev/null 2>&1
  runs+=("$out")
done

echo "== fl-fsdp-2x4, group 1 lost after step $lose_at" >&2
out=runs/groups-lost
rm -rf "$out" "$out".elastic-*.log
bin=$build/fedshard tmp=runs
source tests/train_helpers.sh
(wait_for_step "$out" "$lose_at" && kill -9 $(rank_pids "$out" 2 3)) &
bash scripts/fedshard-elastic.sh --max-restarts 1 --np 8 --launcher "${mpi[*]} -np {NP}" -- \
  "$build/fedshard" train "${common[@]}" --strategy fl-fsdp --group-size 2 --out "$out" >/dev/null 2>&1
wait
runs+=("$out")

"$build/fedshard" report "${runs[@]}" --out docs/results/groups | grep '^|'
/usr/bin/python3 - "${runs[@]}" <<'PY'
import json, statistics, sys
print("\n| run | groups | median step s | node B/step | inter-node B/step | inter-group B/step (rank 0) | "
      "inter-group B per round, all ranks | val ppl by tokens |")
print("|---|---|---|---|---|---|---|---|")
for run in sys.argv[1:]:
    lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    steps = [j for j in lines if j["type"] == "step"]
    groups = json.load(open(f"{run}/config.json"))["resolved"]["group_sizes"]
    summary = next(j for j in lines if j["type"] == "summary")
    mean = lambda tier: statistics.mean(s["bytes"][tier] for s in steps)
    # The summary's per-rank bytes cover the last launch: the steps after its resume.
    first = max([j["step"] for j in lines if j["type"] == "resume"] + [0])
    per_rank = summary["step_bytes_by_rank"]
    agg_steps = sum(1 for s in steps if s["aggregated"] and s["step"] > first)
    total_round = (sum(r["inter_group"] for r in per_rank) / agg_steps) if agg_steps else 0
    evals = [f"{e['tokens']}:{e['val_ppl']:.3f}" for e in lines if e["type"] == "eval" and e["model"] == "global"]
    print(f"| {run.split('/')[-1]} | {groups} | {statistics.median(s['time_s']['total'] for s in steps[2:]):.3f} | "
          f"{mean('node'):,.0f} | {mean('inter_node'):,.0f} | {mean('inter_group'):,.0f} | {total_round:,.0f} | "
          f"{' '.join(evals)} |")
PY
