#!/usr/bin/env bash
# The resume contract (docs/federation.md, "Options that shape training state"): every declared option is walked
# here, with the option changed from a checkpoint taken between two rounds, at a round, and with a round in
# flight. A refused change exits 2 with one `fedshard: error:` line naming the option and the checkpoint's
# value, and writes nothing; an allowed one trains to the end with finite losses and every group holding the
# same model after the last round.
# Usage: resume_contract.sh FEDSHARD_BINARY
set -u
bin=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$here/train_helpers.sh"
make_corpus
base=(train --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --steps 12 --threads 1 --eval-every 0
      --set eval.windows=4 --strategy fl-fsdp --group-size 2 --sync-every 4 --checkpoint-every 2
      --set checkpoint.keep=10)
run() {  # OUT ARGS...
  local out=$1
  shift
  timeout 180 "${mpi[@]}" -np 4 --output-filename "$out.ranks" "$bin" "${base[@]}" --out "$out" "$@" \
    >"$out.log" 2>&1
}
ckpt() { printf '%s/checkpoints/step-%08d' "$1" "$2"; }

# The checkpoints every row starts from: plain rounds (step 6: two steps after a round; step 8: at a round),
# delayed overlap (step 6: the round begun at step 4 in flight), int8 and Nesterov (step 8, at a round).
mkdir -p "$tmp/runs"
run "$tmp/runs/plain" || fail "plain reference run"
run "$tmp/runs/delayed" --overlap delayed || fail "delayed reference run"
run "$tmp/runs/int8" --compress int8 || fail "int8 reference run"
run "$tmp/runs/nesterov" --set federation.outer_optimizer=nesterov || fail "nesterov reference run"
mid=$(ckpt "$tmp/runs/plain" 6) at_round=$(ckpt "$tmp/runs/plain" 8) in_flight=$(ckpt "$tmp/runs/delayed" 6)
int8=$(ckpt "$tmp/runs/int8" 8) nesterov=$(ckpt "$tmp/runs/nesterov" 6)
tr -d ' \n' <"$in_flight/meta.json" | grep -q '"round_in_flight":\[[0-9]' || fail "no round in flight at step 6 under delayed"

