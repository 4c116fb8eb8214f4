#!/usr/bin/env bash
# One command for the GPU machine (issue "GPU path, part 2"; bench/gpu/README.md says how it is run there):
# unpack the carried build dependencies, build fedshard's CUDA variant against that machine's PyTorch, run
# the GPU checks and the GPU benchmark (bench/gpu/gpu_run.py). Prints each phase's time. The runs work in
# WORK; OUT_DIR gets the five files that matter (the device tool returns at most 8): summary.txt, logs.txt
# (every phase's log), checks.json, bench.json, profiles.txt.
#
# Usage: bench/gpu/device-check.sh OUT_DIR
# Environment (for a dry run on a machine without a GPU, e.g. DEVICE=cpu PHASES="deps configure checks"):
#   DEVICE   cuda (default) | cpu: run the checks' comparisons on the CPU
#   PHASES   default "deps build data checks bench"; "configure" = the build's configure step alone
#   PYTHON   the python3 whose torch to build against (default python3: /opt/torch/.venv/bin/python3 there)
#   BIN      an already built fedshard to use instead of the build's
#   SHAPES   benchmark shapes (default 1b,8b4)
#   WORK     where the runs go (default /tmp/fedshard-gpu)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
out=${1:?usage: bench/gpu/device-check.sh OUT_DIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
device=${DEVICE:-cuda}
phases=${PHASES:-deps build data checks bench}
python=${PYTHON:-python3}
build=$repo/build-gpu
bin=${BIN:-$build/fedshard}
prefix=/tmp/fedshard-deps
data=$repo/data/brown
work=${WORK:-/tmp/fedshard-gpu}
mkdir -p "$work"
summary=$out/summary.txt
: >"$summary"

# phase NAME COMMAND...: runs the command with its output in WORK/NAME.log, prints its time and status.
phase() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s.%N)
  "$@" >"$work/$name.log" 2>&1
  rc=$?
  printf 'phase %-10s %7.1f s  %s\n' "$name" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" \
    "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc; logs.txt, ===== $name)")" | tee -a "$summary"
  return "$rc"
}

unpack_deps() {
  ls .gpudeps/*.deb >/dev/null || { echo "no .gpudeps/*.deb: run bench/gpu/fetch-debs.sh here and carry .gpudeps"; return 1; }
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in .gpudeps/*.deb; do dpkg -x "$deb" "$prefix" || return 1; done
  # pkg-config files name /usr as their prefix: point them at the unpacked tree.
  sed -i "s|^prefix=.*|prefix=$prefix/usr|" "$prefix"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
  ls "$prefix/usr/include" "$prefix/usr/lib/x86_64-linux-gnu"
}

configure() {
  local torch_cmake gen=()
  torch_cmake=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)') || return 1
  command -v ninja >/dev/null && gen=(-G Ninja)
  PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig cmake -S . -B "$build" "${gen[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DFEDSHARD_CUDA=ON -DTORCH_CUDA_ARCH_LIST=9.0 \
    -DCMAKE_PREFIX_PATH="$torch_cmake;$prefix/usr" -DCMAKE_BUILD_RPATH="$prefix/usr/lib/x86_64-linux-gnu"
}

build_fedshard() {
  configure && cmake --build "$build" -j"$(nproc)" --target fedshard && "$bin" --version
}

prepare_data() {
  # The Brown corpus when it was carried (data/brown), else the license texts of the machine.
  if [ -f "$data/manifest.json" ]; then echo "using $data"; return 0; fi
  data=/tmp/fedshard-corpus
  rm -rf /tmp/fedshard-raw && mkdir -p /tmp/fedshard-raw/licenses && cp /usr/share/common-licenses/* /tmp/fedshard-raw/licenses/ &&
    "$bin" prepare --input /tmp/fedshard-raw --out "$data" --val-fraction 0.1
}

status=0
for p in $phases; do
  case $p in
    deps) phase deps unpack_deps || status=1 ;;
    configure) phase configure configure || status=1 ;;
    build) phase build build_fedshard || status=1 ;;
    data) phase data prepare_data || status=1 ;;
    checks) phase checks "$python" bench/gpu/gpu_run.py checks --bin "$bin" --data "$data" --out "$work/checks" --device "$device" || status=1
            cp "$work/checks/checks.json" "$out/" 2>/dev/null
            cat "$work/checks.log" ;;
    bench) phase bench "$python" bench/gpu/gpu_run.py bench --bin "$bin" --data "$data" --out "$work/bench" --device "$device" --shapes "${SHAPES:-1b,8b4}" || status=1
           cp "$work/bench/bench.json" "$work/bench/profiles.txt" "$out/" 2>/dev/null
           tail -n 8 "$work/bench.log" ;;
    *) echo "unknown phase $p"; status=1 ;;
  esac
done
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee -a "$summary"; fi
for p in $phases; do
  [ -f "$work/$p.log" ] && { echo "===== $p"; tail -n 300 "$work/$p.log"; }
done >"$out/logs.txt"
exit "$status"
