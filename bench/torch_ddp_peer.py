#!/usr/bin/python3
"""The peer for bench/ddp_peer.sh: the same Llama (`small` preset) and batch in PyTorch, trained with
DistributedDataParallel over Gloo on N processes (Debian's python3-torch 1.13). Prints the median step time.

Usage: /usr/bin/python3 bench/torch_ddp_peer.py --procs 4 --steps 30 [--batch 8 --seq 256]
"""
import argparse
import math
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

# fedshard's `small` preset with the byte tokenizer (src/model/config.cpp).
DIM, LAYERS, HEADS, KV_HEADS, VOCAB, FFN, THETA, EPS = 256, 4, 8, 4, 258, 704, 10000.0, 1e-5


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        hd = DIM // HEADS
        self.attention_norm, self.ffn_norm = RMSNorm(DIM), RMSNorm(DIM)
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
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        h = x + self.wo(attn.transpose(1, 2).reshape(b, t, DIM))
        hn = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(hn)) * self.w3(hn))


class Llama(nn.Module):
    def __init__(self, seq):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)
        hd = DIM // HEADS
        inv = THETA ** (-torch.arange(0, hd, 2).double() / hd)
        ang = torch.outer(torch.arange(seq).double(), inv)
        ang = torch.cat([ang, ang], dim=-1)
        self.register_buffer("cos", ang.cos().float()[:, None, :], persistent=False)
        self.register_buffer("sin", ang.sin().float()[:, None, :], persistent=False)
        self.mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # not a buffer: Gloo cannot broadcast bool

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        return self.output(self.norm(x))


def worker(rank, args):
    torch.set_num_threads(args.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.procs)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Llama(args.seq))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)
    times = []
    for _ in range(args.steps):
        tokens = torch.randint(0, VOCAB, (args.batch, args.seq + 1), generator=gen)
        t0 = time.perf_counter()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times[2:])])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"torch_ddp procs={args.procs} params={params} median_step_s={t.item():.4f}")
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--port", type=int, default=29517)
    args = p.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.procs)


if __name__ == "__main__":
    main()
