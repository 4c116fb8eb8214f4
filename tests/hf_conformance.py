"""Python half of tests/hf_conformance.sh: fedshard's Hugging Face export, import (eval) and generate checked
against the real transformers LlamaForCausalLM, in float32 on the CPU.
Usage: hf_conformance.py FEDSHARD TMPDIR CHECKPOINT DATADIR
  CHECKPOINT: a fedshard checkpoint directory of a trained `tiny` model; DATADIR: a bytes-tokenized corpus."""
import json
import os
import shutil
import subprocess
import sys

import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
torch.set_num_threads(1)  # the box is shared; these models are tiny

fedshard, tmp, checkpoint, data = sys.argv[1:5]
BOS, EOS, VOCAB = 256, 257, 258  # the bytes tokenizer (checked against DATADIR's manifest below)
WINDOWS, SEQ = 4, 64
PROMPT = [BOS, 72, 101, 108]  # BOS "Hel"
NEW = 32
TOL, TOL_BF16 = 1e-5, 1e-2

# ---- the fedshard invocations, one place each (adjust flags here) --------------------------------------------


def fs(*args):
    p = subprocess.run([fedshard, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stderr


def fs_export(src, out, max_shard=None, dtype=None):
    return fs("export", src, "--out", out, *(["--max-shard-size", max_shard] if max_shard else []),
              *(["--dtype", dtype] if dtype else []))


def fs_eval(src, stem):  # writes stem.safetensors (tokens, logits) and stem.json (loss, ...)
    return fs("eval", src, "--data", data, "--windows", str(WINDOWS), "--seq-len", str(SEQ),
              "--save-logits", stem + ".safetensors", "--json", stem + ".json")


def fs_generate(src, out_json):
    return fs("generate", src, "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", str(NEW),
              "--temperature", "0", "--ignore-eos", "--json", out_json)


# ---- bookkeeping ---------------------------------------------------------------------------------------------

fails = 0


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def case(name, fn, *args):
    """Runs one check; a failure (or an exception) is one FAIL line and the next case still runs."""
    global fails
    try:
        note = fn(*args)
        print(f"ok   {name}" + (f": {note}" if note else ""), flush=True)
        return True
    except Fail as e:
        print(f"FAIL {name}: {e}", flush=True)
    except Exception as e:  # a crash in the checker is a failure too, with its cause
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
    fails += 1
    return False


def run_ok(what, rc_err):
    rc, err = rc_err
    check(rc == 0, f"{what} exited {rc}: " + " | ".join(err.strip().splitlines()[-3:]))


def rel(a, b):  # max abs diff relative to the reference's max abs value
    return ((a - b).abs().max() / b.abs().max()).item()


def hf_load(d):
    return LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).eval()


@torch.no_grad()
def hf_logits(model, tokens):
    return model(tokens[:, :SEQ]).logits.float()


def ce(logits, tokens):  # mean next-token cross entropy over all predicted tokens, nats
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)).item()


def fs_eval_loaded(src, stem):
    """fedshard eval SRC -> (tokens, logits, json), shapes checked."""
    run_ok(f"fedshard eval {os.path.basename(src)}", fs_eval(src, stem))
    t = load_file(stem + ".safetensors")
    check("tokens" in t and "logits" in t, f"{stem}.safetensors has {sorted(t)}, wants tokens and logits")
    tokens, logits = t["tokens"], t["logits"]
    check(tokens.dtype == torch.int64 and tuple(tokens.shape) == (WINDOWS, SEQ + 1),
          f"tokens are {tokens.dtype} {tuple(tokens.shape)}, want int64 ({WINDOWS}, {SEQ + 1})")
    check(logits.dtype == torch.float32 and tuple(logits.shape[:2]) == (WINDOWS, SEQ) and logits.dim() == 3,
          f"logits are {logits.dtype} {tuple(logits.shape)}, want float32 ({WINDOWS}, {SEQ}, V)")
    check(int(tokens.max()) < VOCAB, f"token id {int(tokens.max())} is outside the bytes tokenizer")
    with open(stem + ".json") as f:
        js = json.load(f)
    check(isinstance(js.get("loss"), (int, float)), f"{stem}.json has no numeric \"loss\": {js}")
    return tokens, logits, js


