"""The PyTorch side of bench/peers.sh: fedshard's `small` Llama, the same Brown windows, batch, AdamW and LR
schedule, trained by PyTorch's own parallelisms, so fedshard can be put next to them step for step.

Launched by mpirun (one process per rank; only OMPI_COMM_WORLD_RANK/SIZE are read, MPI itself is not used),
so the same command runs on shared memory and inside bench/netns_lib.sh's namespaces.
Modes:  ddp       DistributedDataParallel over the world (Gloo)
        fsdp      FSDP2 fully_shard over a 1-D mesh of the world
        hsdp      FSDP2 fully_shard over a 2-D mesh (replicate x shard)
        diloco    torchft DiLoCo (Nesterov outer SGD) across groups, FSDP2 inside each group
        localsgd  torchft LocalSGD (plain parameter average) across groups, DDP inside each group
Each rank writes OUT.rankN.json: per-step times and losses, peak RSS (VmHWM), the final validation loss.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

# fedshard's `small` preset with the byte tokenizer (src/model/config.cpp; tokenizer vocab from the manifest).
DIM, LAYERS, HEADS, KV_HEADS, FFN, THETA, EPS = 256, 4, 8, 4, 704, 10000.0, 1e-5
MASK64 = (1 << 64) - 1


# ---- fedshard's data order, re-implemented from src/util/rng.h and src/data/window_sampler.cpp ----
def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def derive_seed(parts):
    h = 0x243F6A8885A308D3
    for p in parts:
        h = mix64(h ^ mix64(p & MASK64))
    return h


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        return mix64(self.state)

    def below(self, n):
        reject_under = ((1 << 64) - n) % n  # (0 - n) % n in uint64
        while True:
            r = self.next()
            if r >= reject_under:
                return r % n


class Windows:
    """seq_len+1-token windows of one split, numbered as src/data/token_dataset.cpp numbers them."""

    def __init__(self, data_dir, split, seq):
        manifest = json.load(open(os.path.join(data_dir, "manifest.json")))
        self.seq, self.shards, self.begin = seq, [], [0]
        for e in manifest["shards"]:
            if e["split"] != split:
                continue
            raw = open(os.path.join(data_dir, e["file"]), "rb").read()
            toks = torch.frombuffer(bytearray(raw[48:]), dtype=torch.int32).to(torch.int64)  # 48-byte header
            assert toks.numel() == e["tokens"], e["file"]
            self.shards.append(toks)
            self.begin.append(self.begin[-1] + max(e["tokens"] - 1, 0) // seq)
        self.vocab = manifest["tokenizer"]["vocab_size"]

    def __len__(self):
        return self.begin[-1]

    def batch(self, ids):
        rows = []
        for w in ids:
            s = next(i for i in range(len(self.shards)) if self.begin[i + 1] > w)
            off = (w - self.begin[s]) * self.seq
            rows.append(self.shards[s][off:off + self.seq + 1])
        return torch.stack(rows)


class Sampler:
    """fedshard's iid global stream: reader r takes slot r of every step from seeded per-epoch permutations."""

    def __init__(self, n, readers, batch, seed, stream=0):
        self.n, self.readers, self.batch, self.seed, self.stream, self.cache = n, readers, batch, seed, stream, {}

    def perm(self, epoch):
        if epoch not in self.cache:
            order = list(range(self.n))
            rng = SplitMix64(derive_seed([self.seed, self.stream, epoch]))
            for i in range(len(order), 1, -1):
                j = rng.below(i)
                order[i - 1], order[j] = order[j], order[i - 1]
            self.cache = {epoch: order}
        return self.cache[epoch]

    def windows(self, step, reader):  # step counts from 0, as fedshard's sampler does
        first = (step * self.readers + reader) * self.batch
        return [self.perm(j // self.n)[j % self.n] for j in range(first, first + self.batch)]


# ---- the model (`small` as src/model/config.cpp; init as src/model/llama.cpp draws it) ----
class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Block(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.sdpa = sdpa
        self.attention_norm, self.ffn_norm = RMSNorm(DIM), RMSNorm(DIM)
        hd = DIM // HEADS
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * hd, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * hd, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)
        self.w1 = nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, FFN, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        hd = DIM // HEADS
        xn = self.attention_norm(x)
        q = rope(self.wq(xn).view(b, t, HEADS, hd), cos, sin).transpose(1, 2)
        k = rope(self.wk(xn).view(b, t, KV_HEADS, hd), cos, sin).transpose(1, 2)
        v = self.wv(xn).view(b, t, KV_HEADS, hd).transpose(1, 2)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        if self.sdpa:
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the explicit formulation fedshard's LibTorch 1.13 build runs (it has no sdpa)
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        h = x + self.wo(attn.transpose(1, 2).reshape(b, t, DIM))
        hn = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(hn)) * self.w3(hn))


