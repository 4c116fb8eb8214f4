#!/usr/bin/env bash
# Checkpoints that survive kill -9: a run killed mid-training, mid-checkpoint-write, or as a whole job resumes
# from its last complete checkpoint and reproduces the uninterrupted run's float32 losses bit for bit (fsdp,
# fl-hsdp killed mid-round, relaxed rounds killed with a round in flight); a topology-changing resume; NaN, full disk and corrupted checkpoints.
# Usage: resume.sh FEDSHARD_BINARY [numerics]
#   numerics: the cases whose result LibTorch decides (1-5: losses after a resume, re-sliced state), for the CUDA
#   variant; the refusals and error paths (our code, the same in both variants) run in the CPU variant.
set -u
bin=$1
numerics=${2:-}
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp" 2>/dev/null; umount "$tmp/small" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/train_helpers.sh"
make_corpus
base=(train --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --steps 12 --checkpoint-every 4
      --threads 1 --eval-every 0 --set eval.windows=4)

same_losses() {  # NAME RUN REF
  if diff <(losses "$2") <(losses "$3") >/dev/null && [ "$(losses "$2" | wc -l)" -eq 12 ]; then
    ok "$1: 12 float32 losses identical to the uninterrupted run"
  else
    fail "$1: losses differ from the uninterrupted run"
    diff <(losses "$2") <(losses "$3") | head -5 | sed 's/^/    /'
  fi
}

run() {  # NP OUT ARGS... (exit status returned)
  local np=$1 out=$2
  shift 2
  # mpirun's own messages go to OUT.log, each rank's to its own file (off the run's file system, which may be
  # full), where no other process writes into its lines; rank_errors OUT reads them.
  rm -rf "$(ranks_of "$out")"
  timeout 180 "${mpi[@]}" ${FEDSHARD_FAULT:+-x FEDSHARD_FAULT} -np "$np" $(rank_files "$(ranks_of "$out")") \
    "$bin" "${base[@]}" --out "$out" "$@" >"$out.log" 2>&1
}
# A run its fault plan kills ends at once (not at run's timeout) with mpirun naming the signal.
killed() {  # STATUS OUT WHAT
  case $1 in
    0) fail "$3 exited 0"; return 1 ;;
    124) fail "$3 hung: still running after 180 s"; return 1 ;;
    *) grep -q "signal 9" "$2.log" || { fail "$3 (exit $1): mpirun does not name the kill"; return 1; } ;;
  esac
}
ranks_of() { echo "$tmp/ranks/${1//\//_}"; }
rank_errors() { rank_output "$(ranks_of "$1")" | grep "fedshard: error"; }

# Uninterrupted references.
mkdir -p "$tmp/runs"
run 4 "$tmp/runs/ref" --strategy fsdp || fail "reference fsdp run"
run 8 "$tmp/runs/ref-fl" --strategy fl-hsdp --group-size 4 --shard-size 2 --sync-every 4 --set checkpoint.every=6 \
  || fail "reference fl-hsdp run"

# 1. A rank SIGKILLed mid-training (step 6): the job dies; resume from step 4.
FEDSHARD_FAULT=kill:1:6 run 4 "$tmp/runs/killed" --strategy fsdp
killed $? "$tmp/runs/killed" "killed run" &&
  ok "rank killed: mpirun names the cause ($(grep -m1 -o 'exited on signal 9[^.]*' "$tmp/runs/killed.log"))"
[ "$(cat "$tmp/runs/killed/checkpoints/latest")" = "step-00000004" ] || fail "latest after kill is not step 4"
run 4 "$tmp/runs/killed" --strategy fsdp --resume auto || fail "resume after kill"
same_losses "kill -9 of one rank at step 6, resume" "$tmp/runs/killed" "$tmp/runs/ref"

# 2. Killed in the middle of writing the step-8 checkpoint (rank 2 dies after its own file).
FEDSHARD_FAULT=kill:2:8:checkpoint run 4 "$tmp/runs/midwrite" --strategy fsdp
killed $? "$tmp/runs/midwrite" "mid-write kill"
[ "$(cat "$tmp/runs/midwrite/checkpoints/latest")" = "step-00000004" ] && [ ! -d "$tmp/runs/midwrite/checkpoints/step-00000008" ] \
  && ok "killed mid-checkpoint: step-8 never published, latest still step 4" || fail "half-written checkpoint visible"
run 4 "$tmp/runs/midwrite" --strategy fsdp --resume auto || fail "resume after mid-write kill"
same_losses "kill -9 while writing a checkpoint, resume" "$tmp/runs/midwrite" "$tmp/runs/ref"

