#!/usr/bin/env python3
"""Final validation perplexity of runs that differ in strategy (or label) and seed: one row per arm with each
seed's value, the mean, the spread (max - min) and the ratio of fsdp's mean to the arm's over the seeds both
have (above 1: the arm is better).

usage: seed_table.py RUN_DIR...   (each with metrics.jsonl and config.json; the arm is the run directory's name
without its trailing -sSEED)"""
import json
import re
import statistics
import sys


def final_ppl(run):
    ppl = None
    for line in open(f"{run}/metrics.jsonl"):
        j = json.loads(line)
        if j["type"] == "eval" and j["model"] == "global":
            ppl = (j["step"], j["val_ppl"])
    if ppl is None:
        sys.exit(f"{run}: no evaluation of the global model in metrics.jsonl")
    return ppl


def main():
    arms = {}
    for run in sys.argv[1:]:
        name = run.rstrip("/").split("/")[-1]
        m = re.fullmatch(r"(.*)-s(\d+)", name)
        if not m:
            sys.exit(f"{run}: the run directory's name must end in -sSEED")
        cfg = json.load(open(f"{run}/config.json"))["resolved"]
        step, ppl = final_ppl(run)
        arm = arms.setdefault(m.group(1), {"layout": f"{cfg['groups']}x{cfg['group_size']}, H={cfg['shard_size']} "
                                                     f"(W={cfg['world']})", "seeds": {}, "step": step,
                                                     "strategy": cfg["strategy"]})
        arm["seeds"][int(m.group(2))] = ppl
    seeds = sorted({s for a in arms.values() for s in a["seeds"]})
    base = next((a for a in arms.values() if a["strategy"] == "fsdp"), None)
    print("| arm | layout | steps | " + " | ".join(f"seed {s}" for s in seeds) +
          " | mean | spread (max - min) | fsdp mean / this |")
    print("|---|---|---|" + "---|" * len(seeds) + "---|---|---|")
    for name, a in arms.items():
        vals = list(a["seeds"].values())
        mean = statistics.mean(vals)
        cells = " | ".join(f"{a['seeds'][s]:.3f}" if s in a["seeds"] else "-" for s in seeds)
        common = sorted(set(a["seeds"]) & set(base["seeds"])) if base else []
        ratio = "-"
        if common:
            ratio = f"{statistics.mean(base['seeds'][s] for s in common) / statistics.mean(a['seeds'][s] for s in common):.3f}"
        print(f"| {name} | {a['layout']} | {a['step']} | {cells} | {mean:.3f} | {max(vals) - min(vals):.3f} | {ratio} |")


if __name__ == "__main__":
    main()
