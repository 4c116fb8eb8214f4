#!/usr/bin/env bash
# The CUDA variant (FEDSHARD_CUDA) links LibTorch's CUDA library, NCCL and the fused kernels, says what it was
# built with, and,
# on a machine without a GPU, refuses model.device = cuda with one clear line and exit 2.
# Usage: cuda_build.sh FEDSHARD_BINARY
set -u
bin=$1
fails=0
fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}

libs=$(ldd "$bin")
for lib in libtorch_cuda libnccl; do
  if grep -q "$lib" <<<"$libs"; then echo "ok   linked: $(grep "$lib" <<<"$libs" | head -1 | xargs)"; else fail "$bin does not link $lib"; fi
done

# The fused kernels (src/kernels/*.cu) are in the binary, device code and launch stubs for every storage dtype.
readelf -S "$bin" | grep -q '\.nv_fatbin' || fail "$bin has no device code section (.nv_fatbin)"
stubs=$(nm -C "$bin" | grep -oE 'fedshard::kernels::cuda::\(anonymous namespace\)::[a-z_]+_kernel<[a-z_0-9]+>' | sort -u)
for k in rms_norm_forward rms_norm_backward rope swiglu_forward swiglu_backward; do
  for t in float double __nv_bfloat16; do
    grep -q "::${k}_kernel<$t>" <<<"$stubs" || fail "$bin has no ${k}_kernel<$t>"
  done
done
echo "ok   fused kernels linked: $(wc -l <<<"$stubs") kernel instantiations"

version=$("$bin" --version 2>&1) || fail "--version exited $?"
echo "     --version: $version"
[[ "$version" == *"with CUDA "*", NCCL "*"GPUs visible: "* ]] || fail "--version does not name CUDA, NCCL and the GPUs"
info=$("$bin" info --model tiny 2>&1) || fail "info exited $?"
grep -q "^build: .*with CUDA" <<<"$info" || fail "info has no build line naming CUDA"

if [[ "$version" == *"GPUs visible: none"* ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/raw/gnu"
  cp /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 "$tmp/raw/gnu/"
  "$bin" prepare --input "$tmp/raw" --out "$tmp/corpus" --val-fraction 0.5 >/dev/null || fail "prepare"
  out=$(timeout 120 "$bin" train --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --steps 1 \
          --out "$tmp/run" --set model.device=cuda 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$out" | grep -c .)
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [[ "$out" == *"no GPU is visible"* ]]; then
    echo "ok   model.device=cuda without a GPU: $out"
  else
    fail "model.device=cuda without a GPU: rc=$rc, $lines line(s): $out"
  fi
else
  echo "     a GPU is visible: the no-GPU refusal is not applicable here"
fi

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "the CUDA variant links libtorch_cuda and NCCL and reports its build"
