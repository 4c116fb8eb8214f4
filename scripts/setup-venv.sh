#!/usr/bin/env bash
# Creates the project-local virtual environment .venv (ignored by git) with the pinned PyTorch of
# scripts/requirements-cuda.txt, whose LibTorch the CUDA variant builds against. Idempotent: installs only
# when the pinned version is missing. Checks that its CUDA major version is nvcc's.
# Usage: scripts/setup-venv.sh [VENV_DIR]   (default .venv; PYTHON=... picks the interpreter, default python3)
set -euo pipefail
die() {
  echo "setup-venv: error: $*" >&2
  exit 1
}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${1:-.venv}
req=scripts/requirements-cuda.txt
want=$(sed -n 's/^torch==//p' "$req")
python=${PYTHON:-python3}

have=$("$venv/bin/python3" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have" != "$want" ]; then
  command -v "$python" >/dev/null 2>&1 || die "$python not found"
  [ -x "$venv/bin/python3" ] || "$python" -m venv "$venv" || die "cannot create $venv with $python -m venv (Debian: apt-get install python3-venv)"
  echo "setup-venv: installing torch $want into $venv (a CUDA wheel and its NVIDIA libraries, ~4.5 GB)"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check -r "$req" || die "pip install -r $req failed"
fi

nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || die "nvcc not found (the CUDA variant needs the CUDA toolkit)"
nvcc_major=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
torch_cuda=$("$venv/bin/python3" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null)
[ -n "$torch_cuda" ] || die "torch $want in $venv has no CUDA"
[ "${torch_cuda%%.*}" = "$nvcc_major" ] ||
  die "torch $want in $venv is built for CUDA $torch_cuda but nvcc is CUDA $nvcc_major; pin a torch of CUDA $nvcc_major in $req"
echo "setup-venv: $venv has torch $want (CUDA $torch_cuda), nvcc is CUDA $nvcc_major"