class Llama(nn.Module):
    def __init__(self, vocab, seq, sdpa, ac):
        super().__init__()
        self.vocab, self.ac = vocab, ac
        self.tok_embeddings = nn.Embedding(vocab, DIM)
        self.layers = nn.ModuleList(Block(sdpa) for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.output = nn.Linear(DIM, vocab, bias=False)
        hd = DIM // HEADS
        inv = THETA ** (-torch.arange(0, hd, 2).double() / hd)
        ang = torch.outer(torch.arange(seq).double(), inv)
        ang = torch.cat([ang, ang], dim=-1)
        self.register_buffer("cos", ang.cos().float()[:, None, :], persistent=False)
        self.register_buffer("sin", ang.sin().float()[:, None, :], persistent=False)
        self.mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # not a buffer: Gloo cannot broadcast bool
        self.init_like_fedshard()

    @torch.no_grad()
    def init_like_fedshard(self):
        # Same distributions as fedshard (untied embeddings N(0,1), head N(0,1/dim) clamped at 3 std,
        # depth-scaled wo/w2/w3, 0.02 elsewhere, norms 1); not the same draws (different generators).
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name == "tok_embeddings.weight":
                p.normal_(0.0, 1.0)
            elif name == "output.weight":
                s = 1 / math.sqrt(DIM)
                p.normal_(0.0, s).clamp_(-3 * s, 3 * s)
            elif name.endswith(("wo.weight", "w2.weight", "w3.weight")):
                p.normal_(0.0, 0.02 / math.sqrt(2.0 * (int(name.split(".")[1]) + 1)))
            else:
                p.normal_(0.0, 0.02)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            if self.ac and self.training:  # per-block recomputation, as fedshard does for sharded units
                x = checkpoint(layer, x, self.cos, self.sin, self.mask, use_reentrant=False)
            else:
                x = layer(x, self.cos, self.sin, self.mask)
        return self.output(self.norm(x))


def lr_at(step, a):
    """fedshard's schedule (src/train/lr_schedule.h): linear warmup, cosine to min_lr_ratio*lr; step from 1."""
    warmup = a.steps // 10 if a.warmup < 0 else a.warmup
    if warmup > 0 and step <= warmup:
        return a.lr * step / warmup
    if a.steps <= warmup:
        return a.lr
    progress = min(1.0, (step - warmup) / (a.steps - warmup))
    floor = a.lr * a.min_lr_ratio
    return floor + (a.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def save_hf(model, seq, out):
    """The model as a Hugging Face Llama directory (config.json + model.safetensors, float32). This model's
    q/k rows are already in HF's rotate-half order, so the names are the only change."""
    hf = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
          "output.weight": "lm_head.weight"}
    sub = {"attention_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "wq": "self_attn.q_proj",
           "wk": "self_attn.k_proj", "wv": "self_attn.v_proj", "wo": "self_attn.o_proj", "w1": "mlp.gate_proj",
           "w2": "mlp.down_proj", "w3": "mlp.up_proj"}
    tensors = {}
    for name, p in model.named_parameters():
        if name in hf:
            key = hf[name]
        else:
            _, i, mod, leaf = name.split(".")
            key = f"model.layers.{i}.{sub[mod]}.{leaf}"
        tensors[key] = p.detach().contiguous()
    # safetensors: an 8-byte little-endian header length, the JSON header, then the raw little-endian data.
    header, offset, blobs = {}, 0, []
    for key in sorted(tensors):
        data = tensors[key].numpy().tobytes()
        header[key] = {"dtype": "F32", "shape": list(tensors[key].shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head + b"".join(blobs))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": DIM,
              "intermediate_size": FFN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "vocab_size": model.vocab, "max_position_embeddings": seq,
              "rope_theta": THETA, "rms_norm_eps": EPS, "hidden_act": "silu", "tie_word_embeddings": False,
              "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


def status_kib(field):  # VmHWM: peak RSS of this process; VmRSS: now
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


@torch.no_grad()
def evaluate(model, val, windows, batch):
    """fedshard's evaluator (src/train/evaluator.cpp): the first `windows` val windows, strided over ranks."""
    model.eval()
    p, q = dist.get_world_size(), dist.get_rank()
    total = min(windows, len(val)) if windows > 0 else len(val)
    per_rank = (total + p - 1) // p
    sums = torch.zeros(2, dtype=torch.float64)
    for b in range((per_rank + batch - 1) // batch):
        js = [(b * batch + i) * p + q for i in range(batch)]
        toks = val.batch([j if j < total else 0 for j in js])
        logits = model(toks[:, :-1]).double()
        per_tok = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), toks[:, 1:].reshape(-1), reduction="none")
        w = torch.tensor([1.0 if j < total else 0.0 for j in js], dtype=torch.float64).repeat_interleave(val.seq)
        sums += torch.stack([(per_tok * w).sum(), w.sum()])
    dist.all_reduce(sums)
    model.train()
    return (sums[0] / sums[1]).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ddp", "fsdp", "hsdp", "diloco", "localsgd"])
    ap.add_argument("--data", default="data/brown")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=-1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard-size", type=int, default=2, help="hsdp: ranks per shard group")
    ap.add_argument("--group-size", type=int, default=2, help="diloco/localsgd: ranks per replica group")
    ap.add_argument("--sync-every", type=int, default=4)
    ap.add_argument("--outer-lr", type=float, default=0.7)
    ap.add_argument("--outer-momentum", type=float, default=0.9)
    ap.add_argument("--ac", choices=["on", "off"], default="off", help="per-block activation checkpointing")
    ap.add_argument("--attention", choices=["math", "sdpa"], default="math")
    ap.add_argument("--eval-windows", type=int, default=0, help="0: no evaluation")
    ap.add_argument("--addrs", default="", help="comma list: address of each rank (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=29600)
    ap.add_argument("--lighthouse", default="", help="torchft lighthouse, http://HOST:PORT")
    ap.add_argument("--profile", default="", help="write a torch.profiler table of steps 3-5 to this file")
    ap.add_argument("--out", help="prefix: writes PREFIX.rankN.json")
    ap.add_argument("--save-init", default="",
                    help="write the seeded initial model as a Hugging Face Llama directory and exit (one process; "
                         "fedshard train --init-from DIR then starts from the same weights)")
    a = ap.parse_args()
    if a.save_init:
        torch.manual_seed(a.seed)
        save_hf(Llama(Windows(a.data, "train", a.seq).vocab, a.seq, False, False), a.seq, a.save_init)
        return
    if not a.mode or not a.out:
        ap.error("--mode and --out are required")

    rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    addrs = a.addrs.split(",") if a.addrs else ["127.0.0.1"] * world
    rss_at_start = status_kib("VmRSS")  # what importing torch (and torchft) costs before any model exists
    torch.set_num_threads(1)  # one intra-op thread per rank, as fedshard --threads 1
    torch.manual_seed(a.seed)  # identical initial model on every rank

    train = Windows(a.data, "train", a.seq)
    val = Windows(a.data, "val", a.seq)
    sampler = Sampler(len(train), world, a.batch, a.seed)
    model = Llama(train.vocab, a.seq, a.attention == "sdpa", a.ac == "on")
    manager = None

    if a.mode in ("ddp", "fsdp", "hsdp"):
        dist.init_process_group("gloo", init_method=f"tcp://{addrs[0]}:{a.port}", rank=rank, world_size=world,
                                timeout=timedelta(minutes=5))
    else:  # a torch.distributed world per replica group; torchft joins the groups through its lighthouse
        g, gr, S = rank // a.group_size, rank % a.group_size, a.group_size
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addrs[g * S], str(a.port + g)
        dist.init_process_group("gloo", init_method=f"tcp://{addrs[g * S]}:{a.port + g}", rank=gr, world_size=S,
                                timeout=timedelta(minutes=5))

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def shard(mesh):  # fedshard's units: the embedding, each block, the final norm + head (the root)
        fully_shard(model.tok_embeddings, mesh=mesh)
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    if a.mode == "ddp" or a.mode == "localsgd":
        net = nn.parallel.DistributedDataParallel(model)
    elif a.mode == "fsdp" or a.mode == "diloco":
        net = shard(init_device_mesh("cpu", (dist.get_world_size(),)))
    else:
        net = shard(init_device_mesh("cpu", (world // a.shard_size, a.shard_size),
                                     mesh_dim_names=("replicate", "shard")))
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_at(i + 1, a) / a.lr)

    ctx = None
    if a.mode in ("diloco", "localsgd"):
        from torchft.local_sgd import DiLoCo, LocalSGD
        from torchft.manager import Manager
        from torchft.process_group import ProcessGroupGloo

        manager = Manager(
            pg=ProcessGroupGloo(timeout=timedelta(minutes=2)),
            load_state_dict=lambda sd: (net.load_state_dict(sd["model"]), opt.load_state_dict(sd["opt"])),
            state_dict=lambda: {"model": net.state_dict(), "opt": opt.state_dict()},
            min_replica_size=world // a.group_size,
            use_async_quorum=False,  # DiLoCo requires it
            init_sync=False,  # every replica starts from the same seeded model
            replica_id=f"peers_{g}", rank=gr, world_size=a.group_size,
            store_addr=addrs[g * S], store_port=a.port + g, hostname=addrs[rank],
            lighthouse_addr=a.lighthouse, timeout=timedelta(minutes=2), quorum_timeout=timedelta(minutes=2))
        if a.mode == "diloco":
            outer = torch.optim.SGD(net.parameters(), lr=a.outer_lr, momentum=a.outer_momentum, nesterov=True)
            ctx = DiLoCo(manager, [net], opt, outer, sync_every=a.sync_every, pin_memory=False)
        else:
            ctx = LocalSGD(manager, net, opt, sync_every=a.sync_every)
        ctx.__enter__()

    prof = None
    times, losses = [], []
    for step in range(a.steps):
        if a.profile and rank == 0 and step == 2:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.__enter__()
        toks = train.batch(sampler.windows(step, rank))
        t0 = time.perf_counter()
        logits = net(toks[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, train.vocab), toks[:, 1:].reshape(-1))
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(net.parameters(), a.grad_clip)
        opt.step()  # torchft's hooks run the round here every sync_every steps
        sched.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if prof is not None and step == 4:
            prof.__exit__(None, None, None)
            with open(a.profile, "w") as f:
                f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
            prof = None

    val_loss = evaluate(net, val, a.eval_windows, a.batch) if a.eval_windows > 0 else None
    if ctx is not None:
        ctx.__exit__(None, None, None)
    rec = {"mode": a.mode, "rank": rank, "world": world, "step_s": times, "loss": losses,
           "vmhwm_kib": status_kib("VmHWM"), "rss_at_start_kib": rss_at_start, "val_loss": val_loss,
           "val_ppl": math.exp(val_loss) if val_loss is not None else None,
           "tokens": a.steps * world * a.batch * a.seq,
           "params": sum(p.numel() for p in model.parameters()), "torch": torch.__version__}
    with open(f"{a.out}.rank{rank}.json", "w") as f:
        json.dump(rec, f)
    if manager is not None:
        manager.shutdown(wait=False)
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one clear line for the bench; the traceback goes to the log above it
        import traceback
        traceback.print_exc()
        print(f"torch_peer: error: rank {os.environ.get('OMPI_COMM_WORLD_RANK')}: {type(e).__name__}: {e}",
              file=sys.stderr)
        sys.exit(1)
