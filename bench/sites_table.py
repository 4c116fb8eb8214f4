"""Tables of bench/sites.sh.
goodput OUT: each site's uplink goodput per round as the round server's shards measured it (STATE/rounds.jsonl:
  the site's payload bytes summed over the shards, over the span from its first byte at any shard to its last),
  against the shaped rate; then the shards' CPU seconds and peak memory per site and round for M = 1, 2, 4.
quality OUT: seconds to each of docs/results.md §8.2's target perplexities (site 0's training clock: its step lines'
  time_s.total summed), the plan's prediction beside each, and the one-job multi-site run of §8.2
  (docs/results/multisite) under the same rate.
Usage: sites_table.py goodput|quality OUT"""
import glob
import json
import os
import re
import statistics
import sys

MULTISITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "results", "multisite")


def rounds(run):
    """Per shard, its round log lines."""
    out = {}
    for path in sorted(glob.glob(os.path.join(run, "server", "s*", "rounds.jsonl"))):
        out[os.path.basename(os.path.dirname(path))] = [json.loads(l) for l in open(path)]
    return out


def arrivals(run):
    """{(round, site): (bytes, first_s, last_s)} over every shard, rounds after round 0 (the initial model)."""
    merged = {}
    for lines in rounds(run).values():
        for j in lines:
            if j["round"] < 1:
                continue
            for site, a in j["arrivals"].items():
                b, f, l = merged.get((j["round"], site), (0, a["first_s"], a["last_s"]))
                merged[(j["round"], site)] = (b + a["bytes"], min(f, a["first_s"]), max(l, a["last_s"]))
    return merged


def goodput(out):
    runs = sorted(glob.glob(os.path.join(out, "goodput-*mbit-*ms-m*")),
                  key=lambda p: tuple(int(x) for x in re.findall(r"(\d+)mbit-(\d+)ms-m(\d+)", p)[0]))
    print("### Uplink goodput of a site's lane, TLS, measured at the round server\n")
    print("| link | RTT (TCP connect) | streams per rank (M) | bytes per site and round | goodput median (min, max) "
          "| of the link | the plan's upload s | measured upload s (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for run in runs:
        mbit, delay, m = (int(x) for x in re.findall(r"(\d+)mbit-(\d+)ms-m(\d+)", run)[0])
        rtt = open(os.path.join(run, "rtt_ms")).read().strip()
        a = arrivals(run)
        rates = [b * 8 / (l - f) / 1e6 for b, f, l in a.values() if l > f]
        spans = [l - f for b, f, l in a.values()]
        size = statistics.median(b for b, f, l in a.values())
        plan = json.load(open(os.path.join(run, "plan.json")))["plans"][0]["sites"][0]
        med = statistics.median(rates)
        print(f"| {mbit} Mbit/s, {delay} ms one way | {rtt} ms | {m} | {size / 1e6:.2f} MB | {med:.2f} "
              f"({min(rates):.2f}, {max(rates):.2f}) Mbit/s | {100 * med / mbit:.0f}% | {plan['upload_s']:.2f} | "
              f"{statistics.median(spans):.2f} |")
    print("\n### The round server's cost, per site and round\n")
    print("| shards (M) | rounds | CPU s per site and round (all shards) | peak memory over the start, all shards "
          "| per site | the plan's memory, all shards |")
    print("|---|---|---|---|---|---|")
    first = re.findall(r"goodput-(\d+mbit-\d+ms)-m\d+", runs[0])[0] if runs else None
    for run in runs:
        if f"goodput-{first}-m" not in run:
            continue
        m = int(re.findall(r"-m(\d+)$", run)[0])
        cpu, mem, n_rounds, n_sites = 0.0, 0.0, 0, 0
        for shard, lines in rounds(run).items():
            after = [j for j in lines if j["round"] >= 1]
            zero = [j for j in lines if j["round"] == 0]
            cpu += after[-1]["cpu_s"] - (zero[-1]["cpu_s"] if zero else 0.0)
            base = float(open(os.path.join(run, "server", shard + ".base_rss")).read())
            mem += after[-1]["max_rss_bytes"] - base
            n_rounds = len(after)
            n_sites = len(after[-1]["participants"])
        plan = json.load(open(os.path.join(run, "plan.json")))["plans"][0]
        print(f"| {m} | {n_rounds} | {cpu / n_rounds / n_sites:.3f} | {mem / 1e6:.0f} MB | {mem / n_sites / 1e6:.0f} MB "
              f"| {m * plan['server_memory_bytes_per_shard'] / 1e6:.0f} MB |")


def load(metrics):
    lines = [json.loads(l) for l in open(metrics)]
    clock, t = {}, 0.0
    for s in (l for l in lines if l["type"] == "step"):
        t += s["time_s"]["total"]
        clock[s["step"]] = t
    return {"evals": [l for l in lines if l["type"] == "eval"], "clock": clock}


def first_at(r, target):
    return next((e for e in r["evals"] if e["val_ppl"] <= target), None)


def quality(out):
    # §8.2's targets: the worst final perplexity of its arms at 20 Mbit/s, x1.5, x1.25, x1.1, x1.0.
    finals = [load(os.path.join(d, "metrics.jsonl"))["evals"][-1]["val_ppl"]
              for d in glob.glob(os.path.join(MULTISITE, "multisite-tiny-*-20mbit-s0")) if "calibration" not in d]
    worst = max(finals)
    targets = [worst * f for f in (1.5, 1.25, 1.1, 1.0)]
    print("### Seconds to each target perplexity: fl-fsdp as 4 sites through the round server, and in one job\n")
    print("| rounds | link | run | final ppl | " + " | ".join(f"ppl {t:.2f}" for t in targets) + " | sites / one job |")
    print("|---|---|---|---|" + "---|" * len(targets) + "---|")
    for run in sorted(glob.glob(os.path.join(out, "quality-*"))):
        codec, mbit, delay = re.findall(r"quality-(\w+)-(\d+)mbit-(\d+)ms", run)[0]
        r = load(os.path.join(run, "site-0", "metrics.jsonl"))
        plan = json.load(open(os.path.join(run, "plan.json")))["plans"][0]["sites"][0]["step_s"]
        arm = "fl-fsdp" if codec == "none" else f"fl-fsdp-{codec}"
        one = os.path.join(MULTISITE, f"multisite-tiny-{arm}-{mbit}mbit-s0", "metrics.jsonl")
        job = load(one) if os.path.exists(one) else None
        cells, job_cells, ratios = [], [], []
        for t in targets:
            hit = first_at(r, t)
            cells.append(f"{r['clock'][hit['step']]:.0f} s ({hit['step'] * plan:.0f} s)" if hit else "–")
            j = first_at(job, t) if job else None
            job_cells.append(f"{job['clock'][j['step']]:.0f} s" if j else "–")
            if hit and j:
                ratios.append(r["clock"][hit["step"]] / job["clock"][j["step"]])
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}x" if ratios else "–"
        name = "float32" if codec == "none" else codec
        print(f"| {name} | {mbit} Mbit/s, {delay} ms | sites | {r['evals'][-1]['val_ppl']:.3f} | "
              + " | ".join(cells) + f" | {spread} |")
        if job:
            print(f"| {name} | {mbit} Mbit/s, 0 ms | one job (§8.2) | {job['evals'][-1]['val_ppl']:.3f} | "
                  + " | ".join(job_cells) + " | 1 |")
    print("\n(sites: measured seconds, the plan's prediction in brackets; sites / one job: measured time ratio at "
          "each target)")


if __name__ == "__main__":
    {"goodput": goodput, "quality": quality}[sys.argv[1]](sys.argv[2])
