#!/usr/bin/python3
"""Prints a Markdown table of fedshard run directories: median step time and tokens/s (steps >= 3, after
warm-up), bytes sent per rank per step by tier, peak RSS per rank, final validation perplexity.

Usage: bench/summarize.py RUN_DIR...
"""
import json
import statistics
import sys


def load(run):
    steps, evals, summary = [], [], None
    with open(f"{run}/metrics.jsonl") as f:
        for line in f:
            j = json.loads(line)
            if j["type"] == "step":
                steps.append(j)
            elif j["type"] == "eval":
                evals.append(j)
            elif j["type"] == "summary":
                summary = j
    return steps, evals, summary


def main():
    print("| run | strategy | step s (median) | tok/s | node B/step | inter-node B/step | inter-group B/step "
          "| peak RSS MiB per rank | final val ppl |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in sys.argv[1:]:
        steps, evals, s = load(run)
        timed = [x for x in steps if x["step"] >= 3] or steps
        step_s = statistics.median(x["time_s"]["total"] for x in timed)
        tok = statistics.median(x["tok_per_s"] for x in timed)
        b = {k: statistics.median(x["bytes"][k] for x in timed) for k in ("node", "inter_node", "inter_group")}
        rss = "/".join(f"{r:.0f}" for r in s["peak_rss_mb"])
        ppl = evals[-1]["val_ppl"] if evals else float("nan")
        print(f"| {run} | {s['strategy']} | {step_s:.3f} | {tok:.0f} | {b['node']:.0f} | {b['inter_node']:.0f} "
              f"| {b['inter_group']:.0f} | {rss} | {ppl:.3f} |")


if __name__ == "__main__":
    main()