def compare_eval(src, stem, model, tol=TOL, loss_only=False):
    """fedshard eval of SRC vs transformers `model` on the very tokens fedshard evaluated."""
    tokens, logits, js = fs_eval_loaded(src, stem)
    ref = hf_logits(model, tokens)
    check(logits.shape == ref.shape, f"logits {tuple(logits.shape)} vs HF {tuple(ref.shape)}")
    ref_loss, own_loss = ce(ref, tokens), ce(logits, tokens)
    loss_rel, r = abs(js["loss"] - ref_loss) / abs(ref_loss), rel(logits, ref)
    note = f"loss {js['loss']:.6f} vs {ref_loss:.6f} (rel {loss_rel:.1e}), logits rel {r:.1e}"
    bad = [f"loss rel {loss_rel:.2e} > {tol:g}"] if loss_rel > tol else []
    if not loss_only and r > tol:
        bad.append(f"logits rel {r:.2e} > {tol:g}")
    if abs(own_loss - js["loss"]) / abs(js["loss"]) > tol:
        bad.append(f"the JSON loss is not the cross entropy of the saved logits ({own_loss:.8f})")
    check(not bad, "; ".join(bad) + f" [{note}]")
    return note


def hf_generate(model):
    model.generation_config.eos_token_id = None  # run exactly NEW steps, like --ignore-eos
    out = model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, do_sample=False, pad_token_id=0)
    return out[0, len(PROMPT):].tolist()


def compare_generate(src, model, name, bytes_text=False):
    out = os.path.join(tmp, f"gen-{name}.json")
    run_ok(f"fedshard generate {os.path.basename(src)}", fs_generate(src, out))
    with open(out) as f:
        js = json.load(f)
    check(isinstance(js.get("text"), str), f"{out} has no \"text\" string")
    ids, ref = js.get("ids"), hf_generate(model)
    if ids != ref:
        where = ""
        if isinstance(ids, list) and len(ids) == len(ref):
            where = f"\n     first difference at step {next(i for i, (a, b) in enumerate(zip(ids, ref)) if a != b)}"
        raise Fail(f"fedshard generated {ids}\n     transformers      {ref}{where}")
    if bytes_text:  # the source knows it is the bytes tokenizer's, so "text" is the ids decoded
        want = bytes(t for t in ids if t < 256).decode("utf-8", errors="replace")
        check(js["text"] == want, f"text {js['text']!r}, want {want!r}")
    return f"{NEW} tokens identical ({bytes(t for t in ids if t < 256)[:24]!r}...)"


def shard_files(d):
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        wm = json.load(f)["weight_map"]
    return wm, sorted(set(wm.values()))


# ---- (0) the data is the bytes tokenizer's ---------------------------------------------------------------------

def check_data():
    with open(os.path.join(data, "manifest.json")) as f:
        tok = json.load(f)["tokenizer"]
    check((tok["kind"], tok["vocab_size"], tok["bos"], tok["eos"]) == ("bytes", VOCAB, BOS, EOS),
          f"{data} tokenizer is {tok}, want bytes with vocab {VOCAB}, bos {BOS}, eos {EOS}")


if not case("data is bytes-tokenized (vocab 258, bos 256, eos 257)", check_data):
    sys.exit(1)

# ---- (a) export of a trained fedshard model, loaded by transformers ----------------------------------------------

hf_a, hf_a20 = os.path.join(tmp, "hf-a"), os.path.join(tmp, "hf-a-20KB")


def a_export():
    run_ok("fedshard export", fs_export(checkpoint, hf_a))
    check(os.path.exists(os.path.join(hf_a, "model.safetensors")) or
          os.path.exists(os.path.join(hf_a, "model.safetensors.index.json")), f"{hf_a} has no model.safetensors")


