# Sourced by the shell tests that train on a small real corpus. Needs $bin (the fedshard binary) and $tmp.
fails=0
mpi=(mpirun --oversubscribe --allow-run-as-root)
# rank_files DIR: mpirun's options that put each rank's output in files of its own under DIR (no other process
# writes into its lines); rank_output DIR: every rank's stderr and stdout from there. Open MPI 4 writes
# DIR/1/rank.N/{stdout,stderr}; Open MPI 5 (the CUDA variant's) DIR/<job>/rank.N/, names the option differently
# and, asked for both files, creates only the one written first (5.0.11: PMIX_ERR_EXISTS): it merges them.
if mpirun --version 2>/dev/null | grep -q "(Open MPI) [0-4]\."; then
  rank_files() { echo "--output-filename $1:nocopy"; }
else
  rank_files() { echo "--output merge-stderr-to-stdout,dir=$1"; }
fi
rank_output() { cat "$1"/*/rank.*/std* 2>/dev/null; }
py=/usr/bin/python3

fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}
ok() { echo "ok   $*"; }

# A corpus of four license texts in two sources, prepared into $tmp/corpus.
make_corpus() {
  mkdir -p "$tmp/raw/gnu" "$tmp/raw/other"
  cp /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/LGPL-2.1 "$tmp/raw/gnu/"
  cp /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/MPL-2.0 "$tmp/raw/other/"
  "$bin" prepare --input "$tmp/raw" --out "$tmp/corpus" --val-fraction 0.5 >/dev/null || { echo "FAIL: prepare"; exit 1; }
}

# losses RUN [FIRST]: "step loss" per step line from step FIRST on, floats printed exactly.
losses() { $py -c "
import json,sys
for l in open('$1/metrics.jsonl'):
    j = json.loads(l)
    if j['type'] == 'step' and j['step'] >= ${2:-0}: print(j['step'], repr(j['loss']))"; }

# World ranks' PIDs of the fedshard processes whose command line mentions PATTERN.
rank_pids() {  # PATTERN RANK...
  local pattern=$1 p r
  shift
  for p in $(pgrep -f "$pattern"); do
    r=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    for want in "$@"; do [ -n "$r" ] && [ "$r" = "$want" ] && echo "$p"; done
  done
}

# Waits (up to 60 s) until RUN's metrics have a step line at or past STEP.
wait_for_step() {  # RUN STEP
  for _ in $(seq 1200); do
    [ -f "$1/metrics.jsonl" ] && [ "$(grep -c '"type":"step"' "$1/metrics.jsonl")" -ge "$2" ] && return 0
    sleep 0.05
  done
  return 1
}
