#!/usr/bin/env python3
"""Tables of bench/paper_regime.sh from its run directories and `fedshard plan --paper --json`.

usage: paper_table.py PLAN.json MAIN_RUN... -- SWEEP_RUN...
Perplexity at equal predicted time: each run's global-model evaluations placed at step x the plan's step time
for its strategy (same S and H), log-perplexity interpolated linearly at the earliest end among the runs."""
import json
import math
import sys


def load(run):
    cfg = json.load(open(f"{run}/config.json"))
    evals, summary = [], None
    for line in open(f"{run}/metrics.jsonl"):
        j = json.loads(line)
        if j["type"] == "eval" and j["model"] == "global":
            evals.append((j["step"], j["tokens"], j["val_ppl"]))
        elif j["type"] == "summary":
            summary = j
    r = cfg["resolved"]
    fl = r["strategy"].startswith("fl-")
    batch = cfg["data"]["batch_size"] * cfg["data"]["seq_len"] * cfg["train"]["grad_accum"]
    return {"run": run.rstrip("/").split("/")[-1], "strategy": r["strategy"], "world": r["world"],
            "groups": r["groups"], "S": r["group_size"], "H": r["shard_size"],
            "global_batch": batch * (r["group_size"] if fl else r["world"]), "evals": evals, "summary": summary}


def plan_step_s(plan, run):
    for p in plan["plans"]:
        if p["strategy"] != run["strategy"]:
            continue
        if run["strategy"].startswith("fl-") and p["group_sizes"][0] != run["S"]:
            continue
        if "hsdp" in run["strategy"] and p["shard_sizes"][0] != run["H"]:
            continue
        return p["step_s"]
    sys.exit(f"plan has no entry for {run['run']}")


def ppl_at(evals, step_s, t):
    pts = [(s * step_s, math.log(p)) for s, _, p in evals]
    if not pts or t < pts[0][0] - 1e-12:
        return None
    for (t0, l0), (t1, l1) in zip(pts, pts[1:]):
        if t0 <= t <= t1:
            return math.exp(l0 + (l1 - l0) * (t - t0) / (t1 - t0))
    return math.exp(pts[-1][1])


def layout(r):
    h = f", H={r['H']}" if "hsdp" in r["strategy"] else ""
    return f"{r['groups']}x{r['S']}{h} (W={r['world']})"


def main():
    args = sys.argv[1:]
    cut = args.index("--")
    plan = json.load(open(args[0]))
    runs = [load(r) for r in args[1:cut]]
    sweep = [load(r) for r in args[cut + 1:]]
    for r in runs:
        r["step_s"] = plan_step_s(plan, r)
        r["hours"] = r["evals"][-1][0] * r["step_s"] / 3600
    t_eq = min(r["hours"] for r in runs) * 3600
    fsdp = next(r for r in runs if r["strategy"] == "fsdp")
    fsdp_eq = ppl_at(fsdp["evals"], fsdp["step_s"], t_eq)
    c = plan["cluster"]
    print(f"### W = {runs[0]['world']}: equal tokens, and equal predicted time on {c['name']} "
          f"({c['nodes'] * c['ranks_per_node']} ranks)\n")
    print("| strategy | virtual layout | global batch / optimizer step (tokens) | steps | tokens | final val ppl "
          "(equal tokens) | fsdp ppl / this | predicted step s | predicted hours | val ppl at "
          f"{t_eq / 3600:.3f} h (predicted) | fsdp ppl / this | tokens/s of this box |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        step, tokens, ppl = r["evals"][-1]
        eq = ppl_at(r["evals"], r["step_s"], t_eq)
        print(f"| {r['strategy']} | {layout(r)} | {r['global_batch']:,} | {step} | {tokens:,} | {ppl:.3f} | "
              f"{fsdp['evals'][-1][2] / ppl:.3f} | {r['step_s']:.3f} | {r['hours']:.3f} | "
              f"{'-' if eq is None else f'{eq:.3f}'} | "
              f"{'-' if eq is None or fsdp_eq is None else f'{fsdp_eq / eq:.3f}'} | "
              f"{r['summary']['tok_per_s']:.0f} |")
    print("\n### World-size sweep at fixed group size 4, equal tokens\n")
    print("| W | fsdp global batch | fsdp steps | fsdp val ppl | fl-fsdp layout | fl-fsdp global batch | "
          "fl-fsdp steps | fl-fsdp val ppl | fsdp ppl / fl-fsdp ppl |")
    print("|---|---|---|---|---|---|---|---|---|")
    for w in sorted({r["world"] for r in sweep}):
        f = next(r for r in sweep if r["world"] == w and r["strategy"] == "fsdp")
        g = next(r for r in sweep if r["world"] == w and r["strategy"] == "fl-fsdp")
        print(f"| {w} | {f['global_batch']:,} | {f['evals'][-1][0]} | {f['evals'][-1][2]:.3f} | {layout(g)} | "
              f"{g['global_batch']:,} | {g['evals'][-1][0]} | {g['evals'][-1][2]:.3f} | "
              f"{f['evals'][-1][2] / g['evals'][-1][2]:.3f} |")


main()
