#!/usr/bin/env bash
# Gradient accumulation and emulation (train.grad_accum, parallel.emulate), in float64 against real runs of
# the layout being reproduced: A micro-batches of b equal one batch of A*b (ddp, fsdp, hsdp on 1, 2, 4 ranks),
# and virtual ranks and groups played by 1 or 2 real ranks equal the real 8-rank run (fsdp, fl-fsdp S=2,
# fl-hsdp S=4 H=2 with a nesterov outer step). Compared: every step's loss and every evaluation of the global
# model, to 1e-9 relative. Then the layouts the real ranks cannot play are refused in one line, exit 2.
# Usage: emulate.sh FEDSHARD_BINARY
set -u
bin=$1
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/train_helpers.sh"
make_corpus
run() {  # NP OUT ARGS...
  local np=$1 out=$2
  shift 2
  timeout 240 "${mpi[@]}" -np "$np" "$bin" train --model tiny --data "$tmp/corpus" --seq-len 32 --steps 12 \
    --threads 1 --eval-every 4 --set eval.windows=8 --set model.dtype=float64 --compute-dtype float64 \
    --set parallel.reduce_dtype=float64 --lr 3e-3 --out "$out" "$@" >"$out.log" 2>&1 || { fail "run $out"; tail -3 "$out.log"; }
}
# "step loss" and "eval val_loss" lines of a run, floats printed exactly.
numbers() { $py -c "
import json
for l in open('$1/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'step': print('step', j['step'], repr(j['loss']))
    if j['type'] == 'eval': print('eval', j['step'], repr(j['val_loss']))"; }
same() {  # WHAT RUN_A RUN_B: every number equal to 1e-9 relative, the same lines in both
  $py - "$2" "$3" <<PY && ok "$1" || fail "$1"
import sys
a, b = (open(f).read().split('\n') for f in sys.argv[1:])
assert len(a) == len(b) and len(a) > 10, (len(a), len(b))
worst = 0
for x, y in zip(a, b):
    if not x: continue
    kx, sx, vx = x.split(); ky, sy, vy = y.split()
    assert (kx, sx) == (ky, sy), (x, y)
    worst = max(worst, abs(float(vx) - float(vy)) / abs(float(vy)))
print(f'     {len(a) - 1} numbers, worst relative difference {worst:.2e}')
assert worst < 1e-9
PY
}
compare() {  # WHAT RUN_A RUN_B
  numbers "$2" >"$2.numbers"
  numbers "$3" >"$3.numbers"
  same "$1" "$2.numbers" "$3.numbers"
}

# Gradient accumulation: A micro-batches of b against one batch of A*b, same ranks.
n=0
accum() {  # NP A B ARGS...
  local np=$1 a=$2 b=$3 name="$tmp/accum$((n += 1))"
  shift 3
  run "$np" "$name-whole" --batch-size $((a * b)) "$@"
  run "$np" "$name-micro" --batch-size "$b" --grad-accum "$a" "$@"
  compare "$* on $np rank(s): $a micro-batches of $b = a batch of $((a * b))" "$name-whole" "$name-micro"
}
accum 1 2 2 --strategy ddp
accum 2 4 1 --strategy ddp
accum 2 2 2 --strategy fsdp
accum 4 2 1 --strategy fsdp
accum 4 2 1 --strategy hsdp --shard-size 2

# Emulation against the real 8-rank runs.
run 8 "$tmp/fsdp8" --strategy fsdp --batch-size 1
run 2 "$tmp/fsdp8-on2" --strategy fsdp --batch-size 1 --emulate 8
compare "fsdp: 8 virtual ranks on 2 real = 8 real ranks" "$tmp/fsdp8" "$tmp/fsdp8-on2"
fl=(--strategy fl-fsdp --batch-size 1 --sync-every 4 --partition dirichlet:0.5)
run 8 "$tmp/fl8" "${fl[@]}" --group-size 2
run 2 "$tmp/fl8-on2" "${fl[@]}" --emulate 4x2
compare "fl-fsdp: 4 virtual groups of 2 on 2 real ranks = 8 real ranks" "$tmp/fl8" "$tmp/fl8-on2"
run 1 "$tmp/fl8-on1" "${fl[@]}" --emulate 4x2
compare "fl-fsdp: 4 virtual groups of 2 on 1 real rank = 8 real ranks" "$tmp/fl8" "$tmp/fl8-on1"
hl=(--strategy fl-hsdp --shard-size 2 --batch-size 1 --sync-every 4 --set federation.outer_optimizer=nesterov
    --set federation.outer_lr=0.7)
run 8 "$tmp/hl8" "${hl[@]}" --group-size 4
run 2 "$tmp/hl8-on2" "${hl[@]}" --emulate 2x4
compare "fl-hsdp H=2, nesterov: 2 virtual groups of 4 on 2 real ranks = 8 real ranks" "$tmp/hl8" "$tmp/hl8-on2"
$py -c "
import json
s = [json.loads(l) for l in open('$tmp/fl8-on2/metrics.jsonl') if '\"summary\"' in l][0]
assert s['world'] == 8 and s['group_sizes'] == [2, 2, 2, 2], s
assert s['emulation'] == {'real_world': 2, 'real_group_sizes': [2], 'real_shard_size': 2, 'groups_per_rank': 4,
                          'ranks_per_rank': 1}, s['emulation']
" && ok "summary reports the virtual layout and the real one" || fail "summary of the emulated run"

# Layouts the real ranks cannot play: one line naming the numbers, exit 2, before training.
refused() {  # WHAT NP PATTERN ARGS...
  local what=$1 np=$2 pattern=$3
  shift 3
  rm -rf "$tmp/refused.ranks"
  # Each rank's output from its own file: no other process writes into its lines.
  timeout 60 "${mpi[@]}" -np "$np" $(rank_files "$tmp/refused.ranks") "$bin" train --model tiny \
    --data "$tmp/corpus" --seq-len 32 --steps 4 --threads 1 --out "$tmp/refused" "$@" >/dev/null 2>&1
  local rc=$? lines
  rank_output "$tmp/refused.ranks" >"$tmp/refused.err"
  lines=$(grep -c "fedshard: error" "$tmp/refused.err")
  [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$pattern" "$tmp/refused.err" && ok "$what" \
    || { fail "$what (exit $rc, $lines error lines)"; cat "$tmp/refused.err"; }
}
refused "3 ranks cannot play 4 groups of 2" 3 "cannot be played by 3 real ranks" --strategy fl-fsdp --emulate 4x2
refused "4 ranks cannot play a world of 2" 4 "is a world of 2 rank(s) but the job has 4" --strategy fsdp --emulate 2
refused "fsdp with GxS groups" 1 "has no federation groups" --strategy fsdp --emulate 2x4
refused "emulate with --group-size" 2 "gives the groups" --strategy fl-fsdp --emulate 4x2 --group-size 2
refused "emulated run with checkpoints" 2 "keep no checkpoints" --strategy fl-fsdp --emulate 4x2 --checkpoint-every 2
refused "held groups with overlap" 2 "holds 4 groups per rank" --strategy fl-fsdp --emulate 4x2 --overlap delayed
refused "a malformed layout" 2 "expected W (a world of W ranks) or GxS" --strategy fl-fsdp --emulate 4y2
refused "no micro-batches" 1 "train.grad_accum must be positive, got 0" --strategy ddp --grad-accum 0
refused "held groups beyond memory" 1 "MB available" --strategy fl-ddp --emulate 100000x1 --model llama3.2-1b \
  --set model.vocab_size=128256

if [ "$fails" -ne 0 ]; then
  echo "$fails emulation case(s) failed"
  exit 1
fi
echo "all emulation cases passed"
