#!/usr/bin/env bash
# `fedshard --version` names the MPI library the binary runs with, as that MPI's own tools name it, and says
# "with ULFM" exactly when that MPI has the fault-tolerance extension (its ompi_info reports FT support). The
# tests put the build's MPI first on PATH (tests/CMakeLists.txt): Debian's Open MPI 4.1 for the CPU variant,
# the venv's Open MPI 5 for the CUDA variant.
# Usage: mpi_version.sh FEDSHARD_BINARY
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/train_helpers.sh"

line=$("$bin" --version 2>&1) || fail "--version exited $?"
mpi=${line##*; MPI: }
mpi=${mpi%%;*}
echo "     --version names the MPI: $mpi"
want=$(mpirun --version 2>/dev/null | sed -n '1s/^mpirun (Open MPI) \([0-9.]*\).*/\1/p')
if [ -z "$want" ]; then
  fail "mpirun on PATH ($(command -v mpirun)) is not Open MPI"
elif [[ "$mpi" == "Open MPI v$want"* ]]; then
  echo "ok   the MPI is the one mpirun on PATH reports: Open MPI $want"
else
  fail "--version says '$mpi', mpirun on PATH is Open MPI $want"
fi
if ompi_info 2>/dev/null | grep -q "FT MPI support: yes"; then ft=yes; else ft=no; fi
if [[ "$mpi" == *" with ULFM" ]]; then said=yes; else said=no; fi
[ "$ft" = "$said" ] && echo "ok   ULFM: ompi_info says $ft, --version says $said" ||
  fail "ULFM: ompi_info says $ft, --version says $said"

[ "$fails" -eq 0 ] && echo "mpi_version: all passed" || echo "mpi_version: $fails failed"
[ "$fails" -eq 0 ]
