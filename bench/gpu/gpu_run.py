"""The GPU phases of bench/gpu/device-check.sh (issue "GPU path, part 2"), driving the real fedshard binary.

  gpu_run.py checks --bin B --data D --out DIR [--device cuda|cpu]
      correctness: CUDA vs CPU (float32, 20 steps); fsdp/hsdp vs ddp on 2 and 4 ranks sharing the GPU
      (host-staged MPI); fsdp's peak GPU memory per rank below ddp's on 2 ranks; fl-fsdp S=2 K=4: aggregation
      steps and bytes per tier vs `fedshard plan`; NCCL with one rank (against the host-staged run, then 60
      steps of handles dropped before their collectives end); defer_host_sync and pin_memory change no loss;
      NCCL refusals in one line (two ranks on one GPU, federation.overlap). --device cpu runs every comparison on the CPU: a dry run without a GPU.
  gpu_run.py bench --bin B --data D --out DIR [--device cuda|cpu] [--shapes 1b,8b4] [--variants ...] [--peers ...]
      speed: fedshard (model.kernels aten, fused, fused + float8 matmuls) and the PyTorch peer (eager,
      torch.compile, torch.compile + torchao float8) on the same shapes, bf16 compute; two more steps of the fused
      fedshard (train.profile_steps) and of the compiled peer (torch.profiler) under the profiler:
      DIR/profiles.txt, the time by category from both traces side by side (trace_summary.py), then each one's
      table of ops by self time.
  gpu_run.py float8 ...   200 steps of `small` with and without float8 matmuls: float8 trains (DIR/float8.json)
  gpu_run.py stretch ...  the whole Llama-3.1-8B on the one GPU, fedshard and the eager peer (DIR/stretch.json)
Writes DIR/checks.json, bench.json, float8.json or stretch.json and prints a table; exits 1 if a check fails.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import trace_summary

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]


def run(cmd, log, timeout=150):
    """Runs cmd with its output in log; a hang costs `timeout` seconds of the GPU lease, not the whole call."""
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        try:
            rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            # A killed mpirun leaves its ranks holding the GPU; they are found by the run directory
            # (LOG minus .log) on their command line.
            subprocess.call(["pkill", "-9", "-f", log.rsplit(".", 1)[0]])
            raise RuntimeError(f"timed out after {timeout} s: {' '.join(cmd)} (log {log})")
    if rc != 0:
        with open(log) as f:
            tail = f.read().strip().splitlines()[-1:]
        raise RuntimeError(f"exit {rc}: {' '.join(cmd)}: {' '.join(tail)}")


def refused(a, name, ranks, extra):
    """Runs a train command that must be refused: its exit status and the ranks' `fedshard: error` lines, read
    from each rank's own output file (no other process writes there)."""
    run_dir = os.path.join(a.out, name)
    ranks_dir = run_dir + ".ranks"
    shutil.rmtree(ranks_dir, ignore_errors=True)
    os.makedirs(ranks_dir)
    # Each rank's stderr into a file of its own, named by the rank Open MPI 4 and 5 both export (their
    # --output-filename layouts differ, and the GPU machine may run either).
    per_rank = f'exec "$0" "$@" 2>"{ranks_dir}/rank.$OMPI_COMM_WORLD_RANK.stderr"'
    cmd = MPIRUN + ["-np", str(ranks), "sh", "-c", per_rank, a.bin, "train", "--config",
                    "configs/demo.toml", "--data", a.data, "--steps", "2", "--out", run_dir] + list(extra)
    try:
        rc = subprocess.call(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    except subprocess.TimeoutExpired:
        subprocess.call(["pkill", "-9", "-f", run_dir])
        return 124, ["timed out"]
    errors = []
    for f in sorted(os.listdir(ranks_dir)):
        with open(os.path.join(ranks_dir, f)) as fh:
            errors += [l.strip() for l in fh if "fedshard: error" in l]
    return rc, errors


def metrics(run_dir, kind="step"):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [j for j in map(json.loads, f) if j["type"] == kind]


def train(a, name, ranks=1, extra=(), steps=20):
    run_dir = os.path.join(a.out, name)
    cmd = ([] if ranks == 1 else MPIRUN + ["-np", str(ranks)]) + [
        a.bin, "train", "--config", "configs/demo.toml", "--data", a.data, "--steps", str(steps), "--out", run_dir,
        "--set", "eval.every=0", "--set", "eval.windows=8", "--set", "train.peak_flops=1e12"] + list(extra)
    run(cmd, run_dir + ".log")
    return metrics(run_dir)


def peak_gpu_mib(a, name):
    """A run's largest per-rank peak of the caching allocator (MiB), and the preflight's estimate without the
    runtime term (the CUDA context, which the allocator does not see), in MiB."""
    run_dir = os.path.join(a.out, name)
    with open(os.path.join(run_dir, "config.json")) as f:
        estimate = json.load(f)["resolved"]["memory_estimate_bytes"]
    return metrics(run_dir, "summary")[0].get("peak_gpu_mb_max"), (estimate["total"] - estimate["runtime"]) / 2**20


def rel_diff(a_losses, b_losses):
    return max(abs(x - y) / abs(y) for x, y in zip(a_losses, b_losses))


def checks(a):
    results = []

    def record(name, ok, detail):
        results.append({"check": name, "ok": bool(ok), "detail": detail})
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)

    dev = ["--set", f"model.device={a.device}"]
    mpi = dev + ["--set", "parallel.backend=mpi"]
    losses = lambda steps: [s["loss"] for s in steps]
    try:
        cpu = losses(train(a, "cpu-f32", extra=["--set", "model.device=cpu"]))
        one = losses(train(a, "dev-f32", extra=mpi))
        d = rel_diff(one, cpu)
        record(f"{a.device} vs cpu, small f32, 20 steps", len(one) == 20 and d <= 1e-4, f"max rel diff {d:.2e}")
        for ranks in (2, 4):
            ddp = losses(train(a, f"ddp-np{ranks}", ranks, mpi + ["--strategy", "ddp"]))
            others = [("fsdp", ["--strategy", "fsdp"])] + ([("hsdp", ["--strategy", "hsdp", "--shard-size", "2"])]
                                                         if ranks == 4 else [])
            for name, flags in others:
                got = losses(train(a, f"{name}-np{ranks}", ranks, mpi + flags))
                d = rel_diff(got, ddp)
                record(f"{name} vs ddp on {ranks} ranks (host-staged mpi)", d <= 1e-4, f"max rel diff {d:.2e}")
        if a.device == "cuda":
            (ddp_mib, ddp_est), (fsdp_mib, fsdp_est) = peak_gpu_mib(a, "ddp-np2"), peak_gpu_mib(a, "fsdp-np2")
            record("fsdp on 2 ranks peaks below ddp on 2 ranks (GPU memory per rank)",
                   None not in (fsdp_mib, ddp_mib) and fsdp_mib < ddp_mib,
                   f"peak allocated fsdp {fsdp_mib} MiB vs ddp {ddp_mib} MiB; "
                   f"preflight estimate fsdp {fsdp_est:.1f} MiB, ddp {ddp_est:.1f} MiB")
        fl = train(a, "fl-fsdp-np4", 4, mpi + ["--strategy", "fl-fsdp", "--group-size", "2", "--sync-every", "4"])
        agg = [s["step"] for s in fl if s["aggregated"]]
        record("fl-fsdp S=2 K=4 aggregates on steps 4, 8, ...", agg == [4, 8, 12, 16, 20], f"aggregated {agg}")
        plan = json.loads(subprocess.check_output([
            a.bin, "plan", "--nodes", "1", "--ranks-per-node", "4", "--model", "small", "--vocab-size", "258",
            "--strategy", "fl-fsdp:S=2,K=4", "--batch", "8", "--seq", "256", "--bytes-per-element", "4",
            "--compute-seconds", "1", "--json"]))["plans"][0]
        worst = 0.0
        for s in fl:
            for tier in ("node", "inter_node", "inter_group"):
                round_bytes = plan["bytes_per_round"][tier]
                want = plan["bytes_per_step"][tier] - round_bytes / 4 + (round_bytes if s["aggregated"] else 0)
                worst = max(worst, abs(s["bytes"][tier] - want))
        record("fl-fsdp bytes per tier equal fedshard plan's", worst < 1e-3, f"max |measured - plan| {worst:.3g} B")
        if a.device == "cuda":
            # NCCL in a world of one against the host-staged run of the same 20 steps (the lr schedule depends on
            # the run's length). Then 60 steps in which every collective's handle is dropped by the trainer right
            # after its wait(), before the collective ends: the NCCL completion callback drops the last reference
            # (its event must go back to the CommStream's pool, not to cudaEventDestroy inside a host function).
            nccl_flags = dev + ["--set", "parallel.backend=nccl", "--strategy", "fsdp"]
            nccl = losses(train(a, "nccl-np1", 1, nccl_flags))
            d = rel_diff(nccl, one)
            record("nccl world of one: fsdp matches the host-staged run", len(nccl) == 20 and d <= 1e-4,
                   f"max rel diff {d:.2e} over 20 steps")
            long = losses(train(a, "nccl-np1-60", 1, nccl_flags, steps=60))
            record("nccl world of one: 60 steps with every handle dropped early", len(long) == 60
                   and all(x == x for x in long) and long[-1] < long[0], f"loss {long[0]:.4f} -> {long[-1]:.4f}")
            # The speed switches move a host sync and a copy, not arithmetic: identical losses on the GPU.
            plain = losses(train(a, "switches-off", 1, mpi + ["--set", "train.defer_host_sync=false",
                                                               "--set", "data.pin_memory=false"]))
            switched = losses(train(a, "switches-on", 1, mpi + ["--set", "train.defer_host_sync=true",
                                                                 "--set", "data.pin_memory=true"]))
            record("defer_host_sync and pin_memory change no loss", plain == switched, f"{len(plain)} losses compared")
            # Two ranks on the one GPU with NCCL: refused in the start-up consensus (one line, exit 2), not a hang
            # of the rank that passed the check while the other left.
            rc, errors = refused(a, "nccl-np2", 2, dev + ["--set", "parallel.backend=nccl"])
            record("nccl with 2 ranks on one GPU: one error line, exit 2", rc == 2 and len(errors) == 1
                   and "NCCL needs one rank per GPU" in errors[0], f"exit {rc}: {errors}")
            # No lane for overlapped rounds under NCCL yet: refused in one line.
            rc, errors = refused(a, "nccl-overlap", 1, dev + ["--set", "parallel.backend=nccl", "--strategy", "fl-fsdp",
                                                              "--overlap", "delayed"])
            record("nccl with federation.overlap: refused in one line", rc == 2 and len(errors) == 1
                   and "federation lane" in errors[0], f"exit {rc}: {errors}")
    except Exception as e:  # a failed run is a failed check, reported with its log
        record("runs", False, str(e))
    with open(os.path.join(a.out, "checks.json"), "w") as f:
        json.dump(results, f, indent=1)
    return all(r["ok"] for r in results)


