#!/usr/bin/env python3
"""fedshard vs the PyTorch peers over several bench/peers.sh runs (one OUT directory per seed, or per variant):
the final validation perplexity of each side per run, their ratio, and the mean and spread over the runs; then,
per run, how the training losses of the two sides compare step by step (fedshard logs the mean over its first
group, so the peer's side is the mean of the same ranks' losses).

usage: seed_table.py OUT_DIR...   (each with summary.json and runs/ from `SEED=N OUT=OUT_DIR bench/peers.sh`;
the name of the directory labels its column)"""
import json
import os
import statistics
import sys

PAIRS = {"ddp": ("ddp vs DDP", 4), "fsdp": ("fsdp vs FSDP2", 4), "hsdp": ("hsdp vs FSDP2 HSDP", 4),
         "diloco": ("fl-fsdp nesterov vs torchft DiLoCo", 2), "localsgd": ("fl-ddp fedavg vs torchft LocalSGD", 2)}


def rows(out):
    return {r["pair"]: r for r in json.load(open(os.path.join(out, "summary.json")))["rows"] if r["net"] == "shm"}


def losses(out, pair, group_ranks):
    """Per step: fedshard's logged loss, and the mean over the peer's ranks of fedshard's first group."""
    fs = [j["loss"] for j in map(json.loads, open(os.path.join(out, "runs", f"shm-fedshard-{pair}", "metrics.jsonl")))
          if j["type"] == "step"]
    per_rank = [json.load(open(os.path.join(out, "runs", f"shm-peer-{pair}.rank{r}.json")))["loss"]
                for r in range(group_ranks)]
    peer = [statistics.fmean(step) for step in zip(*per_rank)]
    return fs, peer


def main():
    outs = sys.argv[1:]
    if not outs:
        sys.exit(__doc__)
    names = [os.path.basename(o.rstrip("/")) for o in outs]
    tables = [rows(o) for o in outs]
    pairs = [p for p in PAIRS if all(p in t for t in tables)]
    print("| pair | " + " | ".join(f"{n}: fedshard / peer (ratio)" for n in names) +
          " | mean fedshard | mean peer | mean ratio | ratio spread |")
    print("|---" * (len(names) + 5) + "|")
    for p in pairs:
        cells, ratios, fs_ppl, peer_ppl = [], [], [], []
        for t in tables:
            f, q = t[p]["fedshard"]["val_ppl"], t[p]["peer"]["val_ppl"]
            fs_ppl.append(f)
            peer_ppl.append(q)
            ratios.append(f / q)
            cells.append(f"{f:.3f} / {q:.3f} ({f / q:.4f})")
        print(f"| {PAIRS[p][0]} | " + " | ".join(cells) +
              f" | {statistics.fmean(fs_ppl):.3f} | {statistics.fmean(peer_ppl):.3f} | {statistics.fmean(ratios):.4f}"
              f" | {max(ratios) - min(ratios):.4f} |")
    print()
    print("Training loss, fedshard vs the peer (mean of the same ranks), per run: step 1, the largest relative "
          "difference over the steps, and the last step")
    print()
    print("| run | pair | step-1 loss fedshard / peer | max rel. diff (step) | last loss fedshard / peer |")
    print("|---|---|---|---|---|")
    for out, name in zip(outs, names):
        for p in pairs:
            fs, peer = losses(out, p, PAIRS[p][1])
            diffs = [abs(a - b) / abs(b) for a, b in zip(fs, peer)]
            worst = max(range(len(diffs)), key=diffs.__getitem__)
            print(f"| {name} | {p} | {fs[0]:.5f} / {peer[0]:.5f} | {diffs[worst]:.2e} ({worst + 1}) | "
                  f"{fs[-1]:.4f} / {peer[-1]:.4f} |")


if __name__ == "__main__":
    main()
