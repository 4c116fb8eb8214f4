#!/usr/bin/env bash
# Bad inputs to the real binary: each must end with ONE stderr line naming the problem and a non-zero exit,
# never a hang or a crash. Usage: cli_errors.sh FEDSHARD_BINARY
set -u
bin=$(realpath "$1")  # the cases below run it from other directories
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
expect "profile range reversed" "train.profile_steps '2:1': expected FIRST:LAST with 1 <= FIRST <= LAST" -- \
  "${train[@]}" --profile-steps 2:1
expect "profile range past the run" "train.profile_steps '2:3' reaches past train.steps (2)" -- "${train[@]}" --profile-steps 2:3
expect "unknown flag" "--bogus" -- "${train[@]}" --bogus
expect "unknown config key" "unknown configuration key 'optim.lrr'" -- "${train[@]}" --set optim.lrr=1
expect "missing config file" "config file /nonexistent.toml not found" -- "${train[@]}" --config /nonexistent.toml
expect "missing data dir" "no manifest.json" -- "${train[@]}" --data "$tmp/none"
expect "vocab smaller than the tokenizer's" "model.vocab_size = 100 is smaller than the vocab 258" -- \
  "${train[@]}" --set model.vocab_size=100
expect "preset vocab not the data's" "model llama3.2-1b has vocab 128256" -- "${train[@]}" --model llama3.2-1b
touch "$tmp/a-file"
expect "tensorboard dir under a file" "train.tensorboard: cannot create $tmp/a-file/tb" -- "${train[@]}" --tensorboard "$tmp/a-file/tb"
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
expect "shared link in training" "'shared' is priced by fedshard plan only" -- "${train[@]}" --link inter-group=1Gbit/s,1ms,shared
expect "bad link suffix" "only 'shared' may follow" -- "$bin" plan --nodes 2 --link inter-node=1Gbit/s,1ms,half
expect "unknown partition" "unknown partition 'zipf'" -- "${train[@]}" --partition zipf
expect "plan: impossible group" "group size 3 does not divide the world size 512" -- \
  "$bin" plan --paper --strategy fl-fsdp:S=3
expect "negative rejoin_after" "federation.rejoin_after must not be negative" -- \
  "${train[@]}" --strategy fl-ddp --set federation.rejoin_after=-1
expect "rejoin where in-job recovery does not reach" "federation.rejoin_after = 1 needs in-job recovery" -- \
  "${train[@]}" --strategy fl-ddp --set parallel.emulate=2x1 --set checkpoint.every=0 --set federation.rejoin_after=1
expect "rejoin with overlapped rounds" "federation.rejoin_after = 1 is not covered with federation.overlap = delayed" -- \
  "${train[@]}" --strategy fl-ddp --group-size 1 --overlap delayed --set federation.rejoin_after=1
expect "rejoin with groups of different sizes" "federation.rejoin_after = 1 is not covered with groups of different sizes" -- \
  "${train[@]}" --strategy fl-ddp --groups 2,1 --set federation.rejoin_after=1
if ! "$bin" --version | grep -q "with ULFM"; then
  expect "rejoin without ULFM" "federation.rejoin_after = 1 needs a build against an MPI with ULFM" -- \
    "${train[@]}" --strategy fl-ddp --group-size 1 --set federation.rejoin_after=1
fi
expect "overlap without federation" "apply to fl-* strategies and sites only" -- "${train[@]}" --strategy fsdp --overlap delayed
expect "unknown overlap" "federation.overlap must be none, delayed or streaming:F, got 'sideways'" -- \
  "${train[@]}" --strategy fl-ddp --overlap sideways
# Found by fuzz_config: a count past int64 escaped as std::out_of_range ("stoll").
expect "streaming fragment count past any integer" "the fragment count F of streaming:F must be a positive integer" -- \
  "${train[@]}" --strategy fl-ddp --overlap streaming:000800000000000000000000000003
expect "streaming fragments not dividing K" "needs parallel.sync_every (8) to be a multiple of the fragment count" -- \
  "${train[@]}" --strategy fl-ddp --overlap streaming:3
expect "streaming with time-based rounds" "it needs federation.round = steps" -- \
  "${train[@]}" --strategy fl-ddp --overlap streaming:2 --round seconds:2
expect "int8 block not a multiple of 4" "federation.compress_block must be a positive multiple of 4, got 6" -- \
  "${train[@]}" --strategy fl-ddp --compress int8 --set federation.compress_block=6
