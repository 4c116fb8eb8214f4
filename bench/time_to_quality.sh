#!/usr/bin/env bash
# Time to quality on three clusters (issue 29): the runs of bench/research_regime.sh (tiny at W = 512, seeds),
# each step priced at the step time `fedshard plan` predicts for its strategy with Llama 3.1 8B, 2 x 2048
# tokens per GPU, bf16, K = 8, on
#  - leonardo: 128 Leonardo nodes (4x A100 64 GB, 400 Gbit/s per node), as fedshard runs, and as the research
#    code ran (`--baseline research`: no prefetch, TORCH_DISTRIBUTED_DEBUG=DETAIL's checks);
#  - h100: 64 nodes of 8 H100 (NVLink 4, 3.2 Tbit/s per node: 400 Gbit/s per GPU), 989 TFLOP/s bf16;
#  - sites: the same 512 A100s in 4 sites joined by 10 Gbit/s, 5 ms links (every ring that leaves a node
#    crosses a site at some hop: FSDP's, HSDP's replicas' and the rounds'; pessimistic for fl-hsdp, whose
#    8-node groups could stay inside a site); every GPU with its own 10 Gbit/s, and again as each node's
#    10 Gbit/s shared by its 4 GPUs (`,shared`: rings leaving a node at once split it; docs/cost-model.md §3).
# Prints the table of predicted hours to reach each target perplexity and draws ppl vs predicted hours, one
# panel per cluster, into docs/results/time_to_quality/.
# Usage: bench/time_to_quality.sh [BUILD_DIR] [RUN_DIR...]   (default runs: the research regime's four arms over
#   seeds, docs/results/research_regime/tiny/research-tiny-ARM-sSEED); env OUT (docs/results/time_to_quality)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
cd "$(dirname "$0")/.."
shift || true
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(docs/results/research_regime/tiny/research-tiny-{fsdp,hsdp,fl-fsdp,fl-hsdp}-s[0-9])
out=${OUT:-docs/results/time_to_quality}
mkdir -p "$out"
# The plans (megabytes of JSON each: every strategy's schedule) are made again on every run, not kept.
plans=$(mktemp -d)
trap 'rm -rf "$plans"' EXIT
# fl-fsdp:S=256 prices the 2-group runs (G = 2 at W = 512), the best federated arm once tuned (docs/results.md §7.3).
strategies=(--strategy fsdp --strategy hsdp:H=4 --strategy fl-fsdp:S=4 --strategy fl-fsdp:S=256 --strategy fl-hsdp:S=32,H=4)
plan() { "$build/fedshard" plan --model llama3.1-8b --reduce-dtype bfloat16 "${strategies[@]}" --json "$@"; }
plan --cluster leonardo --nodes 128 >"$plans/leonardo.json"
plan --cluster leonardo --nodes 128 --baseline research >"$plans/leonardo-research.json"
plan --nodes 64 --ranks-per-node 8 --flops 989e12 --mfu 0.4 --memory-per-rank 80GB \
  --link node=3.6Tbit/s,3us --link inter-node=400Gbit/s,5us --link inter-group=400Gbit/s,5us >"$plans/h100.json"
plan --cluster leonardo --nodes 128 --link inter-node=10Gbit/s,5ms --link inter-group=10Gbit/s,5ms >"$plans/sites.json"
plan --cluster leonardo --nodes 128 --link inter-node=10Gbit/s,5ms,shared --link inter-group=10Gbit/s,5ms,shared \
  >"$plans/sites-shared.json"
python3 bench/time_to_quality.py --figure "$out/ppl_vs_predicted_hours.png" \
  --cluster "leonardo=$plans/leonardo.json" --cluster "leonardo, research settings=$plans/leonardo-research.json" \
  --cluster "8x H100 nodes, 3.2 Tbit/s=$plans/h100.json" --cluster "4 sites, 10 Gbit/s=$plans/sites.json" \
  --cluster "4 sites, 10 Gbit/s per node=$plans/sites-shared.json" \
  "${runs[@]}" | tee "$out/table.md"
