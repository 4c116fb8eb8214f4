"""Tables and figure of bench/multisite.sh: per arm the measured step time against the plan's, and the measured
training seconds to each target perplexity (the first evaluation at or below it) with the plan's prediction of
the same (that step count at the plan's step time) beside it.
Usage: multisite_table.py MBIT ARM=RUN_DIR..."""
import json
import os
import subprocess
import sys
import tempfile


def load(run):
    lines = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    steps = [l for l in lines if l["type"] == "step"]
    evals = [l for l in lines if l["type"] == "eval"]
    plans = {n: json.load(open(os.path.join(run, f"plan-{n}.json")))["plans"][0] for n in ("per-rank", "shared", "floor")}
    clock, t = {}, 0.0
    for s in steps:
        t += s["time_s"]["total"]
        clock[s["step"]] = t
    return {"steps": steps, "evals": evals, "plan": plans["floor"], "plans": plans, "clock": clock}


def main():
    mbit = sys.argv[1]
    arms = [a.split("=", 1) for a in sys.argv[2:]]
    runs = {arm: load(path) for arm, path in arms}
    print(f"### Step time: measured and predicted ({mbit} Mbit/s between sites)\n")
    print("| arm | steps | inter-site B per step (rank 0) | measured s/step | predicted: per-rank links (before) | "
          "shared uplink | shared uplink + collective floor (after) |")
    print("|---|---|---|---|---|---|---|")
    for arm, r in runs.items():
        n = len(r["steps"])
        measured = r["clock"][n] / n
        sent = sum(s["bytes"]["inter_node"] + s["bytes"]["inter_group"] for s in r["steps"]) / n
        cells = [f"{r['plans'][k]['step_s']:.3f} ({measured / r['plans'][k]['step_s']:.2f})"
                 for k in ("per-rank", "shared", "floor")]
        print(f"| {arm} | {n} | {sent:,.0f} | {measured:.3f} | " + " | ".join(cells) + " |")
    print("\n(predicted s/step, measured/predicted in brackets)")
    final = {arm: r["evals"][-1]["val_ppl"] for arm, r in runs.items()}
    worst = max(final.values())
    targets = [worst * f for f in (1.5, 1.25, 1.1, 1.0)]
    print(f"\n### Training seconds to each target validation perplexity (measured; the plan's, after)\n")
    print("| arm | final ppl | " + " | ".join(f"ppl {t:.2f}" for t in targets) + " |")
    print("|---|---|" + "---|" * len(targets))
    for arm, r in runs.items():
        cells = []
        for t in targets:
            hit = next((e for e in r["evals"] if e["val_ppl"] <= t), None)
            if hit is None:
                cells.append("–")
                continue
            measured = r["clock"][hit["step"]]
            predicted = hit["step"] * r["plan"]["step_s"]
            cells.append(f"{measured:.0f} s ({predicted:.0f} s)")
        print(f"| {arm} | {final[arm]:.3f} | " + " | ".join(cells) + " |")
    base = runs.get("fsdp")
    if base:
        print("\nfsdp's measured time / each arm's, at each target:\n")
        for arm, r in runs.items():
            ratios = []
            for t in targets:
                a = next((e for e in r["evals"] if e["val_ppl"] <= t), None)
                b = next((e for e in base["evals"] if e["val_ppl"] <= t), None)
                ratios.append(f"{base['clock'][b['step']] / r['clock'][a['step']]:.2f}x" if a and b else "–")
            print(f"- {arm}: " + ", ".join(ratios))
    figure(runs, mbit, os.path.dirname(arms[0][1]))


def figure(runs, mbit, out):
    """Perplexity against measured training seconds, one line per arm (gnuplot, as bench/time_to_quality.py)."""
    path = os.path.join(out, f"ppl_vs_seconds_{mbit}mbit.png")
    with tempfile.TemporaryDirectory() as d:
        lines = []
        for i, (arm, r) in enumerate(runs.items()):
            f = os.path.join(d, f"{i}.dat")
            with open(f, "w") as dat:
                for e in r["evals"]:
                    dat.write(f"{r['clock'][e['step']]} {e['val_ppl']}\n")
            lines.append(f"'{f}' using 1:2 with linespoints title '{arm}'")
        ppl = [e["val_ppl"] for r in runs.values() for e in r["evals"]]
        script = os.path.join(d, "plot.gp")
        with open(script, "w") as g:
            g.write(f"set terminal pngcairo size 720,460\nset output '{path}'\n"
                    f"set title '4 sites x 2 ranks, {mbit} Mbit/s between sites (netns + tc)'\n"
                    "set xlabel 'training seconds, measured (log)'\nset logscale x\nset format x '%g'\n"
                    "set ylabel 'validation perplexity (log)'\nset logscale y\nset key top right\n"
                    f"set yrange [{min(ppl) * 0.95}:{max(ppl) * 1.05}]\n"
                    "plot " + ", ".join(lines) + "\n")
        subprocess.run(["gnuplot", script], check=True)
    print(f"\nfigure: {path}")


if __name__ == "__main__":
    main()
