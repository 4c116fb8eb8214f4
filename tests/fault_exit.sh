#!/usr/bin/env bash
# Failures inside a multi-rank job: every rank must exit non-zero within a bounded time, with the cause
# named once. Usage: fault_exit.sh FEDSHARD_BINARY
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
mpirun=(mpirun --oversubscribe --allow-run-as-root)

mkdir -p "$tmp/raw/gnu" "$tmp/raw/other"
cp /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/LGPL-2.1 "$tmp/raw/gnu/"
cp /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/MPL-2.0 "$tmp/raw/other/"
"$bin" prepare --input "$tmp/raw" --out "$tmp/corpus" --val-fraction 0.5 >/dev/null || { echo "FAIL: prepare"; exit 1; }
train=(train --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --steps 50 --threads 1 --out "$tmp/run")

# expect_fault NAME FAULT NEEDLE MAX_SECONDS ARGS...: non-zero exit within MAX_SECONDS (a hang is the failure
# looked for: the limit is a timeout, not a speed), NEEDLE printed exactly once. Each rank's output is read from
# its own file (mpirun --output-filename), where no other process writes: mpirun's banner cannot land in the
# middle of a rank's line. $out holds mpirun's own messages and every rank's, $errors the ranks' error lines.
n=0
expect_fault() {
  local name=$1 fault=$2 needle=$3 limit=$4
  shift 4
  local start count elapsed dir="$tmp/ranks.$((n += 1))"
  start=$(date +%s)
  out=$(FEDSHARD_FAULT=$fault timeout "$limit" "${mpirun[@]}" --output-filename "$dir:nocopy" -x FEDSHARD_FAULT "$@" 2>&1 >/dev/null)
  rc=$?
  elapsed=$(($(date +%s) - start))
  out=$(printf '%s\n' "$out"; cat "$dir"/1/rank.*/stderr 2>/dev/null)
  errors=$(cat "$dir"/1/rank.*/stderr 2>/dev/null | grep "fedshard: error")
  count=$(printf '%s\n' "$out" | grep -cF -- "$needle")
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$count" -ne 1 ]; then
    echo "FAIL $name: rc=$rc after ${elapsed}s, '$needle' printed $count time(s)"
    printf '%s\n' "$out" | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "ok   $name: rc=$rc after ${elapsed}s: $(printf '%s\n' "$out" | grep -F -- "$needle")"
  fi
}

expect_fault "rank 2 throws (fsdp)" throw:2:3 "rank 2 of 4: injected fault" 60 -np 4 "$bin" "${train[@]}" --strategy fsdp
expect_fault "rank 1 throws (hsdp)" throw:1:2 "rank 1 of 4: injected fault" 60 -np 4 "$bin" "${train[@]}" --strategy hsdp --shard-size 2
expect_fault "rank 1 SIGKILLed (fl-fsdp)" kill:1:3 "exited on signal 9" 60 -np 4 "$bin" "${train[@]}" --strategy fl-fsdp --group-size 2
expect_fault "NaN loss on rank 3 (ddp)" nan:3:4 "loss is nan at step 4" 60 -np 4 "$bin" "${train[@]}" --strategy ddp
# LibTorch's own out-of-memory error on one rank: the rank is named, the message is one line (no backtrace).
expect_fault "rank 1 out of memory (fsdp)" alloc:1:2 "fedshard: rank 1 of 4: " 60 -np 4 "$bin" "${train[@]}" --strategy fsdp
if grep -q "frame #" <<<"$out" || ! grep -q "rank 1 of 4: .*allocate" <<<"$out"; then
  echo "FAIL rank 1 out of memory: a backtrace, or no allocation message"
  fails=$((fails + 1))
fi
# A non-finite master weight before a federation round: the job ends before the round sends it, every rank
# with exit 2, one line naming the group, the round and the tensor (int8 would turn the block into NaN for good).
expect_fault "an infinite weight before an int8 round (fl-fsdp)" inf:1:4 \
  "group 0's model holds a non-finite value at federation round 1 (step 4): tensor" 60 \
  -np 4 "$bin" "${train[@]}" --strategy fl-fsdp --group-size 2 --sync-every 4 --compress int8
if [ "$(grep -c . <<<"$errors")" -ne 1 ] || ! grep -q "element [0-9]* is inf" <<<"$errors" || [ "$rc" -ne 2 ]; then
  echo "FAIL infinite weight: want exit 2 and one error line naming the element, got rc=$rc:"
  printf '%s\n' "$errors" | sed 's/^/    /'
  fails=$((fails + 1))
fi

if [ "$fails" -ne 0 ]; then
  echo "$fails fault case(s) failed"
  exit 1
fi
echo "every fault ended the whole job in bounded time"
