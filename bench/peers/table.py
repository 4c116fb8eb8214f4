"""Reads bench/peers.sh's OUT/runs and writes OUT/table.md and OUT/summary.json (and prints the table).

Step time: median over steps >= 3 (fedshard: `time_s.total` of metrics.jsonl step lines; a peer: the slowest
rank's time of each step). Peak RSS: fedshard's summary `peak_rss_mb` per rank; a peer's VmHWM per rank at the
end. Bytes: fedshard's own per-tier counters (sent per rank per step); on the shaped network also what each
rank's namespace sent through its tbf qdisc over the whole run (tc -s), per rank per step, for both systems.
Usage: python3 bench/peers/table.py OUT [--mbit MBIT]
"""
import argparse
import glob
import json
import os
import statistics

PAIRS = {  # pair: (fedshard side, peer side)
    "fsdp": ("fsdp", "FSDP2 fully_shard"),
    "ddp": ("ddp", "DDP"),
    "hsdp": ("hsdp H=2", "FSDP2 HSDP mesh 2x2"),
    "diloco": ("fl-fsdp nesterov", "torchft DiLoCo + FSDP2"),
    "localsgd": ("fl-ddp fedavg", "torchft LocalSGD + DDP"),
}


def fedshard_run(runs, tag):
    path = os.path.join(runs, tag, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    lines = [json.loads(l) for l in open(path)]
    steps = [l for l in lines if l.get("type") == "step"]
    summary = next((l for l in lines if l.get("type") == "summary"), {})
    timed = [s for s in steps if s["step"] >= 3]
    med = lambda key: statistics.median(s["time_s"].get(key, 0.0) for s in timed)
    n = len(steps)
    by_rank = summary.get("step_bytes_by_rank", [])
    tier = lambda t: statistics.mean(r[t] for r in by_rank) / n if by_rank else None
    return {"step_s": med("total"), "compute_s": med("compute"), "comm_exposed_s": med("comm_exposed"),
            "optimizer_s": med("optimizer"), "round_s": med("round"), "steps": n,
            "rss_mib": summary.get("peak_rss_mb"), "val_ppl": summary.get("final_val_ppl"),
            "tokens": summary.get("tokens"), "last_loss": steps[-1]["loss"] if steps else None,
            "bytes_node": tier("node"), "bytes_inter_node": tier("inter_node"),
            "bytes_inter_group": tier("inter_group")}


def peer_run(runs, tag):
    ranks = sorted(glob.glob(os.path.join(runs, tag + ".rank*.json")))
    if not ranks:
        return None
    recs = sorted((json.load(open(f)) for f in ranks), key=lambda r: r["rank"])
    per_step = [max(r["step_s"][i] for r in recs) for i in range(len(recs[0]["step_s"]))]
    return {"step_s": statistics.median(per_step[2:]), "steps": len(per_step),
            "rss_mib": [r["vmhwm_kib"] / 1024 for r in recs],
            "rss_at_start_mib": [r.get("rss_at_start_kib", 0) / 1024 for r in recs], "val_ppl": recs[0]["val_ppl"],
            "tokens": recs[0]["tokens"], "last_loss_rank0": recs[0]["loss"][-1], "torch": recs[0]["torch"]}


def wire(runs, tag, steps):
    path = os.path.join(runs, tag + ".wire")
    if not os.path.exists(path) or not steps:
        return None
    before, after = map(int, open(path).read().split())
    return (after - before) / 4 / steps


def error(runs, tag):
    path = os.path.join(runs, tag + ".error")
    return open(path).read().strip() if os.path.exists(path) else None


def mb(x):
    return "—" if x is None else f"{x / 1e6:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--mbit", default="100")
    a = ap.parse_args()
    runs = os.path.join(a.out, "runs")
    rows, md = [], []
    for net in ("shm", "netns"):
        found = [p for p in PAIRS if os.path.exists(os.path.join(runs, f"{net}-fedshard-{p}.log"))]
        if not found:
            continue
        title = "shared memory (plain mpirun)" if net == "shm" else \
            f"shaped network (one rank per netns, tbf {a.mbit} Mbit/s each way)"
        md += [f"### {title}", "",
               "| pair: fedshard vs peer | steps | fedshard s/step | peer s/step | fedshard/peer | "
               "fedshard peak RSS MiB (ranks 0-3) | peer peak RSS MiB (ranks 0-3) | "
               "fedshard B/step/rank, own counters (inter-node [+ inter-group]) | "
               + ("fedshard wire B/step/rank (tc) | peer wire B/step/rank (tc) | " if net == "netns" else "")
               + "val ppl fedshard | val ppl peer |",
               "|" + "---|" * (12 if net == "netns" else 10)]
        for p in found:
            f, t = fedshard_run(runs, f"{net}-fedshard-{p}"), peer_run(runs, f"{net}-peer-{p}")
            ferr, terr = error(runs, f"{net}-fedshard-{p}"), error(runs, f"{net}-peer-{p}")
            row = {"net": net, "pair": p, "fedshard": f, "peer": t, "fedshard_error": ferr, "peer_error": terr}
            if f and net == "netns":
                f["wire_bytes_per_step_rank"] = wire(runs, f"{net}-fedshard-{p}", f["steps"])
            if t and net == "netns":
                t["wire_bytes_per_step_rank"] = wire(runs, f"{net}-peer-{p}", t["steps"])
            ratio = f["step_s"] / t["step_s"] if f and t else None
            row["ratio"] = ratio
            rows.append(row)
            fs_bytes = "—"
            if f and f["bytes_inter_node"] is not None:
                fs_bytes = f"{mb(f['bytes_inter_node'])} M" + (
                    f" + {mb(f['bytes_inter_group'])} M" if f["bytes_inter_group"] else "")
            cells = [f"{PAIRS[p][0]} vs {PAIRS[p][1]}",
                     str(f["steps"]) if f else "—",
                     f"{f['step_s']:.3f}" if f else (f"failed: `{ferr}`" if ferr else "not run"),
                     f"{t['step_s']:.3f}" if t else (f"failed: `{terr}`" if terr else "not run"),
                     f"{ratio:.2f}" if ratio else "—",
                     " / ".join(f"{x:.0f}" for x in f["rss_mib"]) if f and f["rss_mib"] else "—",
                     " / ".join(f"{x:.0f}" for x in t["rss_mib"]) if t else "—",
                     fs_bytes]
            if net == "netns":
                cells += [f"{mb(f.get('wire_bytes_per_step_rank'))} M" if f else "—",
                          f"{mb(t.get('wire_bytes_per_step_rank'))} M" if t else "—"]
            cells += [f"{f['val_ppl']:.3f}" if f and f["val_ppl"] else "—",
                      f"{t['val_ppl']:.3f}" if t and t["val_ppl"] else "—"]
            md.append("| " + " | ".join(cells) + " |")
        md += ["", "fedshard's step, median per phase (s): " + "; ".join(
            f"{r['pair']} compute {r['fedshard']['compute_s']:.3f}, exposed comm {r['fedshard']['comm_exposed_s']:.3f}, "
            f"optimizer {r['fedshard']['optimizer_s']:.3f}" for r in rows if r["net"] == net and r["fedshard"]),
               "", "peer RSS right after `import torch`, before any model (MiB, rank 0): " + "; ".join(
            f"{r['pair']} {r['peer']['rss_at_start_mib'][0]:.0f}" for r in rows if r["net"] == net and r["peer"]), ""]

    goals = []
    for r in rows:
        if r["ratio"] is None:
            continue
        if r["net"] == "shm":
            goals.append((f"shm {r['pair']}: fedshard/peer <= 1.0", r["ratio"] <= 1.0, f"{r['ratio']:.2f}"))
        if r["net"] == "netns" and r["pair"] == "fsdp":
            goals.append(("netns fsdp: fedshard/FSDP2 <= 0.8", r["ratio"] <= 0.8, f"{r['ratio']:.2f}"))
        if r["pair"] in ("diloco", "localsgd") and r["fedshard"]["val_ppl"] and r["peer"]["val_ppl"]:
            f, t = r["fedshard"]["val_ppl"], r["peer"]["val_ppl"]
            goals.append((f"{r['net']} {r['pair']}: val ppl fedshard <= peer at equal tokens", f <= t,
                          f"{f:.3f} vs {t:.3f}"))
    md += ["### goals", "", "| goal | measured | met |", "|---|---|---|"]
    md += [f"| {g} | {v} | {'yes' if ok else 'no'} |" for g, ok, v in goals]
    versions = os.path.join(a.out, "versions.txt")
    if os.path.exists(versions):
        md += ["", "```", open(versions).read().strip(), "```"]
    text = "\n".join(md) + "\n"
    open(os.path.join(a.out, "table.md"), "w").write(text)
    json.dump({"rows": rows, "goals": [{"goal": g, "met": ok, "measured": v} for g, ok, v in goals]},
              open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    print(text)


if __name__ == "__main__":
    main()
