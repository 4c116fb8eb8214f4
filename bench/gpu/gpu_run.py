"""The GPU phases of bench/gpu/device-check.sh (issue "GPU path, part 2"), driving the real fedshard binary.

  gpu_run.py checks --bin B --data D --out DIR [--device cuda|cpu]
      correctness: CUDA vs CPU (float32, 20 steps); fsdp/hsdp vs ddp on 2 and 4 ranks sharing the GPU
      (host-staged MPI); fsdp's peak GPU memory per rank below ddp's on 2 ranks; fl-fsdp S=2 K=4: aggregation
      steps and bytes per tier vs `fedshard plan`; NCCL with one rank (against the host-staged run, then 60
      steps of handles dropped before their collectives end); defer_host_sync and pin_memory change no loss;
      NCCL refusals in one line (two ranks on one GPU, federation.overlap). --device cpu runs every comparison on the CPU: a dry run without a GPU.
  gpu_run.py bench --bin B --data D --out DIR [--device cuda|cpu] [--shapes 1b,8b4]
      speed: fedshard and the PyTorch peer (eager, torch.compile) on the same shapes, bf16 compute; then two
      more steps of fedshard (train.profile_steps) and of the compiled peer (torch.profiler) under the
      profiler: DIR/profiles.txt, the time by category from both traces side by side (trace_summary.py),
      then each one's table of ops by self time.
Writes DIR/checks.json or DIR/bench.json and prints a table; exits 1 if a check fails.
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
}


def bench(a):
    rows, summaries, profiles = [], [], []
    seq = 2048 if a.device == "cuda" else 64
    for shape in a.shapes.split(","):
        flags, peer_shape, batch = SHAPES[shape]
        run_dir = os.path.join(a.out, f"fedshard-{shape}")
        peer_table = os.path.join(a.out, f"peer-{shape}-profile.txt")
        traces = [("fedshard", os.path.join(run_dir, "profile", "trace-rank0.json")),
                  ("pytorch-compile", os.path.join(a.out, f"peer-{shape}-trace.json"))]
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing of an earlier run may pass for this one's
        for stale in (peer_table, traces[1][1]):
            if os.path.exists(stale):
                os.remove(stale)
        # 15 steps, the first 5 warm-up; steps 16-17 under the profiler, left out of the throughput.
        cmd = [a.bin, "train", "--config", "configs/demo.toml", "--data", a.data, "--steps", "17", "--out", run_dir,
               "--profile-steps", "16:17",
               "--batch-size", str(batch), "--seq-len", str(seq), "--strategy", "ddp",
               "--set", f"model.device={a.device}", "--set", "model.compute_dtype=bfloat16",
               "--set", "parallel.activation_checkpointing=off", "--set", "optim.fused=auto",
               "--set", "eval.every=0", "--set", "eval.windows=1", "--set", "train.peak_flops=989e12"] + flags
        if shape != "tiny":
            cmd += ["--set", "model.vocab_size=128256"]
        try:
            run(cmd, run_dir + ".log", timeout=240)
            steps = [s for s in metrics(run_dir)[5:] if not s["profiled"]]
            tps = len(steps) / sum(1.0 / s["tok_per_s"] for s in steps)  # tokens per second over the timed steps
            summary = metrics(run_dir, "summary")[0]
            rows.append({"shape": shape, "impl": "fedshard", "tok_per_s": tps, "mfu": sum(s["mfu"] for s in steps) / len(steps),
                         "peak_memory_gb": summary.get("peak_gpu_mb_max", 0) * 2**20 / 1e9 or None})
        except Exception as e:
            rows.append({"shape": shape, "impl": "fedshard", "error": str(e)})
        table = os.path.join(run_dir, "profile", "rank0.txt")
        profiles.append(f"## fedshard {shape}\n" + (open(table).read() if os.path.exists(table) else "# no profile table\n"))
        for compiled in [c for c in (False, True) if ("compile" if c else "eager") in a.peers.split(",")]:
            log = os.path.join(a.out, f"peer-{shape}-{'compile' if compiled else 'eager'}.log")
            cmd = [sys.executable, os.path.join(HERE, "torch_peer.py"), "--shape", peer_shape, "--batch", str(batch),
                   "--seq", str(seq), "--device", a.device] + (
                ["--compile", "--profile-steps", "2", "--profile-out", peer_table, "--profile-trace", traces[1][1]]
                if compiled else [])
            try:
                run(cmd, log, timeout=300)
                with open(log) as f:
                    peer = json.loads([l for l in f if l.startswith("{")][-1])
                rows.append({"shape": shape, "impl": peer["peer"], "tok_per_s": peer["tok_per_s"], "mfu": peer["mfu"],
                             "peak_memory_gb": peer["peak_memory_gb"]})
            except Exception as e:
                rows.append({"shape": shape, "impl": "pytorch-compile" if compiled else "pytorch-eager", "error": str(e)})
            if compiled:
                profiles.append(f"## pytorch-compile {shape}\n" +
                                (open(peer_table).read() if os.path.exists(peer_table) else "# no profile table\n"))
        try:
            summaries.append(f"## where the time goes, {shape} (bench/gpu/trace_summary.py)\n" +
                             trace_summary.table(traces) + "\n")
        except (OSError, ValueError, KeyError, SystemExit) as e:
            summaries.append(f"## where the time goes, {shape}: no summary ({e})\n")
    print(f"{'shape':6} {'implementation':16} {'tok/s':>10} {'MFU':>7} {'peak GB':>8} {'vs compile':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['shape']:6} {r['impl']:16} error: {r['error']}")
            continue
        ref = [x for x in rows if x["shape"] == r["shape"] and x["impl"] == "pytorch-compile" and "error" not in x]
        ratio = f"{r['tok_per_s'] / ref[0]['tok_per_s']:.3f}" if ref else "-"
        mem = f"{r['peak_memory_gb']:.1f}" if r.get("peak_memory_gb") else "-"
        print(f"{r['shape']:6} {r['impl']:16} {r['tok_per_s']:10.0f} {r['mfu']:7.3f} {mem:>8} {ratio:>10}")
    with open(os.path.join(a.out, "bench.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(a.out, "profiles.txt"), "w") as f:
        f.write("\n".join(summaries + profiles))
    return all("error" not in r for r in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["checks", "bench"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--shapes", default="1b,8b4")
    ap.add_argument("--peers", default="eager,compile", help="which PyTorch peers the benchmark runs")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ok = checks(a) if a.what == "checks" else bench(a)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