n=0
# refused NAME CHECKPOINT NEEDLE ARGS...: exit 2, one error line holding NEEDLE (the option and the checkpoint's
# value), nothing written into the run directory.
refused() {
  local name=$1 from=$2 needle=$3 out="$tmp/runs/r$((n += 1))"
  shift 3
  run "$out" --resume "$from" "$@"
  local rc=$? errors
  errors=$(cat "$out".ranks/1/rank.*/stderr 2>/dev/null | grep "fedshard: error")
  if [ "$rc" -eq 2 ] && [ "$(grep -c . <<<"$errors")" -eq 1 ] && [[ "$errors" == *"$needle"* ]] && [ ! -e "$out/metrics.jsonl" ]; then
    ok "$name: refused: ${errors#*error: }"
  else
    fail "$name: rc=$rc, want exit 2 and one line with '$needle', nothing written"
    printf '%s\n' "$errors" | head -3 | sed 's/^/    /'
  fi
}
# allowed NAME CHECKPOINT ARGS...: trains to step 12, every loss finite, the groups equal after the last round.
allowed() {
  local name=$1 from=$2 out="$tmp/runs/a$((n += 1))"
  shift 2
  if ! run "$out" --resume "$from" "$@"; then
    fail "$name: the resume failed"
    grep -h "fedshard: error" "$out".ranks/1/rank.*/stderr 2>/dev/null | head -2 | sed 's/^/    /'
    return
  fi
  local finite equal
  finite=$($py -c "
import json, math
ls = [json.loads(l) for l in open('$out/metrics.jsonl')]
steps = [j for j in ls if j['type'] == 'step']
print(int(bool(steps) and steps[-1]['step'] == 12 and all(math.isfinite(j['loss']) for j in steps)))")
  # Every group's model, reassembled from its ranks' shards of the final checkpoint, is the same.
  equal=$($py - "$out/checkpoints/step-00000012" <<'EOF'
import json, struct, sys
d = sys.argv[1]
meta = json.load(open(d + '/meta.json'))
groups = {}
for r in meta['ranks']:
    raw = open(d + '/' + r['file'], 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    for u, (a, b) in enumerate(r['shard']):
        e = head['u%d.param' % u]
        size = (e['data_offsets'][1] - e['data_offsets'][0]) // (b - a)
        flat = groups.setdefault(r['group'], {}).setdefault(u, bytearray(meta['units'][u]['padded_numel'] * size))
        flat[a * size:b * size] = raw[8 + n + e['data_offsets'][0]:8 + n + e['data_offsets'][1]]
models = list(groups.values())
print(int(all(m == models[0] for m in models)))
EOF
)
  if [ "$finite" = 1 ] && [ "$equal" = 1 ]; then
    ok "$name: allowed, trained to step 12, groups equal after the last round"
  else
    fail "$name: finite '$finite', groups equal '$equal'"
  fi
}

row() {  # the table's option key: its cases
  case $1 in
    parallel.strategy)
      allowed "strategy: fl-fsdp to fl-ddp with a round in flight (applied at the resume)" "$in_flight" \
        --overlap delayed --strategy fl-ddp ;;
    train.grad_accum)
      allowed "grad_accum: 1 to 2 between two rounds" "$mid" --grad-accum 2 ;;
    parallel.emulate)
      refused "emulate: resumed as an emulated run" "$mid" "emulated runs keep no checkpoints" --emulate 2x2 ;;
    data.partition)
      allowed "partition: iid to by-source between two rounds" "$mid" --partition by-source ;;
    parallel.groups)
      allowed "groups: a round in flight, merged onto fsdp" "$in_flight" --strategy fsdp --group-size 0
      allowed "groups: a round in flight, continued by groups 3+1" "$in_flight" --overlap delayed --group-size 0 \
        --groups 3,1 --set train.resume_groups=0,1 ;;
    federation.overlap)
      refused "overlap: delayed round in flight, resumed with streaming:2" "$in_flight" \
        "federation.overlap = delayed" --overlap streaming:2
      refused "overlap: delayed round in flight, resumed with none" "$in_flight" "federation.overlap = delayed"
      allowed "overlap: none to delayed at a round" "$at_round" --overlap delayed ;;
    parallel.sync_every)
      refused "sync_every: 4 to 2 between two rounds" "$mid" "parallel.sync_every = 4" --sync-every 2
      allowed "sync_every: 4 to 2 at a round" "$at_round" --sync-every 2 ;;
    federation.round)
      refused "round: steps to seconds between two rounds" "$mid" "federation.round = steps" --round seconds:0.1 \
        --set federation.clock=emulated:0.05
      allowed "round: steps to seconds at a round" "$at_round" --round seconds:0.1 --set federation.clock=emulated:0.05 ;;
    federation.compress)
      refused "compress: int8 to bf16" "$int8" "federation.compress = int8" --compress bf16
      refused "compress: int8 to none" "$int8" "federation.compress = int8"
      refused "compress: none to int8 between two rounds" "$mid" "federation.compress = int8 needs it" --compress int8
      allowed "compress: none to int8 at a round" "$at_round" --compress int8
      allowed "compress: none to bf16 with the global model kept (delayed)" "$in_flight" --overlap delayed --compress bf16 ;;
    federation.compress_block)
      refused "compress_block: 256 to 64 under int8" "$int8" "federation.compress_block = 256" --compress int8 \
        --set federation.compress_block=64 ;;
    federation.topk_values)
      allowed "topk_values: levels at a round" "$at_round" --compress topk:0.25 --set federation.topk_values=levels ;;
    federation.ef_decay)
      allowed "ef_decay: 1 to 0.9 under int8 between two rounds" "$int8" --compress int8 --set federation.ef_decay=0.9 ;;
    federation.sparse_mean)
      allowed "sparse_mean: sparsified at a round" "$at_round" --compress topk:0.25 --set federation.sparse_mean=sparsified ;;
    parallel.reduce_dtype)
      refused "reduce_dtype: bfloat16 rounds between two plain rounds" "$mid" "parallel.reduce_dtype = bfloat16 needs it" \
        --set parallel.reduce_dtype=bfloat16
      allowed "reduce_dtype: bfloat16 at a round" "$at_round" --set parallel.reduce_dtype=bfloat16
      allowed "reduce_dtype: bfloat16 from a Nesterov checkpoint (its global slice)" "$nesterov" \
        --set federation.outer_optimizer=nesterov --set parallel.reduce_dtype=bfloat16 ;;
    federation.normalize)
      refused "normalize: steps between two plain rounds" "$mid" "federation.normalize = steps needs it" \
        --set federation.normalize=steps
      allowed "normalize: steps at a round" "$at_round" --set federation.normalize=steps ;;
    federation.outer_optimizer)
      refused "outer_optimizer: fedavg to nesterov between two rounds" "$mid" \
        "federation.outer_optimizer = nesterov needs it" --set federation.outer_optimizer=nesterov
      allowed "outer_optimizer: fedavg to nesterov at a round" "$at_round" --set federation.outer_optimizer=nesterov
      allowed "outer_optimizer: nesterov to fedavg between two rounds" "$nesterov" ;;
    federation.inner_state)
      allowed "inner_state: keep to average between two rounds" "$mid" --set federation.inner_state=average
      allowed "inner_state: keep to reset with a round in flight" "$in_flight" --overlap delayed \
        --set federation.inner_state=reset ;;
    federation.outer_lr)
      allowed "outer_lr: 1 to 0.7 (Nesterov) between two rounds" "$nesterov" --set federation.outer_optimizer=nesterov \
        --set federation.outer_lr=0.7 --set federation.outer_momentum=0.5 ;;
    federation.clock)
      allowed "slow and eval: changed between two rounds" "$mid" --slow group:1=2 --set federation.eval_after_sync=false ;;
    model.kernels)
      allowed "kernels: aten to fused between two rounds" "$mid" --set model.kernels=fused ;;
    model.cross_entropy)
      allowed "cross_entropy: chunked to full with a round in flight" "$in_flight" --overlap delayed \
        --set model.cross_entropy=full ;;
    model.matmul_dtype)
      # Not state, but float8 runs on GPUs only (and LibTorch 2.5 on): here the change is refused whatever the
      # checkpoint holds.
      refused "matmul_dtype: float8 on the CPU" "$mid" "model.matmul_dtype = float8 " \
        --set model.matmul_dtype=float8 --set model.compute_dtype=bfloat16 ;;
    sites.server)
      # A site's own resume (the same site, the same layout) is tests/sites.sh's; here the refusal, before any
      # server is reached.
      openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/ca.key" -out "$tmp/ca.pem" -days 2 -subj /CN=ca 2>/dev/null
      openssl req -newkey rsa:2048 -nodes -keyout "$tmp/s.key" -out "$tmp/s.csr" -subj /CN=site-a 2>/dev/null
      openssl x509 -req -in "$tmp/s.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial -out "$tmp/s.pem" \
        -days 2 2>/dev/null
      refused "sites.server: an in-job fl-fsdp checkpoint resumed as a site" "$mid" "by a job that was not a site" \
        --strategy fsdp --group-size 0 --site site-a --server localhost:9 --tls-cert "$tmp/s.pem" \
        --tls-key "$tmp/s.key" --tls-ca "$tmp/ca.pem" ;;
    *) return 1 ;;
  esac
}

# Every declared option (src/train/option_space.cpp, `fedshard options --json`: the rows of the docs table).
keys=$("$bin" options --json | $py -c "import json, sys; print(*[o['key'] for o in json.load(sys.stdin)['options']])")
[ "$(wc -w <<<"$keys")" -ge 10 ] || fail "fedshard options declares $(wc -w <<<"$keys") options"
for key in $keys; do
  row "$key" || fail "declared option '$key' has no case here"
done

if [ "$fails" -ne 0 ]; then
  echo "$fails resume contract case(s) failed"
  exit 1
fi
echo "every declared option's row of the resume contract holds"
