#!/usr/bin/env bash
# Bad inputs to the real binary: each must end with ONE stderr line naming the problem and a non-zero exit,
# never a hang or a crash. Usage: cli_errors.sh FEDSHARD_BINARY
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# A small real corpus to break.
mkdir -p "$tmp/raw/gnu" "$tmp/raw/other"
cp /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/LGPL-2.1 /usr/share/common-licenses/GFDL-1.3 "$tmp/raw/gnu/"
cp /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/MPL-2.0 /usr/share/common-licenses/Artistic "$tmp/raw/other/"
"$bin" prepare --input "$tmp/raw" --out "$tmp/corpus" --val-fraction 0.34 >/dev/null || { echo "FAIL: prepare"; exit 1; }
train=("$bin" train --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --steps 2 --out "$tmp/run")

expect "missing corpus dir" "/nonexistent/brown" -- "$bin" prepare --input /nonexistent/brown --out "$tmp/x"
expect "unreadable tokenizer file" "/nonexistent/tokenizer.model" -- \
  "$bin" prepare --input "$tmp/raw" --out "$tmp/x" --tokenizer tiktoken:/nonexistent/tokenizer.model
expect "unknown tokenizer" "unknown tokenizer" -- "$bin" prepare --input "$tmp/raw" --out "$tmp/x" --tokenizer sentencepiece
expect "bad val fraction" "val-fraction" -- "$bin" prepare --input "$tmp/raw" --out "$tmp/x" --val-fraction 1.5
expect "unknown preset (info)" "unknown model preset 'llama9'" -- "$bin" info --model llama9
expect "unknown preset (train)" "unknown model preset 'llama9'" -- "${train[@]}" --model llama9
expect "negative steps" "train.steps must be positive" -- "${train[@]}" --steps -5
expect "non-numeric steps" "--steps: 'ten' is not an integer" -- "${train[@]}" --steps ten
expect "unknown flag" "--bogus" -- "${train[@]}" --bogus
expect "unknown config key" "unknown configuration key 'optim.lrr'" -- "${train[@]}" --set optim.lrr=1
expect "missing config file" "config file /nonexistent.toml not found" -- "${train[@]}" --config /nonexistent.toml
expect "missing data dir" "no manifest.json" -- "${train[@]}" --data "$tmp/none"
expect "vocab smaller than the tokenizer's" "model.vocab_size = 100 is smaller than the vocab 258" -- \
  "${train[@]}" --set model.vocab_size=100
expect "preset vocab not the data's" "model llama3.2-1b has vocab 128256" -- "${train[@]}" --model llama3.2-1b
expect "hsdp without shard size" "needs --shard-size" -- "${train[@]}" --strategy hsdp
expect "group size without federation" "needs an fl-* strategy" -- "${train[@]}" --group-size 2

expect "unknown reduce dtype" "parallel.reduce_dtype must be float32, bfloat16 or float64" -- \
  "${train[@]}" --set parallel.reduce_dtype=int8
expect "reduce dtype wider than master" "parallel.reduce_dtype = float64 is wider than model.dtype" -- \
  "${train[@]}" --set parallel.reduce_dtype=float64
expect "unknown attention kernel" "model.attention must be auto, sdpa or math" -- "${train[@]}" --set model.attention=flash
expect "fused sgd" "optim.fused = on" -- "${train[@]}" --set optim.name=sgd --set optim.fused=on
# Without a usable GPU (a CPU-only build, or a CUDA build on a machine without one), cuda is one clear line.
if "$bin" --version | grep -qE "CPU only|GPUs visible: none"; then
  expect "cuda without a GPU" "model.device = cuda but" -- "${train[@]}" --set model.device=cuda
fi

expect "bad link bandwidth" "bandwidth 'fast' does not start with a number" -- "${train[@]}" --link inter-group=fast,1ms
expect "unknown link tier" "unknown network tier 'moon'" -- "${train[@]}" --link moon=1Gbit/s,1ms
expect "unknown partition" "unknown partition 'zipf'" -- "${train[@]}" --partition zipf
expect "plan: impossible group" "group size 3 does not divide the world size 512" -- \
  "$bin" plan --paper --strategy fl-fsdp:S=3
expect "overlap without federation" "apply to fl-* strategies only" -- "${train[@]}" --strategy fsdp --overlap delayed
expect "unknown overlap" "federation.overlap must be none, delayed or streaming:F, got 'sideways'" -- \
  "${train[@]}" --strategy fl-ddp --overlap sideways
expect "streaming fragments not dividing K" "needs parallel.sync_every (8) to be a multiple of the fragment count" -- \
  "${train[@]}" --strategy fl-ddp --overlap streaming:3
expect "streaming with time-based rounds" "it needs federation.round = steps" -- \
  "${train[@]}" --strategy fl-ddp --overlap streaming:2 --round seconds:2
expect "int8 block not a multiple of 4" "federation.compress_block must be a positive multiple of 4, got 6" -- \
  "${train[@]}" --strategy fl-ddp --compress int8 --set federation.compress_block=6
expect "unknown compression" "federation.compress must be none, bf16 or int8, got 'zip'" -- \
  "${train[@]}" --strategy fl-ddp --compress zip
expect "negative round time" "T of seconds:T must be a positive number of seconds" -- \
  "${train[@]}" --strategy fl-ddp --round seconds:-1
expect "K given twice" "federation.round = 'steps:4' disagrees with parallel.sync_every = 8" -- \
  "${train[@]}" --strategy fl-ddp --round steps:4