expect "unknown compression" "federation.compress must be none, bf16, int8, int4 or topk:D, got 'zip'" -- \
  "${train[@]}" --strategy fl-ddp --compress zip
expect "top-k density above one" "D of federation.compress = topk:D must be a fraction in (0, 1], got '2'" -- \
  "${train[@]}" --strategy fl-ddp --compress topk:2
expect "top-k block too large for 16-bit entries" "federation.compress_block must be at most 16384 under topk:D" -- \
  "${train[@]}" --strategy fl-ddp --compress topk:0.02 --set federation.compress_block=32768
expect "unknown top-k values" "federation.topk_values must be means or levels, got 'bits'" -- \
  "${train[@]}" --strategy fl-ddp --compress topk:0.02 --set federation.topk_values=bits
expect "error feedback decay above one" "federation.ef_decay must be in [0, 1], got 1.5" -- \
  "${train[@]}" --strategy fl-ddp --compress topk:0.02 --set federation.ef_decay=1.5
expect "unknown sparse mean" "federation.sparse_mean must be union or sparsified, got 'all'" -- \
  "${train[@]}" --strategy fl-ddp --compress topk:0.02 --set federation.sparse_mean=all
expect "top-k values without top-k" "federation.topk_values = levels applies to federation.compress = topk:D only" -- \
  "${train[@]}" --strategy fl-ddp --compress int8 --set federation.topk_values=levels
expect "error feedback decay without compression" "federation.ef_decay = 0.5 decays error feedback" -- \
  "${train[@]}" --strategy fl-ddp --set federation.ef_decay=0.5
expect "backlog without compression" "eval.backlog needs in-job compressed rounds" -- \
  "${train[@]}" --strategy fl-ddp --set eval.backlog=true
expect "negative round time" "T of seconds:T must be a positive number of seconds" -- \
  "${train[@]}" --strategy fl-ddp --round seconds:-1
expect "K given twice" "federation.round = 'steps:4' disagrees with parallel.sync_every = 8" -- \
  "${train[@]}" --strategy fl-ddp --round steps:4
expect "emulated clock without time-based rounds" "federation.clock = emulated:0.1 measures the steps of time-based rounds" -- \
  "${train[@]}" --strategy fl-ddp --set federation.clock=emulated:0.1
expect "malformed clock" "federation.clock must be wall or emulated:SECONDS" -- \
  "${train[@]}" --strategy fl-ddp --round seconds:1 --set federation.clock=emulated:fast
expect "overlap under nccl" "federation.overlap = delayed needs a federation lane of its own, which the nccl backend" -- \
  "${train[@]}" --strategy fl-fsdp --overlap delayed --set parallel.backend=nccl --set model.device=cuda
expect "malformed fault plan" "FEDSHARD_FAULT action 'melt' must be throw, kill, nan, inf, stall or alloc" -- \
  env FEDSHARD_FAULT=stall:0:3,melt:1:2 "${train[@]}"
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
expect "plan: unknown baseline" "--baseline" -- "$bin" plan --paper --baseline torchtitan
expect "plan: check costs without the research baseline" "add --baseline research" -- \
  "$bin" plan --paper --check-latency-us 100
