#!/usr/bin/env bash
# Creates the project-local virtual environment .venv (ignored by git) with the pinned transformers of
# scripts/requirements-hf.txt, which tests/hf_conformance.sh checks fedshard's Hugging Face import/export
# against. Idempotent: installs only when the pinned transformers is missing. Needs no GPU and no nvcc.
# Usage: scripts/setup-hf.sh [VENV_DIR]   (default .venv; PYTHON=... picks the interpreter, default python3)
set -euo pipefail
die() {
  echo "setup-hf: error: $*" >&2
  exit 1
}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${1:-.venv}
req=scripts/requirements-hf.txt
want=$(sed -n 's/^transformers==//p' "$req")
python=${PYTHON:-python3}

have() { "$venv/bin/python3" -c 'import transformers; print(transformers.__version__)' 2>/dev/null || true; }
if [ "$(have)" != "$want" ]; then
  command -v "$python" >/dev/null 2>&1 || die "$python not found"
  [ -x "$venv/bin/python3" ] || "$python" -m venv "$venv" || die "cannot create $venv with $python -m venv (Debian: apt-get install python3-venv)"
  echo "setup-hf: installing transformers $want and torch into $venv (the torch wheel and its NVIDIA libraries are ~4.5 GB)"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check -r "$req" || die "pip install -r $req failed"
  [ "$(have)" = "$want" ] || die "transformers $want still does not import in $venv"
fi
echo "setup-hf: $venv has transformers $want"
