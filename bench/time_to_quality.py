#!/usr/bin/env python3
"""Predicted wall time to reach target validation perplexities, per strategy and cluster (issue 29).

Every run's global-model evaluations are placed at step x the step time `fedshard plan --json` predicts for
the run's strategy (same S and H) on each cluster; the time at which a run first reaches a target comes from
log-perplexity interpolated linearly between evaluations. Runs of one arm (directory name without -sSEED)
are seeds: the table gives the mean time over seeds, the spread (max - min) and fsdp's mean / the arm's.

usage: time_to_quality.py --cluster NAME=PLAN.json [--cluster ...] [--targets P1,P2,...] [--figure OUT.png]
                          RUN_DIR...
Default targets: the highest final perplexity of any run (every run reaches it) and 1.1x, 1.25x, 1.5x it."""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile


def load(run):
    cfg = json.load(open(f"{run}/config.json"))["resolved"]
    evals = []
    for line in open(f"{run}/metrics.jsonl"):
        j = json.loads(line)
        if j["type"] == "eval" and j["model"] == "global":
            evals.append((j["step"], j["val_ppl"]))
    name = run.rstrip("/").split("/")[-1]
    m = re.fullmatch(r"(.*)-s(\d+)", name)
    if not m or not evals:
        sys.exit(f"{run}: needs a name ending in -sSEED and evaluations of the global model")
    return {"arm": m.group(1), "seed": int(m.group(2)), "strategy": cfg["strategy"], "S": cfg["group_size"],
            "H": cfg["shard_size"], "evals": evals}


def step_seconds(plan, run):
    for p in plan["plans"]:
        if p["strategy"] != run["strategy"]:
            continue
        if run["strategy"].startswith("fl-") and p["group_sizes"][0] != run["S"]:
            continue
        if "hsdp" in run["strategy"] and p["shard_sizes"][0] != run["H"]:
            continue
        return p["step_s"]
    sys.exit(f"plan of {plan['cluster']['name']} has no entry for {run['strategy']} S={run['S']} H={run['H']}")


def time_to(evals, step_s, target):
    """Seconds until the run first reaches `target`, or None if it never does."""
    prev = None
    for step, ppl in evals:
        if ppl <= target:
            if prev is None:
                return step * step_s
            (s0, p0), l1 = prev, math.log(ppl)
            f = (math.log(p0) - math.log(target)) / (math.log(p0) - l1)
            return (s0 + f * (step - s0)) * step_s
        prev = (step, ppl)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", action="append", required=True, help="NAME=PLAN.json")
    ap.add_argument("--targets", help="comma-separated validation perplexities")
    ap.add_argument("--figure", help="PNG: perplexity vs predicted hours, one panel per cluster")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    runs = [load(r) for r in a.runs]
    clusters = []
    for c in a.cluster:
        name, path = c.split("=", 1)
        clusters.append((name, json.load(open(path))))
    arms = list(dict.fromkeys(r["arm"] for r in runs))
    if a.targets:
        targets = [float(t) for t in a.targets.split(",")]
    else:
        worst = max(r["evals"][-1][1] for r in runs)
        targets = [math.ceil(worst * f * 100) / 100 for f in (1.5, 1.25, 1.1, 1.0)]
    base = next((r["arm"] for r in runs if r["strategy"] == "fsdp"), None)
    for name, plan in clusters:
        c = plan["cluster"]
        print(f"\n### {name}: {c['nodes']} nodes x {c['ranks_per_node']} ranks; predicted hours to reach each "
              f"validation perplexity (mean over seeds, spread max - min, fsdp / this)\n")
        print("| arm | step s | " + " | ".join(f"ppl {t:g}" for t in targets) + " |")
        print("|---|---|" + "---|" * len(targets))
        step_s = {arm: step_seconds(plan, next(r for r in runs if r["arm"] == arm)) for arm in arms}
        times = {(arm, t): [time_to(r["evals"], step_s[arm], t) for r in runs if r["arm"] == arm]
                 for arm in arms for t in targets}
        mean = {k: None if None in v else statistics.mean(v) for k, v in times.items()}
        for arm in arms:
            cells = []
            for t in targets:
                ts, m = times[(arm, t)], mean[(arm, t)]
                if m is None:
                    cells.append(f"not reached by {ts.count(None)} of {len(ts)}")
                    continue
                ratio = f", {mean[(base, t)] / m:.2f}x" if base and mean[(base, t)] else ""
                cells.append(f"{m / 3600:.3f} h (spread {(max(ts) - min(ts)) / 3600:.3f}{ratio})")
            print(f"| {arm} | {step_s[arm]:.2f} | " + " | ".join(cells) + " |")
    if a.figure:
        figure(a.figure, clusters, runs, arms)


def figure(path, clusters, runs, arms):
    with tempfile.TemporaryDirectory() as d:
        plots = []
        for ci, (name, plan) in enumerate(clusters):
            lines = []
            for arm in arms:
                rs = [r for r in runs if r["arm"] == arm]
                st = step_seconds(plan, rs[0])
                steps = [s for s, _ in rs[0]["evals"]]
                f = os.path.join(d, f"{ci}-{arm}.dat")
                with open(f, "w") as out:
                    for i, s in enumerate(steps):
                        ppl = math.exp(statistics.mean(math.log(r["evals"][i][1]) for r in rs))
                        out.write(f"{s * st / 3600} {ppl}\n")
                lines.append(f"'{f}' using 1:2 with linespoints title '{arm}'")
            plots.append(f"set title '{name}'\nplot " + ", ".join(lines))
        script = os.path.join(d, "plot.gp")
        with open(script, "w") as g:
            g.write(f"set terminal pngcairo size {520 * len(clusters)},420\nset output '{path}'\n"
                    f"set multiplot layout 1,{len(clusters)}\n"
                    # log time: a constant speed-up is a constant shift, and the 4-site panel's 30x fits
                    "set xlabel 'predicted hours (log)'\nset logscale x\nset format x '%g'\n"
                    "set ylabel 'validation perplexity (geometric mean over seeds)'\nset logscale y\nset key top right\n"
                    + "\n".join(plots) + "\nunset multiplot\n")
        subprocess.run(["gnuplot", script], check=True)


if __name__ == "__main__":
    main()