def a_config():
    with open(os.path.join(hf_a, "config.json")) as f:
        cfg = json.load(f)
    check(cfg.get("bos_token_id") == BOS and cfg.get("eos_token_id") == EOS,
          f"config.json bos/eos are {cfg.get('bos_token_id')}/{cfg.get('eos_token_id')}, want {BOS}/{EOS}")
    g = os.path.join(hf_a, "generation_config.json")
    check(os.path.exists(g), "no generation_config.json")
    with open(g) as f:
        gen = json.load(f)
    check(gen.get("bos_token_id") == BOS and gen.get("eos_token_id") in (EOS, [EOS]),
          f"generation_config.json bos/eos are {gen.get('bos_token_id')}/{gen.get('eos_token_id')}, want {BOS}/{EOS}")


BYTES = {"F32": 4, "BF16": 2, "F16": 2}


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def a_export_sharded():
    run_ok("fedshard export --max-shard-size 20KB", fs_export(checkpoint, hf_a20, "20KB"))
    wm, files = shard_files(hf_a20)
    check(len(files) > 1, f"only {len(files)} shard file(s)")
    for fn in files:  # HF's rule: a shard stays within the size unless it holds one bigger tensor; KB = 1000 bytes
        with safe_open(os.path.join(hf_a20, fn), "pt") as f:
            keys = list(f.keys())
            size = sum(_numel(f.get_slice(k).get_shape()) * BYTES[f.get_slice(k).get_dtype()] for k in keys)
        check(len(keys) == 1 or size <= 20_000, f"{fn} holds {len(keys)} tensors of {size} bytes > 20KB")
        check(sorted(keys) == sorted(k for k, v in wm.items() if v == fn), f"{fn}'s tensors differ from the index's")
    return f"{len(files)} shards"


models = {}


def a_load():
    models["a"] = hf_load(hf_a)


def a_export_bf16():
    d = os.path.join(tmp, "hf-a-bf16")
    run_ok("fedshard export --dtype bfloat16", fs_export(checkpoint, d, dtype="bfloat16"))
    m = LlamaForCausalLM.from_pretrained(d)  # the dtype config.json names
    check(m.dtype == torch.bfloat16, f"transformers loads the bfloat16 export as {m.dtype}")
    return compare_eval(d, os.path.join(tmp, "eval-a-bf16"), hf_load(d), tol=TOL_BF16, loss_only=True)


def a_load_sharded():
    m20, sd = hf_load(hf_a20), models["a"].state_dict()
    sd20 = m20.state_dict()
    check(sd.keys() == sd20.keys() and all(torch.equal(sd[k], sd20[k]) for k in sd),
          "the sharded export loads to different weights than the single-file one")


if case("(a) export of the trained checkpoint", a_export):
    case("(a) export: config.json and generation_config.json carry bos 256 / eos 257", a_config)
    if case("(a) transformers loads the export", a_load):
        case("(a) eval of the fedshard checkpoint vs transformers on the export", compare_eval, checkpoint,
             os.path.join(tmp, "eval-ckpt"), models["a"])
        case("(a) eval of the export vs transformers", compare_eval, hf_a, os.path.join(tmp, "eval-a"), models["a"])
        case("(c) greedy generate, trained export", compare_generate, hf_a, models["a"], "a", True)
        case("(c) greedy generate, fedshard checkpoint vs transformers on its export", compare_generate, checkpoint,
             models["a"], "ckpt", True)
        case("(a) export --dtype bfloat16: loaded as bfloat16; fedshard eval vs transformers", a_export_bf16)
        if case("(a) export --max-shard-size 20KB: several shards + model.safetensors.index.json", a_export_sharded) \
                and case("(a) transformers loads the sharded export to the same weights", a_load_sharded):
            case("(a) eval of the sharded export vs transformers", compare_eval, hf_a20, os.path.join(tmp, "eval-a20"),
                 models["a"])

# ---- (b) random transformers Llamas imported by fedshard ----------------------------------------------------------

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def random_llama(seed, **kw):
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=172, head_dim=16, bos_token_id=BOS, eos_token_id=EOS, **kw)
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # weights big enough that attention, norms and rope visibly matter
        for name, p in sorted(m.named_parameters()):
            p.copy_(1 + 0.3 * torch.randn_like(p) if "norm" in name else 0.15 * torch.randn_like(p))
    return m