# Sites (docs/sites.md): a site's and a round server's bad flags and files, each before any connection is made.
if "$bin" --version | grep -q "sites: yes"; then
  ( cd "$tmp" && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=ca &&
    for n in site-a other; do
      openssl req -newkey rsa:2048 -nodes -keyout $n.key -out $n.csr -subj /CN=$n &&
        openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $n.pem -days 2 || exit 1
    done ) >/dev/null 2>&1 || echo "FAIL: openssl could not make the certificates"
  tls=(--tls-cert "$tmp/site-a.pem" --tls-key "$tmp/site-a.key" --tls-ca "$tmp/ca.pem")
  site=("${train[@]}" --strategy fsdp --site site-a --server localhost:9)
  expect "site: a server without a site name" "name the site (sites.name, --site)" -- \
    "${train[@]}" --strategy fsdp --server localhost:9 "${tls[@]}"
  expect "site: a site name without a server" "sites.name = 'site-a' is set but sites.server is not" -- \
    "${train[@]}" --site site-a
  expect "site: no certificate" "sites.tls_cert is missing" -- "${site[@]}" --tls-key "$tmp/site-a.key" --tls-ca "$tmp/ca.pem"
  expect "site: a server without a port" "localhost" -- "${site[@]}" --server localhost "${tls[@]}"
  expect "site: in-job groups inside a site" "in-job federation groups inside a site are not supported" -- \
    "${site[@]}" "${tls[@]}" --strategy fl-fsdp --group-size 1
  expect "site: a missing certificate file" "/nonexistent.pem" -- "${site[@]}" --tls-cert /nonexistent.pem \
    --tls-key "$tmp/site-a.key" --tls-ca "$tmp/ca.pem"
  expect "site: another certificate's key" "is not the key of the certificate" -- "${site[@]}" \
    --tls-cert "$tmp/site-a.pem" --tls-key "$tmp/other.key" --tls-ca "$tmp/ca.pem"
  expect "site: a CA file that is not one" "holds no PEM certificate" -- "${site[@]}" \
    --tls-cert "$tmp/site-a.pem" --tls-key "$tmp/site-a.key" --tls-ca "$tmp/site-a.key"
  expect "site: a data slot out of range" "sites.data must be I/N with 0 <= I < N" -- "${site[@]}" "${tls[@]}" \
    --set sites.data=2/2
  expect "site: top-k with the union mean" "set federation.sparse_mean = sparsified" -- "${site[@]}" "${tls[@]}" \
    --compress topk:0.02
  expect "site: eval.backlog" "eval.backlog needs in-job compressed rounds" -- "${site[@]}" "${tls[@]}" \
    --compress int4 --set eval.backlog=true
  expect "plan: sites with the union mean" "give --sparse-mean sparsified" -- \
    "$bin" plan --model tiny --vocab-size 300 --sites 2x2 --site-link 1Gbit/s,1ms --compress topk:0.02
  serve=("$bin" serve --state "$tmp/serve" --port 0 "${tls[@]}")
  expect "serve: a shard outside M" "--shard must be I/M with 0 <= I < M" -- "${serve[@]}" --shard 2/2
  expect "serve: shard 1 without its coordinator" "shards other than 0 report to shard 0" -- "${serve[@]}" --shard 1/2
  expect "serve: no key" "--tls-key is required" -- "$bin" serve --state "$tmp/serve" --port 0 --tls-cert "$tmp/site-a.pem" --tls-ca "$tmp/ca.pem"
  expect "serve: an unknown outer optimizer" "--outer" -- "${serve[@]}" --outer adam
  expect "serve: an unknown aggregation" "--aggregate must be mean, trimmed:F or median, not 'krum'" -- \
    "${serve[@]}" --aggregate krum
  expect "serve: a trimmed mean dropping half" "--aggregate trimmed:0.5: F must be a fraction in [0, 0.5)" -- \
    "${serve[@]}" --aggregate trimmed:0.5
  expect "serve: a norm bound on shard 1" "--aggregate, --norm-bound and --norm-action are shard 0's" -- \
    "${serve[@]}" --shard 1/2 --coordinator localhost:9 --norm-bound 5
  expect "serve: a negative norm bound" "--norm-bound must be a norm >= 0 (0: no bound), got -1" -- "${serve[@]}" --norm-bound -1
  expect "site: a malformed attack plan" "FEDSHARD_SITE_ATTACK must be scale:S or random:SIGMA, got \"scale:x\"" -- \
    env FEDSHARD_SITE_ATTACK=scale:x "${site[@]}" "${tls[@]}"
  expect "plan: site links without sites" "--site-link prices sites: add --sites" -- \
    "$bin" plan --model tiny --vocab-size 300 --site-link 1Gbit/s,1ms
  expect "plan: sites of 0 ranks" "--sites '4x0'" -- "$bin" plan --model tiny --vocab-size 300 --sites 4x0 --site-link 1Gbit/s,1ms
  expect "plan: in-job groups inside sites" "each site trains as one group" -- \
    "$bin" plan --model tiny --vocab-size 300 --sites 2x2 --site-link 1Gbit/s,1ms --strategy fl-fsdp
fi
expect "report: not a run dir" "no metrics.jsonl in $tmp" -- "$bin" report "$tmp" --out "$tmp/rep"
expect "export: not a checkpoint" "neither a checkpoint, a run directory" -- "$bin" export "$tmp" --out "$tmp/exp"

