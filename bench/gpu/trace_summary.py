"""Where a profiled step's time goes, side by side: reads Chrome traces written by LibTorch's Kineto profiler
(fedshard's RUN/profile/trace-rank0.json, torch_peer.py --profile-trace) and sums time by category.

  python3 bench/gpu/trace_summary.py fedshard=RUN/profile/trace-rank0.json pytorch-compile=peer.json

On a GPU it sums the kernels, copies and memsets of the trace (they do not overlap on one stream) and gives
each category's share of the profiled wall time (first to last event); "idle" is wall time with no GPU
activity, which is where launch overhead and host waits show. Without GPU events it sums the CPU ops' self
time (an op's time less that of the ops it called on the same thread) instead.
"""
import json
import sys

# First match wins, on the lower-cased name.
CATEGORIES = [
    ("communication", ("nccl", "comm_wait", "c10d", "all_gather", "allreduce", "reduce_scatter")),
    ("attention", ("flash", "fmha", "attention", "sdp", "softmax")),
    ("matmul", ("gemm", "xmma", "cutlass", "nvjet", "cublas", "aten::mm", "aten::bmm", "aten::addmm", "matmul")),
    ("optimizer", ("adam", "multi_tensor", "optimizer", "clip_grad", "foreach")),
    ("copy / memset", ("memcpy", "memset", "copy_", "to_copy", "cat", "contiguous")),
    ("embedding / loss", ("embedding", "nll", "log_softmax", "cross_entropy", "index")),
]
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def category(name):
    low = name.lower()
    for cat, keys in CATEGORIES:
        if any(k in low for k in keys):
            return cat
    return "elementwise / other"


def cpu_self_times(ops):
    """Self time of each CPU op: its duration less that of the ops nested directly inside it on its thread."""
    out = []
    by_thread = {}
    for e in ops:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for events in by_thread.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [event, self]
        for e in events:
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= e["ts"]:
                out.append(tuple(stack.pop()))
            if stack:
                stack[-1][1] -= e["dur"]
            stack.append([e, e["dur"]])
        out.extend(tuple(s) for s in stack)
    return [(e["name"], max(0.0, s)) for e, s in out]


def summarize(path):
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    timed = gpu or [e for e in events if e.get("cat") == "cpu_op"]
    if not timed:
        raise SystemExit(f"{path}: no kernels and no CPU ops in the trace")
    wall = max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)
    totals = {}
    for name, us in ([(e["name"], e["dur"]) for e in gpu] if gpu else cpu_self_times(timed)):
        totals[category(name)] = totals.get(category(name), 0.0) + us
    if gpu:
        totals["idle"] = max(0.0, wall - sum(e["dur"] for e in gpu))
    return ("GPU" if gpu else "CPU self"), wall, totals


def table(runs):
    """runs: [(name, trace path)]; the categories side by side, largest share first."""
    results = [(name,) + summarize(path) for name, path in runs]
    cats = sorted({c for r in results for c in r[3]}, key=lambda c: -max(r[3].get(c, 0) / r[2] for r in results))
    lines = [f"{'category':22}" + "".join(f"{name + ' (' + kind + ')':>32}" for name, kind, _, _ in results)]
    for c in cats:
        lines.append(f"{c:22}" + "".join(f"{t.get(c, 0) / 1e3:>20.1f} ms {100 * t.get(c, 0) / w:5.1f}%"
                                         for _, _, w, t in results))
    lines.append(f"{'profiled wall time':22}" + "".join(f"{w / 1e3:>20.1f} ms {'':6}" for _, _, w, _ in results))
    return "\n".join(lines)


def main():
    runs = [arg.split("=", 1) for arg in sys.argv[1:]]
    if not runs or any(len(r) != 2 for r in runs):
        raise SystemExit("usage: trace_summary.py NAME=TRACE.json [NAME=TRACE.json ...]")
    print(table(runs))


if __name__ == "__main__":
    main()