specs = {  # name -> (seed, config)
    "tied": (1, dict(vocab_size=258, tie_word_embeddings=True)),
    "untied": (2, dict(vocab_size=320, tie_word_embeddings=False, rope_theta=50000.0, rms_norm_eps=1e-5)),
    "llama3": (3, dict(vocab_size=258, tie_word_embeddings=False, rope_theta=500000.0, max_position_embeddings=256,
                       rope_scaling=LLAMA3)),
}


def b_save(name):
    seed, kw = specs[name]
    m = random_llama(seed, **kw)
    d = os.path.join(tmp, f"rand-{name}")
    m.save_pretrained(d, max_shard_size="50KB")
    check(len(shard_files(d)[1]) > 1, f"{d} is not sharded")
    models[name] = hf_load(d)  # what transformers itself reads back is the reference


for name in specs:
    d = os.path.join(tmp, f"rand-{name}")
    if case(f"(b) {name}: save_pretrained(max_shard_size=50KB)", b_save, name):
        case(f"(b) {name}: fedshard eval vs transformers", compare_eval, d, os.path.join(tmp, f"eval-{name}"),
             models[name])


def b_llama3_matters():
    """The llama3 scaling must change the loss at this head_dim, or the case above proves nothing about it."""
    tokens = load_file(os.path.join(tmp, "eval-llama3.safetensors"))["tokens"]
    seed, kw = specs["llama3"]
    plain = random_llama(seed, **{**kw, "rope_scaling": None})
    scaled = models["llama3"]
    ps, ss = plain.state_dict(), scaled.state_dict()
    check(all(torch.equal(ps[k], ss[k]) for k in ss), "the unscaled twin has other weights")
    gp, gs = hf_logits(plain, tokens), hf_logits(scaled, tokens)
    lp, ls = ce(gp, tokens), ce(gs, tokens)
    # 10x the comparison's tolerance: an importer that ignored the scaling would fail the case above
    check(abs(lp - ls) / ls > 10 * TOL, f"loss with llama3 scaling {ls:.6f} ~ without {lp:.6f}: scaling not exercised")
    return f"loss {ls:.4f} scaled vs {lp:.4f} unscaled, logits differ by {rel(gp, gs):.1e} relative"


if "llama3" in models and os.path.exists(os.path.join(tmp, "eval-llama3.safetensors")):
    case("(b) llama3 rope scaling changes the loss at head_dim 16", b_llama3_matters)


def b_bf16():
    d = os.path.join(tmp, "rand-bf16")
    seed, kw = specs["tied"]
    random_llama(seed, **kw).to(torch.bfloat16).save_pretrained(d, max_shard_size="50KB")
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    check("bfloat16" in (cfg.get("dtype"), cfg.get("torch_dtype")), f"config.json dtype is not bfloat16: {cfg}")
    models["bf16"] = hf_load(d)  # the bf16 weights upcast to float32
    return compare_eval(d, os.path.join(tmp, "eval-bf16"), models["bf16"], tol=TOL_BF16, loss_only=True)


case("(b) bfloat16 checkpoint: fedshard eval loss within 1e-2 of transformers' fp32 on the upcast weights", b_bf16)

if "untied" in models:
    case("(c) greedy generate, random untied model", compare_generate, os.path.join(tmp, "rand-untied"),
         models["untied"], "untied")

# ---- a sharded checkpoint with a shard missing ---------------------------------------------------------------------


def missing_shard():
    src = os.path.join(tmp, "rand-untied")
    d = os.path.join(tmp, "rand-missing")
    shutil.copytree(src, d)
    gone = shard_files(d)[1][1]
    os.remove(os.path.join(d, gone))
    rc, err = fs_eval(d, os.path.join(tmp, "eval-missing"))
    lines = [l for l in err.splitlines() if l.strip()]
    check(rc == 2, f"exit status {rc}, want 2; stderr: {' | '.join(lines[:3])}")
    check(len(lines) == 1, f"{len(lines)} stderr lines, want 1: {' | '.join(lines[:3])}")
    check(lines[0].startswith("fedshard: error:") and gone in lines[0], f"'{lines[0]}' does not name {gone}")
    return lines[0]


if os.path.isdir(os.path.join(tmp, "rand-untied")):
    case("missing shard file: exit 2, one line naming it", missing_shard)

sys.exit(1 if fails else 0)
