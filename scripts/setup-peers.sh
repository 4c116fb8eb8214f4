#!/usr/bin/env bash
# Puts the PyTorch peers of bench/peers.sh into the project-local venv: the pins of
# scripts/requirements-peers.txt (torch, torchft and what torchft needs). Idempotent.
# Usage: scripts/setup-peers.sh [VENV_DIR]   (default .venv; PYTHON=... picks the interpreter, default python3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/venv_pins.sh
venv=${1:-.venv}
install_pins setup-peers "$venv" scripts/requirements-peers.txt
"$venv/bin/python3" -c 'import torch, torchft' 2>/dev/null || die "torch/torchft do not import from $venv"
[ -x "$venv/bin/torchft_lighthouse" ] || die "$venv/bin/torchft_lighthouse missing (torchft install incomplete)"
