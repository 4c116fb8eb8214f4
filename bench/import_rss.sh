#!/usr/bin/env bash
# Peak RSS per rank of importing a sharded Hugging Face checkpoint of the llama3.2-1b shape (random bfloat16
# weights, 1GB shards, the Hub's config.json) on 4 fsdp ranks, against each rank's float32 master shard: an
# importer that stages the whole model on every rank shows up as a ratio far above 1.5.
# Usage: bench/import_rss.sh [BUILD_DIR]   (HF_RSS_CACHE: where the 2.5 GB checkpoint is kept, default under /tmp;
#        FEDSHARD_VENV: python with torch and safetensors, default .venv; GEN_ONLY=1: write the checkpoint only)
set -euo pipefail
build=$(realpath "${1:-build}")
cd "$(dirname "$0")/.."
py=${FEDSHARD_VENV:-.venv}/bin/python3
ckpt=${HF_RSS_CACHE:-/tmp/fedshard-hf-llama3.2-1b-bf16}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# 1. The checkpoint, written once. Tensor by tensor in bfloat16, so the generator never holds more than one
# shard (~1 GB); .complete marks a finished write (an interrupted one is redone).
if [ ! -f "$ckpt/.complete" ]; then
  rm -rf "$ckpt.tmp" && mkdir -p "$ckpt.tmp"
  echo "import_rss: writing a random llama3.2-1b checkpoint (bfloat16, 1GB shards) to $ckpt"
  /usr/bin/time -f "import_rss: generator peak RSS %M KiB, %e s" "$py" - "$ckpt.tmp" <<'EOF'
import json, os, sys
import torch
from safetensors.torch import save_file

d = sys.argv[1]
H, L, NH, KV, FF, V = 2048, 16, 32, 8, 8192, 128256
HD = H // NH
# The Hub's meta-llama/Llama-3.2-1B config.json (transformers 4.x style: rope_scaling + rope_theta).
config = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": HD, "hidden_act": "silu", "hidden_size": H,
    "initializer_range": 0.02, "intermediate_size": FF, "max_position_embeddings": 131072, "mlp_bias": False,
    "num_attention_heads": NH, "num_hidden_layers": L, "num_key_value_heads": KV, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "use_cache": True, "vocab_size": V,
}
shapes = {"model.embed_tokens.weight": (V, H)}
for i in range(L):
    p = f"model.layers.{i}."
    shapes.update({p + "input_layernorm.weight": (H,), p + "self_attn.q_proj.weight": (NH * HD, H),
                   p + "self_attn.k_proj.weight": (KV * HD, H), p + "self_attn.v_proj.weight": (KV * HD, H),
                   p + "self_attn.o_proj.weight": (H, NH * HD), p + "post_attention_layernorm.weight": (H,),
                   p + "mlp.gate_proj.weight": (FF, H), p + "mlp.up_proj.weight": (FF, H),
                   p + "mlp.down_proj.weight": (H, FF)})
shapes["model.norm.weight"] = (H,)
nbytes = {k: 2 * torch.Size(s).numel() for k, s in shapes.items()}

# transformers' own tensor names and shapes for this config (on the meta device: no memory).
from transformers import LlamaConfig, LlamaForCausalLM
with torch.device("meta"):
    ref = {k: tuple(v.shape) for k, v in LlamaForCausalLM(LlamaConfig(**config)).state_dict().items()
           if k != "lm_head.weight"}  # tied
assert ref == shapes, "tensor names/shapes differ from transformers' LlamaForCausalLM"

# Pack in order into shards of at most 1 GB (HF's rule, GB = 1e9 bytes).
shards, cur, size = [], [], 0
for k in shapes:
    if cur and size + nbytes[k] > 10**9:
        shards.append(cur)
        cur, size = [], 0
    cur.append(k)
    size += nbytes[k]
shards.append(cur)
torch.manual_seed(0)
weight_map = {}
for n, keys in enumerate(shards, 1):
    name = f"model-{n:05d}-of-{len(shards):05d}.safetensors"
    tensors = {k: (torch.ones(shapes[k]) + 0.1 * torch.randn(shapes[k])).to(torch.bfloat16) if len(shapes[k]) == 1
               else torch.randn(shapes[k], dtype=torch.bfloat16).mul_(0.02) for k in keys}
    save_file(tensors, os.path.join(d, name), metadata={"format": "pt"})
    del tensors
    weight_map.update({k: name for k in keys})