SHAPES = {  # fedshard flags, peer shape, batch
    "1b": (["--model", "llama3.2-1b", "--set", "model.tie_embeddings=false"], "1b", 4),
    "8b4": (["--model", "llama3.1-8b", "--set", "model.n_layers=4"], "8b4", 2),
    "tiny": (["--model", "small", "--set", "model.n_layers=2", "--set", "model.vocab_size=1024"], "tiny", 2),
    "8b": (["--model", "llama3.1-8b"], "8b", 1),
}
# fedshard's rows: the ATen compositions, the fused kernels, the fused kernels with float8 matmuls.
VARIANTS = {"aten": ["--set", "model.kernels=aten"], "fused": ["--set", "model.kernels=fused"],
            "float8": ["--set", "model.kernels=fused", "--set", "model.matmul_dtype=float8"]}
# The PyTorch peer's rows; compile-float8 is torch.compile with torchao's float8 training (tensorwise).
PEERS = {"eager": [], "compile": ["--compile"], "compile-float8": ["--compile", "--float8"]}


def fedshard_run(a, shape, variant, profiled):
    """One fedshard row: tok/s over steps 6-15 (the first five warm up), MFU, peak GPU memory; with `profiled`,
    steps 16-17 run under the profiler (left out of the throughput)."""
    flags, _, batch = SHAPES[shape]
    seq = 2048 if a.device == "cuda" else 64
    run_dir = os.path.join(a.out, f"fedshard-{shape}-{variant}")
    shutil.rmtree(run_dir, ignore_errors=True)  # nothing of an earlier run may pass for this one's
    steps = 17 if profiled else 15
    cmd = [a.bin, "train", "--config", "configs/demo.toml", "--data", a.data, "--steps", str(steps), "--out", run_dir,
           "--batch-size", str(batch), "--seq-len", str(seq), "--strategy", "ddp",
           "--set", f"model.device={a.device}", "--set", "model.compute_dtype=bfloat16",
           "--set", "parallel.activation_checkpointing=off", "--set", "optim.fused=auto",
           "--set", "eval.every=0", "--set", "eval.windows=1", "--set", "train.peak_flops=989e12"] + flags + VARIANTS[variant]
    if profiled:
        cmd += ["--profile-steps", "16:17"]
    if shape != "tiny":
        cmd += ["--set", "model.vocab_size=128256"]
    try:
        run(cmd, run_dir + ".log", timeout=240)
        steps = [s for s in metrics(run_dir)[5:] if not s["profiled"]]
        tps = len(steps) / sum(1.0 / s["tok_per_s"] for s in steps)  # tokens per second over the timed steps
        summary = metrics(run_dir, "summary")[0]
        return {"shape": shape, "impl": f"fedshard-{variant}", "tok_per_s": tps,
                "mfu": sum(s["mfu"] for s in steps) / len(steps),
                "peak_memory_gb": summary.get("peak_gpu_mb_max", 0) * 2**20 / 1e9 or None}
    except Exception as e:
        return {"shape": shape, "impl": f"fedshard-{variant}", "error": str(e)}


