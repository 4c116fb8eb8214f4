#!/usr/bin/env bash
# Our ddp against PyTorch DistributedDataParallel (Gloo, Debian's python3-torch) on the same 4 processes:
# same model (`small`), batch (8 x 256 per rank), optimizer, one thread per rank; back to back in one run.
# Usage: bench/ddp_peer.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-30}
cd "$(dirname "$0")/.."
peer=$(/usr/bin/python3 bench/torch_ddp_peer.py --procs 4 --steps "$steps" | grep median_step_s)
mpirun --oversubscribe --allow-run-as-root -np 4 "$build/fedshard" train --config configs/demo.toml --strategy ddp \
  --steps "$steps" --eval-every 0 --set eval.windows=8 --threads 1 --out runs/bench-ddp-peer >/dev/null 2>&1
ours=$(/usr/bin/python3 - <<'PY'
import json, statistics
steps = [json.loads(l) for l in open("runs/bench-ddp-peer/metrics.jsonl") if '"type":"step"' in l]
print(statistics.median(s["time_s"]["total"] for s in steps if s["step"] >= 3))
PY
)
theirs=${peer##*median_step_s=}
echo "$peer"
echo "fedshard_ddp procs=4 median_step_s=$ours"
/usr/bin/python3 -c "print(f'step time ratio fedshard/torch_ddp = {$ours/$theirs:.3f}')"