# 3. The whole job SIGKILLed from outside once step 9 is logged. Rank 0 stalls in step 10, so the kill lands
# there and not, on a fast machine, after the job has finished.
( FEDSHARD_FAULT=stall:0:10 "${mpi[@]}" -x FEDSHARD_FAULT -np 4 "$bin" "${base[@]}" --out "$tmp/runs/whole" \
    --strategy fsdp >"$tmp/runs/whole.log" 2>&1 & )
for _ in $(seq 600); do
  n=$(grep -c '"type":"step"' "$tmp/runs/whole/metrics.jsonl" 2>/dev/null)
  [ "${n:-0}" -ge 9 ] && break
  sleep 0.1
done
pkill -9 -f "$tmp/runs/whole" ; sleep 1
run 4 "$tmp/runs/whole" --strategy fsdp --resume auto || fail "resume after whole-job kill"
same_losses "kill -9 of the whole job, resume" "$tmp/runs/whole" "$tmp/runs/ref"

# 4. fl-hsdp (8 ranks, K=4) killed at step 9, one step into a round: the step-6 checkpoint is mid-round too.
FEDSHARD_FAULT=kill:5:9 run 8 "$tmp/runs/fl" --strategy fl-hsdp --group-size 4 --shard-size 2 --sync-every 4 \
  --set checkpoint.every=6
killed $? "$tmp/runs/fl" "killed fl run"
run 8 "$tmp/runs/fl" --strategy fl-hsdp --group-size 4 --shard-size 2 --sync-every 4 --set checkpoint.every=6 \
  --resume auto || fail "resume fl-hsdp"
same_losses "fl-hsdp killed mid-round, resume" "$tmp/runs/fl" "$tmp/runs/ref-fl"

# 4b. Relaxed rounds killed the same way; the step-6 checkpoint holds a round in flight (begun at step 4 under
# delayed, at step 6 under streaming:2), saved with its outcome and applied after the resume where it would
# have been. Each mode once: delayed + int8 (error feedback residuals) + nesterov, streaming + int4, delayed +
# topk (the union mean; the sparsified one with decaying residuals), and with federation.inner_state = average and
# reset.
relaxed() {  # NAME ARGS...
  local name=$1
  shift
  run 4 "$tmp/runs/ref-$name" "$@" --sync-every 4 --set checkpoint.every=6 || fail "reference $name run"
  FEDSHARD_FAULT=kill:1:9 run 4 "$tmp/runs/$name" "$@" --sync-every 4 --set checkpoint.every=6
  killed $? "$tmp/runs/$name" "killed $name run"
  tr -d ' \n' <"$tmp/runs/$name/checkpoints/step-00000006/meta.json" 2>/dev/null | grep -q '"round_in_flight":\[[0-9]' \
    || { fail "$name: the step-6 checkpoint has no round in flight"
         { ls "$tmp/runs/$name/checkpoints"; tail -5 "$tmp/runs/$name.log"; rank_output "$(ranks_of "$tmp/runs/$name")" |
             grep -v "^step" | tail -8; } 2>&1 | sed 's/^/    /'; }
  run 4 "$tmp/runs/$name" "$@" --sync-every 4 --set checkpoint.every=6 --resume auto || fail "resume $name"
  same_losses "$name killed with a round in flight, resume" "$tmp/runs/$name" "$tmp/runs/ref-$name"
}
relaxed delayed-int8 --strategy fl-fsdp --group-size 2 --overlap delayed --compress int8 \
  --set federation.outer_optimizer=nesterov --set federation.outer_lr=0.7
relaxed streaming-int4 --strategy fl-ddp --group-size 2 --overlap streaming:2 --compress int4
relaxed delayed-topk --strategy fl-fsdp --group-size 2 --overlap delayed --compress topk:0.25
relaxed topk-sparsified --strategy fl-fsdp --group-size 2 --overlap delayed --compress topk:0.25 \
  --set federation.sparse_mean=sparsified --set federation.topk_values=levels --set federation.ef_decay=0.9
# The round in flight also carries its weight, which finish() averages the inner optimizer state with.
relaxed delayed-average --strategy fl-fsdp --group-size 2 --overlap delayed --set federation.inner_state=average
relaxed streaming-reset --strategy fl-ddp --group-size 2 --overlap streaming:2 --set federation.inner_state=reset
if [ -z "$numerics" ]; then
  run 4 "$tmp/runs/no-overlap" --strategy fl-fsdp --group-size 2 --sync-every 4 \
    --resume "$tmp/runs/delayed-int8/checkpoints/step-00000006" && fail "round in flight resumed without overlap"
  [ "$(rank_errors "$tmp/runs/no-overlap" | grep -c .)" = 1 ] && rank_errors "$tmp/runs/no-overlap" | grep -q "holds a federation round in flight" \
    && ok "a round in flight resumed with overlap none: $(rank_errors "$tmp/runs/no-overlap" | grep -o 'holds a federation round in flight[^;]*')" \
    || fail "a round in flight resumed with overlap none: no clear error"
fi

