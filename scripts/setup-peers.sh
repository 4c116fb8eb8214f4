#!/usr/bin/env bash
# Puts the PyTorch peers of bench/peers.sh into the project-local venv: the pins of
# scripts/requirements-peers.txt (torch, torchft and what torchft needs). Idempotent: pip runs only when a pinned
# package is missing or at another version. Never touches the system Python.
# Usage: scripts/setup-peers.sh [VENV_DIR]   (default .venv; PYTHON=... picks the interpreter, default python3)
set -euo pipefail
die() {
  echo "setup-peers: error: $*" >&2
  exit 1
}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${1:-.venv}
req=scripts/requirements-peers.txt
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python3" ]; then
  command -v "$python" >/dev/null 2>&1 || die "$python not found"
  "$python" -m venv "$venv" || die "cannot create $venv with $python -m venv (Debian: apt-get install python3-venv)"
fi
# Every pin present at its version? (a local version tag such as +cu130 counts as the pinned release)
missing=$("$venv/bin/python3" - "$req" <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, want = line.split("==")
    try:
        have = version(name).split("+")[0]
    except PackageNotFoundError:
        have = None
    if have != want:
        print(f"{name}=={want} (have {have})")
PY
) || die "cannot run $venv/bin/python3"
if [ -n "$missing" ]; then
  echo "setup-peers: installing into $venv: $(echo $missing)"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check -r "$req" || die "pip install -r $req failed"
fi
"$venv/bin/python3" -c 'import torch, torchft' 2>/dev/null || die "torch/torchft do not import from $venv"
[ -x "$venv/bin/torchft_lighthouse" ] || die "$venv/bin/torchft_lighthouse missing (torchft install incomplete)"
