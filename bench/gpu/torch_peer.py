"""The PyTorch peer of the GPU benchmark: the same Llama-3 model as fedshard (RMSNorm, grouped-query
attention through scaled_dot_product_attention, rotate-half RoPE, SwiGLU, untied head), float32 master
weights, bf16 autocast, fused AdamW, one process on one GPU, eager or torch.compile. Prints one JSON line.
RoPE leaves out Llama 3.1's frequency scaling, which changes the tables' values, not the work.

python3 bench/gpu/torch_peer.py --shape 1b --batch 4 [--compile] [--float8] [--steps 15] [--device cuda]
                                [--profile-steps N --profile-out FILE [--profile-trace TRACE.json]]
--float8 converts the blocks' linear layers (not the output head, as torchtitan leaves it out) with torchao's
float8 training, the "tensorwise" recipe (torchao must be importable: device-check.sh installs the carried
wheel).
--profile-steps N runs N more steps after the timed ones under torch.profiler and writes its table of ops by
self time (on the GPU when there is one) to FILE, and its Chrome trace to TRACE.json, for comparison with
fedshard's train.profile_steps (bench/gpu/trace_summary.py reads both traces).
Shapes: 1b = Llama-3.2-1B with an untied head (1.50 B parameters), 8b4 = Llama-3.1-8B cut to 4 layers, 8b = whole,
tiny = a small shape for a dry run on CPU.
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F

SHAPES = {  # dim, layers, heads, kv heads, ffn hidden, vocab, rope theta
    "1b": (2048, 16, 32, 8, 8192, 128256, 500000.0),
    "8b4": (4096, 4, 32, 8, 14336, 128256, 500000.0),
    "8b": (4096, 32, 32, 8, 14336, 128256, 500000.0),
    "tiny": (256, 2, 8, 4, 704, 1024, 10000.0),  # fedshard's `small` cut to 2 layers
}


class Block(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads, hidden):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.attention_norm = torch.nn.RMSNorm(dim, eps=1e-5)
        self.wq = torch.nn.Linear(dim, dim, bias=False)
        self.wk = torch.nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.wv = torch.nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.wo = torch.nn.Linear(dim, dim, bias=False)
        self.ffn_norm = torch.nn.RMSNorm(dim, eps=1e-5)
        self.w1 = torch.nn.Linear(dim, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, dim, bias=False)
        self.w3 = torch.nn.Linear(dim, hidden, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        xn = self.attention_norm(x)
        q = self.wq(xn).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.wk(xn).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.wv(xn).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        h = x + self.wo(a.transpose(1, 2).reshape(b, t, -1))
        hn = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(hn)) * self.w3(hn))


def rope(x, cos, sin):
    x1, x2 = x.float().chunk(2, dim=-1)
    return (x.float() * cos + torch.cat((-x2, x1), dim=-1) * sin).type_as(x)


class Llama(torch.nn.Module):
    def __init__(self, dim, layers, heads, kv_heads, hidden, vocab, theta, seq):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(Block(dim, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = torch.nn.RMSNorm(dim, eps=1e-5)
        self.output = torch.nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return self.output(self.norm(x))


def forward_flops_per_token(dim, layers, heads, kv_heads, hidden, vocab, seq):
    # fedshard's ModelConfig::forward_flops_per_token: 2 per matmul weight (head included) + 4*seq*dim per layer.
    kv = kv_heads * (dim // heads)
    block_matmuls = 2 * dim * dim + 2 * dim * kv + 3 * dim * hidden
    return 2.0 * (layers * block_matmuls + vocab * dim) + 4.0 * layers * seq * dim


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--float8", action="store_true", help="torchao float8 training (tensorwise) for the blocks' linears")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--peak-flops", type=float, default=989e12, help="bf16 dense peak for MFU")
    ap.add_argument("--profile-steps", type=int, default=0, help="steps profiled after the timed ones")
    ap.add_argument("--profile-out", help="file for the profiler's table")
    ap.add_argument("--profile-trace", help="file for the profiler's Chrome trace")
    a = ap.parse_args()
    dim, layers, heads, kv, hidden, vocab, theta = SHAPES[a.shape]
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = Llama(dim, layers, heads, kv, hidden, vocab, theta, a.seq).to(dev)
    params = sum(p.numel() for p in model.parameters())
    if a.float8:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"),
                                   module_filter_fn=lambda mod, fqn: fqn != "output")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=dev.type == "cuda")
    step_fn = model
    if a.compile:
        step_fn = torch.compile(model)
    tokens = torch.randint(0, vocab, (a.steps, a.batch, a.seq + 1), device=dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    def step(s):
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = step_fn(tokens[s % a.steps, :, :-1])
        loss = F.cross_entropy(logits.float().view(-1, vocab), tokens[s % a.steps, :, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()  # one host sync per step, as fedshard's log line

    times = []
    for s in range(a.steps):
        t0 = time.perf_counter()
        loss_value = step(s)
        times.append(time.perf_counter() - t0)
    timed = times[a.warmup:]
    tok_per_s = a.batch * a.seq * len(timed) / sum(timed)
    flops = 3.0 * forward_flops_per_token(dim, layers, heads, kv, hidden, vocab, a.seq)
    out = {
        "peer": ("pytorch-compile" if a.compile else "pytorch-eager") + ("-float8" if a.float8 else ""),
        "torch": torch.__version__, "shape": a.shape, "params": params, "batch": a.batch, "seq": a.seq,
        "tok_per_s": tok_per_s, "mfu": flops * tok_per_s / a.peak_flops, "last_loss": loss_value,
        "step_s": sum(timed) / len(timed),
        "peak_memory_gb": torch.cuda.max_memory_allocated(dev) / 1e9 if dev.type == "cuda" else None,
    }
    assert math.isfinite(loss_value)
    print(json.dumps(out), flush=True)
    if a.profile_steps > 0:
        profile(a, step, dev)


def profile(a, step, dev):
    """a.profile_steps more steps under torch.profiler, its table into a.profile_out. A profiler that cannot
    run here (no CUPTI) costs the table, not the measurement printed above."""
    try:
        activities = [torch.profiler.ProfilerActivity.CPU] + (
            [torch.profiler.ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        t0 = time.perf_counter()
        with torch.profiler.profile(activities=activities) as prof:
            for s in range(a.profile_steps):
                step(s)
        wall_ms = (time.perf_counter() - t0) * 1e3
        if a.profile_trace:
            prof.export_chrome_trace(a.profile_trace)
        sort = "self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total"
        text = (f"# {'pytorch-compile' if a.compile else 'pytorch-eager'} {a.shape}: {a.profile_steps} profiled "
                f"steps, {wall_ms:.3f} ms of wall time\n" + prof.key_averages().table(sort_by=sort, row_limit=25))
    except Exception as e:  # noqa: BLE001 -- any profiler failure is reported in the table's place
        text = f"# profiling failed: {type(e).__name__}: {e}"
    with open(a.profile_out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
