# shellcheck shell=bash
# Sourced by the setup-*.sh scripts. install_pins TOOL VENV REQ: creates the project-local VENV if missing
# (python3 -m venv, or $PYTHON) and runs pip on REQ only when one of its pins is missing or at another version
# (a local tag such as +cu130 counts as the pinned release). Never touches the system Python.
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
    # --no-compile: byte-compiling torch and the rest took a third of a 120 s install; Python compiles what it
    # imports on first use.
    "$venv/bin/python3" -m pip install -q --no-compile --disable-pip-version-check -r "$req" ||
      die "pip install -r $req failed"
  fi
}