def peer_run(a, shape, peer, profile_table=None, profile_trace=None):
    _, peer_shape, batch = SHAPES[shape]
    seq = 2048 if a.device == "cuda" else 64
    log = os.path.join(a.out, f"peer-{shape}-{peer}.log")
    cmd = [sys.executable, os.path.join(HERE, "torch_peer.py"), "--shape", peer_shape, "--batch", str(batch),
           "--seq", str(seq), "--device", a.device] + PEERS[peer]
    if profile_table:
        cmd += ["--profile-steps", "2", "--profile-out", profile_table, "--profile-trace", profile_trace]
    try:
        run(cmd, log, timeout=300)
        with open(log) as f:
            out = json.loads([l for l in f if l.startswith("{")][-1])
        return {"shape": shape, "impl": out["peer"], "tok_per_s": out["tok_per_s"], "mfu": out["mfu"],
                "peak_memory_gb": out["peak_memory_gb"]}
    except Exception as e:
        return {"shape": shape, "impl": "pytorch-" + peer, "error": str(e)}


def bench(a):
    rows, summaries, profiles = [], [], []
    for shape in a.shapes.split(","):
        run_dir = os.path.join(a.out, f"fedshard-{shape}-fused")
        peer_table = os.path.join(a.out, f"peer-{shape}-profile.txt")
        traces = [("fedshard-fused", os.path.join(run_dir, "profile", "trace-rank0.json")),
                  ("pytorch-compile", os.path.join(a.out, f"peer-{shape}-trace.json"))]
        for stale in (peer_table, traces[1][1]):
            if os.path.exists(stale):
                os.remove(stale)
        # In the order of the goals: the fused bf16 row and the compiled peer first, float8 next, the rest last.
        for variant in [v for v in ("fused", "float8", "aten") if v in a.variants.split(",")]:
            rows.append(fedshard_run(a, shape, variant, profiled=variant == "fused"))
            if variant == "fused":
                table = os.path.join(run_dir, "profile", "rank0.txt")
                profiles.append(f"## fedshard-fused {shape}\n" +
                                (open(table).read() if os.path.exists(table) else "# no profile table\n"))
        for peer in [p for p in ("compile", "compile-float8", "eager") if p in a.peers.split(",")]:
            profiled = peer == "compile"
            rows.append(peer_run(a, shape, peer, peer_table if profiled else None, traces[1][1] if profiled else None))
            if profiled:
                profiles.append(f"## pytorch-compile {shape}\n" +
                                (open(peer_table).read() if os.path.exists(peer_table) else "# no profile table\n"))
        try:
            summaries.append(f"## where the time goes, {shape} (bench/gpu/trace_summary.py)\n" +
                             trace_summary.table(traces) + "\n")
        except (OSError, ValueError, KeyError, SystemExit) as e:
            summaries.append(f"## where the time goes, {shape}: no summary ({e})\n")
        print_table(rows)
    with open(os.path.join(a.out, "bench.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(a.out, "profiles.txt"), "w") as f:
        f.write("\n".join(summaries + profiles))
    return all("error" not in r for r in rows)


def print_table(rows):
    """Each row against torch.compile (float8 rows against torch.compile with torchao float8) and against the
    eager peer's peak memory."""
    def find(shape, impl):
        return next((x for x in rows if x["shape"] == shape and x["impl"] == impl and "error" not in x), None)
    print(f"{'shape':6} {'implementation':24} {'tok/s':>10} {'MFU':>7} {'peak GB':>8} {'vs compile':>10} {'mem vs eager':>12}")
    for r in rows:
        if "error" in r:
            print(f"{r['shape']:6} {r['impl']:24} error: {r['error']}")
            continue
        ref = find(r["shape"], "pytorch-compile-float8" if "float8" in r["impl"] else "pytorch-compile")
        eager = find(r["shape"], "pytorch-eager")
        ratio = f"{r['tok_per_s'] / ref['tok_per_s']:.3f}" if ref else "-"
        mem = f"{r['peak_memory_gb']:.1f}" if r.get("peak_memory_gb") else "-"
        mem_ratio = (f"{r['peak_memory_gb'] / eager['peak_memory_gb']:.3f}"
                     if eager and r.get("peak_memory_gb") and eager.get("peak_memory_gb") else "-")
        print(f"{r['shape']:6} {r['impl']:24} {r['tok_per_s']:10.0f} {r['mfu']:7.3f} {mem:>8} {ratio:>10} {mem_ratio:>12}",
              flush=True)


def float8_loss(a):
    """float8 trains: `small` for 200 steps in bfloat16 with the fused kernels, with and without float8 matmuls,
    on the same data from the same initialization. The losses at every 50th step and the float8 run's final loss
    relative to the bfloat16 run's; the check: both fall and float8 ends within 5% of bfloat16."""
    steps = 200 if a.device == "cuda" else 20
    common = ["--set", f"model.device={a.device}", "--set", "model.compute_dtype=bfloat16", "--set",
              "model.kernels=fused", "--strategy", "ddp"]
    results = {}
    try:
        bf16 = [s["loss"] for s in train(a, "float8-off", extra=common, steps=steps)]
        f8 = [s["loss"] for s in train(a, "float8-on", extra=common + ["--set", "model.matmul_dtype=float8"], steps=steps)]
        marks = sorted({min(steps, m) for m in (1, 50, 100, 150, 200)})
        results = {"steps": marks, "bfloat16": [bf16[m - 1] for m in marks], "float8": [f8[m - 1] for m in marks],
                   "final_ratio": f8[-1] / bf16[-1]}
        ok = bf16[-1] < bf16[0] and f8[-1] < f8[0] and abs(f8[-1] / bf16[-1] - 1) <= 0.05
        results["ok"] = ok
        print(f"{'step':>5} {'bfloat16':>10} {'float8':>10}")
        for m, x, y in zip(marks, results["bfloat16"], results["float8"]):
            print(f"{m:5d} {x:10.4f} {y:10.4f}")
        print(f"{'ok  ' if ok else 'FAIL'} float8 final loss / bfloat16's = {results['final_ratio']:.4f}", flush=True)
    except Exception as e:
        results = {"ok": False, "error": str(e)}
        print(f"FAIL float8 loss: {e}", flush=True)
    with open(os.path.join(a.out, "float8.json"), "w") as f:
        json.dump(results, f, indent=1)
    return results["ok"]


def stretch(a):
    """The whole Llama-3.1-8B (32 layers) on the one GPU, batch 1 x 2048, bfloat16 compute, recomputation, fused
    kernels and the chunked cross-entropy: fedshard's preflight verdict, else its tok/s and peak memory; then the
    eager peer on the same shape (fits, or runs out of memory)."""
    out = {}
    run_dir = os.path.join(a.out, "stretch-8b")
    cmd = [a.bin, "train", "--config", "configs/demo.toml", "--data", a.data, "--steps", "6", "--out", run_dir,
           "--batch-size", "1", "--seq-len", "2048", "--strategy", "ddp", "--model", "llama3.1-8b",
           "--set", "model.vocab_size=128256", "--set", f"model.device={a.device}",
           "--set", "model.compute_dtype=bfloat16", "--set", "parallel.activation_checkpointing=on",
           "--set", "model.kernels=fused", "--set", "eval.every=0", "--set", "eval.windows=1",
           "--set", "train.peak_flops=989e12"]
    try:
        run(cmd, run_dir + ".log", timeout=400)
        steps = metrics(run_dir)[2:]
        out["fedshard"] = {"tok_per_s": len(steps) / sum(1.0 / s["tok_per_s"] for s in steps),
                           "peak_memory_gb": metrics(run_dir, "summary")[0].get("peak_gpu_mb_max", 0) * 2**20 / 1e9}
    except Exception as e:
        out["fedshard"] = {"error": str(e)}
    peer = peer_run(a, "8b", "eager") if a.device == "cuda" else {"error": "no GPU"}
    out["pytorch-eager"] = peer
    print(json.dumps(out, indent=1), flush=True)
    with open(os.path.join(a.out, "stretch.json"), "w") as f:
        json.dump(out, f, indent=1)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["checks", "bench", "float8", "stretch"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--shapes", default="1b,8b4")
    ap.add_argument("--peers", default="compile,compile-float8,eager", help="which PyTorch peers the benchmark runs")
    ap.add_argument("--variants", default="fused,float8,aten", help="which fedshard rows the benchmark runs")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ok = {"checks": checks, "bench": bench, "float8": float8_loss, "stretch": stretch}[a.what](a)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