with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": sum(nbytes.values())}, "weight_map": weight_map}, f, indent=2)
with open(os.path.join(d, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
with open(os.path.join(d, "generation_config.json"), "w") as f:
    json.dump({"bos_token_id": 128000, "eos_token_id": 128001, "do_sample": True}, f, indent=2)
print(f"import_rss: {sum(v // 2 for v in nbytes.values()):,} parameters in {len(shards)} shards")
EOF
  touch "$ckpt.tmp/.complete"
  rm -rf "$ckpt" && mv "$ckpt.tmp" "$ckpt"
fi
params=$(grep -o '"total_size": [0-9]*' "$ckpt/model.safetensors.index.json" | awk '{print $2 / 2}')
[ "${GEN_ONLY:-0}" = 1 ] && exit 0

# 2. The import, measured: /usr/bin/time -v around each rank's process, the ranks' own report if any, and a
# sampler of /proc/PID/status that splits the peak into anonymous memory and file pages (a memory-mapped
# checkpoint's pages count in RSS but are shared page cache, not a copy).
grep -qE "^ +eval " <<<"$("$build/fedshard" --help)" ||
  { echo "import_rss: error: $build/fedshard has no eval command" >&2; exit 1; }
cat >"$out/sample.py" <<'PY'
import glob, json, os, sys, time
out, needle, peak = sys.argv[1], sys.argv[2], {}
while not os.path.exists(out + "/stop"):
    for d in glob.glob("/proc/[0-9]*"):
        try:
            if open(d + "/comm").read().strip() != "fedshard" or needle not in open(d + "/cmdline").read():
                continue
            env = dict(l.split("=", 1) for l in open(d + "/environ").read().split("\0") if "=" in l)
            st = {l.split(":")[0]: int(l.split()[1]) * 1024 for l in open(d + "/status") if l.startswith("Rss")}
        except (OSError, ValueError, IndexError):
            continue
        p = peak.setdefault(env.get("OMPI_COMM_WORLD_RANK", "?"), {})
        for k, v in st.items():
            p[k] = max(p.get(k, 0), v)
    time.sleep(0.1)
json.dump(peak, open(out + "/sampled.json", "w"))
PY
/usr/bin/python3 "$out/sample.py" "$out" "$ckpt" &
sampler=$!
# shellcheck disable=SC2016  # $0/$@ expand in each rank's bash
flock /tmp/fedshard-bench.lock \
  mpirun --oversubscribe --allow-run-as-root -np 4 bash -c \
  '/usr/bin/time -v -o "$0/time.$OMPI_COMM_WORLD_RANK" "$@"' "$out" "$build/fedshard" eval "$ckpt" \
  --data data/brown --strategy fsdp --windows 2 --seq-len 32 --json "$out/eval.json" >"$out/log" 2>&1 ||
  { touch "$out/stop"; echo "import_rss: error: fedshard eval failed:" >&2; tail -5 "$out/log" >&2; exit 1; }
touch "$out/stop"
wait "$sampler"
grep -v '^$' "$out/log" | tail -3 | sed 's/^/    /'

# 3. The table. The import is measured where it ends (the ranks' peak RSS right after the model is loaded,
# before any forward pass), against the rank's float32 master shard; the evaluation's own peak (gathered
# units: the tied 1 GB embedding/head in full, logits) is shown beside it.
/usr/bin/python3 - "$out" "$params" <<'EOF'
import json, os, re, sys
out, params = sys.argv[1], int(float(sys.argv[2]))
ranks = {r["rank"]: r for r in json.load(open(os.path.join(out, "eval.json")))["ranks"]}
sampled = json.load(open(os.path.join(out, "sampled.json")))
print(f"llama3.2-1b ({params:,} parameters), bfloat16 Hugging Face checkpoint in 3 shards imported by 4 fsdp ranks\n")
print("| rank | fp32 master shard MiB | peak RSS after import MiB | ratio | <= 1.5x | peak RSS of the whole eval MiB "
      "(time -v) | sampled anon / file MiB |")
print("|---:|---:|---:|---:|:---:|---:|---:|")
fails = 0
mib = lambda b: f"{b / 2**20:,.0f}" if b else "-"
for r in range(4):
    tv = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(os.path.join(out, f"time.{r}")).read())
    shard, after = ranks[r]["shard_state_bytes"], ranks[r]["peak_rss_after_load_bytes"]
    ratio = after / shard
    fails += ratio > 1.5
    sm = sampled.get(str(r), {})
    print(f"| {r} | {mib(shard)} | {mib(after)} | {ratio:.2f} | {'pass' if ratio <= 1.5 else 'FAIL'} | "
          f"{mib(int(tv.group(1)) * 1024)} | {mib(sm.get('RssAnon'))} / {mib(sm.get('RssFile'))} |")
sys.exit(1 if fails else 0)
EOF