# Multi-rank start-up errors: every rank finds them, the lowest failing rank alone reports. Each rank's output
# is read from its own file (mpirun --output-filename): mpirun's banner cannot land inside a rank's line.
mpi_n=0
expect_mpi() {
  local name=$1 needle=$2 dir="$tmp/mpi-out.$((mpi_n += 1))"
  shift 3
  local out rc n
  timeout 120 mpirun --oversubscribe --allow-run-as-root --output-filename "$dir:nocopy" "$@" >/dev/null 2>&1
  rc=$?
  out=$(cat "$dir"/1/rank.*/stderr 2>/dev/null)
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

# A batch far beyond memory is refused by the preflight before any step: one line with the predicted and the
# available sizes and what would fit, exit 2, no metrics written.
expect "preflight: batch beyond memory" "MB available" -- "${train[@]}" --batch-size 100000000 --out "$tmp/huge"
if [ -e "$tmp/huge/metrics.jsonl" ] || ! "${train[@]}" --batch-size 100000000 --out "$tmp/huge" 2>&1 |
  grep -q "each rank needs about .* MB at its peak .* but has .* MB available .*would fit: --batch-size"; then
  echo "FAIL preflight: metrics written, or the line lacks the sizes and the batch that fits"
  fails=$((fails + 1))
fi
# With --force the run goes on to LibTorch's own allocation failure: a warning line, then the LibTorch message on
# one line without its backtrace.
out=$(timeout 120 "${train[@]}" --batch-size 300000000 --force 2>&1 >/dev/null)
rc=$?
if [ "$rc" -eq 3 ] && [ "$(grep -c '^fedshard: rank 0 of 1: .*can.t allocate memory' <<<"$out")" -eq 1 ] &&
  [ "$(grep -c '^fedshard: warning: each rank needs about' <<<"$out")" -eq 1 ] &&
  ! grep -q "frame #" <<<"$out"; then
  echo "ok   --force, then LibTorch's error without backtrace: $(tail -n 1 <<<"$out")"
else
  echo "FAIL --force, then LibTorch's error without backtrace: rc=$rc"
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

# Found by fuzz_manifest: a number past any double escaped as nlohmann's out_of_range, not a line naming the file.
cp -r "$tmp/corpus" "$tmp/overflow"
sed -i 's/"version": 1/"version": 1e99999/' "$tmp/overflow/manifest.json"
expect "manifest number overflow" "manifest.json: not valid JSON" -- "${train[@]}" --data "$tmp/overflow"

# Hugging Face directories: a real export of a trained tiny model in 20 KB shards, then broken copies of it.
"${train[@]}" --out "$tmp/trained" >/dev/null 2>&1 || { echo "FAIL: train for the HF cases"; exit 1; }
"$bin" export "$tmp/trained" --out "$tmp/hf" --max-shard-size 20KB >/dev/null || { echo "FAIL: export"; exit 1; }
hf_copy() { rm -rf "$tmp/$1" && cp -r "$tmp/hf" "$tmp/$1"; }
evaluate=("$bin" eval --data "$tmp/corpus" --windows 2 --seq-len 32 --json "$tmp/eval.json")
edit_json() {  # FILE PYTHON-EXPRESSION over j
  python3 -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); $2; json.dump(j, open(p, 'w'))" "$1"
}
hf_copy missing
shard=$(ls "$tmp/missing"/model-*.safetensors | sed -n 3p)
rm "$shard"
expect "HF: shard named in the index missing" "shard '$(basename "$shard")'" -- "${evaluate[@]}" "$tmp/missing"
hf_copy twice
python3 - "$tmp/twice/model.safetensors.index.json" <<'PY'
import sys
p = sys.argv[1]
text = open(p).read()
first = text.index('"weight_map": {') + len('"weight_map": {')
line = text[first:text.index(",", first) + 1]
open(p, "w").write(text[:first] + line + text[first:])
PY
expect "HF: index naming a tensor twice" "weight_map names tensor 'lm_head.weight' twice" -- "${evaluate[@]}" "$tmp/twice"
hf_copy truncated
shard=$(ls "$tmp/truncated"/model-*.safetensors | tail -1)
truncate -s -100 "$shard"
expect "HF: shard truncated" "$(basename "$shard"): tensor '" -- "${evaluate[@]}" "$tmp/truncated"
hf_copy yarn
edit_json "$tmp/yarn/config.json" 'j["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}'
expect "HF: unsupported rope_scaling type" "config.json: rope_scaling type 'yarn' is not supported" -- \
  "${evaluate[@]}" "$tmp/yarn"
