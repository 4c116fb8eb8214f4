#!/usr/bin/env bash
# Creates the project-local virtual environment .venv (ignored by git) with the pinned PyTorch of
# scripts/requirements-cuda.txt, whose LibTorch the CUDA variant builds against. Idempotent: installs only
# when the pinned version is missing (scripts/venv_pins.sh). Checks that its CUDA major version is nvcc's.
# Usage: scripts/setup-venv.sh [VENV_DIR]   (default .venv; PYTHON=... picks the interpreter, default python3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/venv_pins.sh
venv=${1:-.venv}
req=scripts/requirements-cuda.txt
want=$(sed -n 's/^torch==//p' "$req")
install_pins setup-venv "$venv" "$req"

nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || die "nvcc not found (the CUDA variant needs the CUDA toolkit)"
nvcc_major=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
torch_cuda=$("$venv/bin/python3" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null)
[ -n "$torch_cuda" ] || die "torch $want in $venv has no CUDA"
[ "${torch_cuda%%.*}" = "$nvcc_major" ] ||
  die "torch $want in $venv is built for CUDA $torch_cuda but nvcc is CUDA $nvcc_major; pin a torch of CUDA $nvcc_major in $req"
echo "setup-venv: $venv has torch $want (CUDA $torch_cuda), nvcc is CUDA $nvcc_major"