# 5. Topology-changing resume: the fsdp checkpoint of 4 ranks (step 8) continued by fl-hsdp on 8 ranks.
run 8 "$tmp/runs/reshaped" --strategy fl-hsdp --group-size 4 --shard-size 2 --sync-every 2 \
  --resume "$tmp/runs/ref/checkpoints/step-00000008" && grep -q '"step":8,"type":"resume"' "$tmp/runs/reshaped/metrics.jsonl" \
  && [ "$(losses "$tmp/runs/reshaped" | awk 'NR == 1 {print $1}')" = 9 ] \
  && ok "fsdp x4 checkpoint resumed by fl-hsdp x8 at step 9" || fail "topology-changing resume"

summary() {
  if [ "$fails" -ne 0 ]; then
    echo "$fails resume case(s) failed"
    exit 1
  fi
  echo "all checkpoint and resume cases${numerics:+ whose result LibTorch decides} passed"
  exit 0
}
[ -n "$numerics" ] && summary

# 6. NaN loss: clear message, the last good checkpoint intact and usable.
FEDSHARD_FAULT=nan:0:6 run 4 "$tmp/runs/nan" --strategy fsdp \
  && fail "NaN run exited 0"
rank_errors "$tmp/runs/nan" | grep -q "loss is nan at step 6" && [ "$(cat "$tmp/runs/nan/checkpoints/latest")" = step-00000004 ] \
  && run 4 "$tmp/runs/nan" --strategy fsdp --resume auto \
  && ok "NaN at step 6: stopped with the message, resumed from the intact step-4 checkpoint" || fail "NaN handling"

# 7. A full disk while writing the step-8 checkpoint: clear error, step 4 untouched. The run directory lives on
# a small tmpfs that holds one checkpoint but not two (mounting needs root; elsewhere the case is skipped).
mkdir -p "$tmp/small"
if mount -t tmpfs -o size=2600k tmpfs "$tmp/small" 2>/dev/null; then
  run 4 "$tmp/small/run" --strategy fsdp --steps 4 || fail "run before the full disk"
  sum4=$(cat "$tmp/small/run/checkpoints/step-00000004"/* | md5sum)
  run 4 "$tmp/small/run" --strategy fsdp --resume auto && fail "full disk: exit 0"
  msg=$(rank_errors "$tmp/small/run" | grep -m1 "checkpoint at step 8 failed")
  [ -n "$msg" ] && [ "$(cat "$tmp/small/run/checkpoints/step-00000004"/* | md5sum)" = "$sum4" ] \
    && [ "$(cat "$tmp/small/run/checkpoints/latest")" = step-00000004 ] && [ ! -e "$tmp/small/run/checkpoints/.tmp-step-00000008" ] \
    && ok "full disk: '${msg#*error on }' and step 4 untouched" || { fail "full disk"; tail -3 "$tmp/small/run.log"; }
  umount "$tmp/small"
else
  echo "skip full disk: cannot mount a tmpfs here (needs CAP_SYS_ADMIN)"
fi

# 8. Corrupted checkpoints are refused before training, naming the file.
corrupt() {  # NAME NEEDLE SETUP [EXTRA TRAIN ARGS]
  local name=$1 needle=$2 setup=$3
  shift 3
  rm -rf "$tmp/runs/c" && cp -r "$tmp/runs/ref" "$tmp/runs/c"
  eval "$setup"
  run 4 "$tmp/runs/c" --strategy fsdp --resume auto "$@" && { fail "$name: accepted"; return; }
  local line
  line=$(rank_errors "$tmp/runs/c")
  [[ "$line" == *"$needle"* ]] && [ "$(grep -c . <<<"$line")" -eq 1 ] && ok "$name: $line" \
    || { fail "$name"; printf '%s\n' "$line" | sed 's/^/    /' | head -5; }
}
# The reference's last checkpoint is step 12 = --steps: point `latest` at step 8 so a resume has work left.
echo step-00000008 > "$tmp/runs/ref/checkpoints/latest"
corrupt "flipped byte" "rank-00001.safetensors is corrupt" \
  'printf "\x55" | dd of="$tmp/runs/c/checkpoints/step-00000008/rank-00001.safetensors" bs=1 seek=300 conv=notrunc status=none'
corrupt "missing rank file" "rank-00003.safetensors is missing" 'rm "$tmp/runs/c/checkpoints/step-00000008/rank-00003.safetensors"'
corrupt "topology that does not match" "impossible topology" \
  'sed -i "s/\"shard_size\": 0/\"shard_size\": 3/" "$tmp/runs/c/checkpoints/step-00000008/meta.json"'
corrupt "another model" "checkpoint model has" 'true' --model small
corrupt "dangling latest" "not a checkpoint directory" 'echo step-00000099 > "$tmp/runs/c/checkpoints/latest"'

summary