expect "slow rank outside the world" "--slow item '9=2': no rank 9 (the world has 1)" -- "${train[@]}" --slow 9=2
expect "slow factor below 1" "the factor must be at least 1" -- "${train[@]}" --slow group:0=0.5
expect "plan: sync every 0 steps" "--sync-every" -- "$bin" plan --paper --sync-every 0
expect "plan: K=0 in a strategy" "K must be positive" -- "$bin" plan --paper --strategy fl-fsdp:S=4,K=0
expect "plan: group size 0" "--group-size" -- "$bin" plan --paper --strategy fl-fsdp --group-size 0
expect "plan: mfu above 1" "--mfu" -- "$bin" plan --paper --mfu 1.5
expect "plan: negative compute time" "--compute-seconds" -- "$bin" plan --paper --compute-seconds -1
expect "plan: optimizer longer than compute" "cannot exceed it" -- \
  "$bin" plan --paper --compute-seconds 1 --optimizer-seconds 2
expect "plan: 3-byte elements" "--bytes-per-element" -- "$bin" plan --paper --bytes-per-element 3
expect "plan: zero batch" "--batch" -- "$bin" plan --paper --batch 0
expect "report: not a run dir" "no metrics.jsonl in $tmp" -- "$bin" report "$tmp" --out "$tmp/rep"
expect "export: not a checkpoint" "neither a checkpoint nor a run directory" -- "$bin" export "$tmp" --out "$tmp/exp"

# Multi-rank start-up errors: every rank finds them, the lowest failing rank alone reports (mpirun adds
# its own banner lines, so here only the fedshard lines are counted).
expect_mpi() {
  local name=$1 needle=$2
  shift 3
  local out rc n
  out=$(timeout 120 mpirun --oversubscribe --allow-run-as-root "$@" 2>&1 >/dev/null)
  rc=$?
  n=$(printf '%s\n' "$out" | grep -c "fedshard: error")
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ] || [ "$n" -ne 1 ] || [[ "$out" != *"$needle"* ]]; then
    echo "FAIL $name: rc=$rc, $n error line(s)"
    printf '%s\n' "$out" | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "ok   $name: $(printf '%s\n' "$out" | grep "fedshard: error")"
  fi
}
expect_mpi "impossible topology (4 ranks, groups of 3)" "group size 3 does not divide the world size 4" -- \
  -np 4 "${train[@]}" --strategy fl-fsdp --group-size 3
expect_mpi "shard size not dividing the group" "shard size 3 does not divide the group size 4" -- \
  -np 4 "${train[@]}" --strategy hsdp --shard-size 3
expect_mpi "more groups than sources (by-source)" "needs at least one source per group: 4 groups" -- \
  -np 4 "${train[@]}" --strategy fl-ddp --group-size 1 --partition by-source
expect_mpi "groups not adding up to the world" "--groups 2,1 adds up to 3 ranks but the job has 4" -- \
  -np 4 "${train[@]}" --strategy fl-fsdp --groups 2,1
expect_mpi "hsdp shard size not dividing a group" "shard size 2 does not divide group 0 (3 ranks)" -- \
  -np 5 "${train[@]}" --strategy fl-hsdp --groups 3,2 --shard-size 2
expect_mpi "groups and a group size" "either as --groups or as --group-size, not both" -- \
  -np 4 "${train[@]}" --strategy fl-fsdp --groups 2,2 --group-size 2
expect_mpi "groups without federation" "fsdp has no federation groups: --groups needs an fl-* strategy" -- \
  -np 4 "${train[@]}" --strategy fsdp --groups 2,2
expect "malformed groups" "expected non-negative integers separated by commas" -- "${train[@]}" --groups 4,,2
expect_mpi "resume groups not matching the groups" "train.resume_groups lists 3 group id(s) for 2 group(s)" -- \
  -np 4 "${train[@]}" --strategy fl-fsdp --group-size 2 --set train.resume_groups=0,1,2

# A LibTorch error (an allocation far beyond memory) is its message on one line, without LibTorch's backtrace.
out=$(timeout 120 "${train[@]}" --batch-size 300000000 2>&1 >/dev/null)
rc=$?
if [ "$rc" -eq 3 ] && [ "$(grep -c '^fedshard: rank 0 of 1: .*can.t allocate memory' <<<"$out")" -eq 1 ] && ! grep -q "frame #" <<<"$out"; then
  echo "ok   LibTorch error without backtrace: $(tail -n 1 <<<"$out")"
else
  echo "FAIL LibTorch error without backtrace: rc=$rc"
  printf '%s\n' "$out" | sed 's/^/    /'
  fails=$((fails + 1))
fi

cp -r "$tmp/corpus" "$tmp/truncated"
shard=$(ls "$tmp/truncated"/train-*.bin | head -1)
truncate -s -100 "$shard"
expect "truncated shard" "$(basename "$shard")" -- "${train[@]}" --data "$tmp/truncated"

cp -r "$tmp/corpus" "$tmp/flipped"
shard=$(ls "$tmp/flipped"/val-*.bin | head -1)
printf '\x7f' | dd of="$shard" bs=1 seek=200 conv=notrunc status=none
expect "corrupt shard" "$(basename "$shard")" -- "${train[@]}" --data "$tmp/flipped"

if [ "$fails" -ne 0 ]; then
  echo "$fails bad-input case(s) failed"
  exit 1
fi
echo "all bad-input cases end with one clear line"
