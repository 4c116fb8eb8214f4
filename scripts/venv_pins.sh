# shellcheck shell=bash
# Sourced by the setup-*.sh scripts. install_pins TOOL VENV REQ: creates the project-local VENV if missing
# (python3 -m venv, or $PYTHON) and installs REQ (with uv) only when one of its pins is missing or at another version
# (a local tag such as +cu130 counts as the pinned release). Never touches the system Python.
UV_PIN=uv==0.13.8

die() {
  echo "$tool: error: $*" >&2
  exit 1
}

install_pins() {
  tool=$1
  local venv=$2 req=$3 python=${PYTHON:-python3} missing
  if [ ! -x "$venv/bin/python3" ]; then
    command -v "$python" >/dev/null 2>&1 || die "$python not found"
    "$python" -m venv "$venv" || die "cannot create $venv with $python -m venv (Debian: apt-get install python3-venv)"
  fi
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
    echo "$tool: installing into $venv: ${missing//$'\n'/ }"
    # uv installs the same pins as pip, from its own cache by hard links: the torch/transformers venv in 21 s
    # from PyPI and 0.5 s from the cache, where pip took 122 s from its cache (2026-12-04, docs/perf.md). It is
    # put into the venv itself by pip, pinned; where that fails, pip installs the pins.
    if [ -x "$venv/bin/uv" ] || "$venv/bin/python3" -m pip install -q --disable-pip-version-check "$UV_PIN"; then
      "$venv/bin/uv" pip install -q --python "$venv/bin/python3" -r "$req" || die "uv pip install -r $req failed"
    else
      echo "$tool: no $UV_PIN; installing with pip" >&2
      "$venv/bin/python3" -m pip install -q --no-compile --disable-pip-version-check -r "$req" ||
        die "pip install -r $req failed"
    fi
  fi
}