hf_copy mistral
edit_json "$tmp/mistral/config.json" 'j["model_type"] = "mistral"'
expect "HF: another model_type" "config.json: model_type 'mistral' is not supported" -- "${evaluate[@]}" "$tmp/mistral"
hf_copy bias
# A q_proj bias added to the first shard (and to the index), as a checkpoint with attention_bias would have.
python3 - "$tmp/bias" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
index = json.load(open(f"{d}/model.safetensors.index.json"))
shard = sorted(f for f in os.listdir(d) if f.startswith("model-"))[0]
raw = open(f"{d}/{shard}", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
header["model.layers.0.self_attn.q_proj.bias"] = {"dtype": "F32", "shape": [64], "data_offsets": [len(data), len(data) + 256]}
blob = json.dumps(header).encode()
open(f"{d}/{shard}", "wb").write(struct.pack("<Q", len(blob)) + blob + data + bytes(256))
index["weight_map"]["model.layers.0.self_attn.q_proj.bias"] = shard
json.dump(index, open(f"{d}/model.safetensors.index.json", "w"))
PY
expect "HF: bias tensor present" "tensor 'model.layers.0.self_attn.q_proj.bias' is a bias" -- "${evaluate[@]}" "$tmp/bias"
hf_copy vocab
edit_json "$tmp/vocab/config.json" 'j["vocab_size"] = 100'
expect "HF: config vocab not the weights'" "tensor 'model.embed_tokens.weight' has shape [258, 64], config.json needs [100, 64]" -- \
  "${evaluate[@]}" "$tmp/vocab"
# Data tokenized with a larger vocabulary (a tiktoken file of the 256 bytes and 300 merges) than the model's 258.
python3 -c "
import base64
pairs = [bytes([i]) for i in range(256)] + [bytes([97 + i // 26, 97 + i % 26]) for i in range(300)]
open('$tmp/big.tiktoken', 'w').write(''.join(f'{base64.b64encode(t).decode()} {r}\\n' for r, t in enumerate(pairs)))"
"$bin" prepare --input "$tmp/raw" --out "$tmp/corpus-big" --val-fraction 0.34 --tokenizer "tiktoken:$tmp/big.tiktoken" \
  >/dev/null || { echo "FAIL: prepare with a larger vocabulary"; exit 1; }
expect "HF: data vocab larger than the model's" "but model vocab is only 258" -- \
  "$bin" eval "$tmp/hf" --data "$tmp/corpus-big" --windows 2 --seq-len 32 --json "$tmp/eval.json"
expect "HF: --model disagreeing with config.json" "model small is not the model $tmp/hf/config.json describes (dim 256 vs 64)" -- \
  "${train[@]}" --model small --init-from "$tmp/hf" --out "$tmp/run-hf"
expect "HF: preset overrides with a config.json model" "do not apply with model.init_from" -- \
  "$bin" train --data "$tmp/corpus" --seq-len 32 --batch-size 2 --steps 2 --out "$tmp/run-hf" --init-from "$tmp/hf" \
  --set model.n_layers=1
expect "export: bad shard size" "size '5XB' is not a positive number of bytes" -- \
  "$bin" export "$tmp/trained" --out "$tmp/hf2" --max-shard-size 5XB
expect "generate: no prompt" "generate needs --prompt TEXT or --prompt-ids IDS" -- "$bin" generate "$tmp/hf"
expect "generate: prompt id outside the vocabulary" "token 999 is outside the vocabulary of 258" -- \
  "$bin" generate "$tmp/hf" --prompt-ids 256,999

# A run directory used from elsewhere: trained with a relative data path, sampled from / (the checkpoint carries
# its tokenizer); a checkpoint of an older release (no tokenizer, the data path as given) says why it has none.
(cd "$tmp" && "$bin" train --model tiny --data corpus --seq-len 32 --batch-size 2 --steps 2 --out rel-run >/dev/null 2>&1) \
  || { echo "FAIL: train with a relative data path"; fails=$((fails + 1)); }
if out=$(cd / && "$bin" generate "$tmp/rel-run" --prompt "The " --max-new-tokens 4 2>&1); then
  echo "ok   generate on a run directory from another directory: $(grep -m1 generated <<<"$out")"
else
  echo "FAIL generate on a run directory from another directory:"
  printf '%s\n' "$out" | sed 's/^/    /'
  fails=$((fails + 1))
fi
old_meta="$tmp/rel-run/checkpoints/step-00000002/meta.json"
edit_json "$old_meta" 'del j["tokenizer"]; del j["config"]["resolved"]["data_dir"]'
expect "generate: an older checkpoint whose relative data path is not found from here" \
  "does not say which tokenizer it uses and its data directory corpus (relative to the run's start directory) is not found" \
  -- bash -c "cd / && '$bin' generate '$tmp/rel-run' --prompt x"

if [ "$fails" -ne 0 ]; then
  echo "$fails bad-input case(s) failed"
  exit 1
fi
echo "all bad-input cases end with one clear line"
