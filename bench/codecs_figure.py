#!/usr/bin/env python3
"""Validation perplexity against cumulative inter-group bytes (rank 0's, counted by the Ledger at the collectives the
rounds really ran), one line per run of bench/codecs.sh (gnuplot, as bench/multisite_table.py): one colour per arm,
one dash pattern per seed.
Usage: bench/codecs_figure.py OUT.png RUN_DIR..."""
import json
import os
import subprocess
import sys
import tempfile


def series(run):
    """(cumulative bytes, ppl) at each evaluation of the global model."""
    sent, by_step, out = 0.0, {}, []
    lines = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    for l in lines:
        if l.get("type") == "step":
            sent += l["bytes"]["inter_group"]
            by_step[l["step"]] = sent
    for l in lines:
        if l.get("type") == "eval" and l.get("model") == "global" and l["step"] in by_step:
            out.append((by_step[l["step"]], l["val_ppl"]))
    return out


def main():
    path, runs = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as d:
        plots, ppl, arms = [], [], {}
        for run in runs:  # codec-ARM-sSEED-CODEC
            _, _, seed, codec = os.path.basename(run.rstrip("/")).split("-", 3)
            arms.setdefault(codec, []).append((int(seed[1:]), run))
        for a, (codec, seeded) in enumerate(arms.items()):
            for k, (seed, run) in enumerate(sorted(seeded)):
                f = os.path.join(d, f"{a}-{seed}.dat")
                points = series(run)
                ppl += [p for _, p in points]
                with open(f, "w") as dat:
                    dat.writelines(f"{b} {p}\n" for b, p in points)
                seeds = ", ".join(str(s) for s, _ in sorted(seeded))
                title = f"title '{codec.replace('-', ', ').replace('_', ' ')} (seed{'s' if len(seeded) > 1 else ''} {seeds})'" \
                    if k == 0 else "notitle"
                plots.append(f"'{f}' using 1:2 with linespoints lc {a + 1} dt {seed + 1} pt {a + 4} {title}")
        script = os.path.join(d, "plot.gp")
        with open(script, "w") as g:
            g.write(f"set terminal pngcairo size 820,500\nset output '{path}'\n"
                    "set title 'tuned 4-group arm, 64 rounds: perplexity against bytes between groups'\n"
                    "set xlabel 'cumulative inter-group bytes sent by rank 0, measured (log)'\nset logscale x\n"
                    "set format x '%.0e'\nset ylabel 'validation perplexity (log)'\nset logscale y\n"
                    f"set key top right font ',9'\nset yrange [{min(ppl) * 0.95}:{min(max(ppl), 40) * 1.05}]\n"
                    "plot " + ", ".join(plots) + "\n")
        subprocess.run(["gnuplot", script], check=True)
    print(f"figure: {path}")


if __name__ == "__main__":
    main()
