#!/usr/bin/env bash
# Puts the pinned transformers and tensorboard of scripts/requirements-hf.txt (with torch and what they need) into the
# project-local venv: tests/hf_conformance.sh checks fedshard's Hugging Face import/export against it,
# tests/tensorboard.sh reads fedshard's event files with it, the tokenizer tests compare with tokenizers and
# sentencepiece, and the build takes the Arrow/Parquet C++ libraries of its pyarrow (Parquet input).
# Idempotent; needs no GPU and no nvcc (the PyPI torch wheel runs on the CPU).
# Usage: scripts/setup-hf.sh [VENV_DIR]   (default .venv; PYTHON=... picks the interpreter, default python3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/venv_pins.sh
venv=${1:-.venv}
install_pins setup-hf "$venv" scripts/requirements-hf.txt
"$venv/bin/python3" -c 'import torch, transformers, safetensors, tensorboard, sentencepiece, tiktoken, pyarrow' 2>/dev/null ||
  die "torch/transformers/safetensors/tensorboard/sentencepiece/tiktoken/pyarrow do not import from $venv"
echo "setup-hf: $venv has transformers $(sed -n 's/^transformers==//p' scripts/requirements-hf.txt)"
