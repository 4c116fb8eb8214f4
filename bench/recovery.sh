#!/usr/bin/env bash
# A lost group, in-job (ULFM) against today's relaunch: fl-fsdp, 4 groups of 2 on 8 ranks, K = 4, group 3's
# two ranks killed (kill -9, FEDSHARD_FAULT) in step 6. In-job: the CUDA variant's build (Open MPI 5 with
# ULFM) under `mpirun --with-ft ulfm`; relaunch: the CPU build (Open MPI 4.1) under scripts/fedshard-elastic.sh,
# which relaunches groups 0-2 on 6 ranks from the last checkpoint. Each against an uninterrupted run of its
# own build and MPI; and in-job with federation.rejoin_after = 1, where the kept ranks start replacements for group
# 3 after the round held without it. Prints one table: wall time of the job, time lost against the uninterrupted
# run, the step training went on from, the steps trained again, the groups at the end and the seconds the
# recovery and the rejoin took. Checkpoints every 4 steps in every arm.
# Usage: bench/recovery.sh [STEPS]   (builds: build/ and build-cuda/, e.g. make build build-cuda)
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
steps=${1:-24}
cpu=$root/build/fedshard
ulfm=$root/build-cuda/fedshard
for b in "$cpu" "$ulfm"; do [ -x "$b" ] || { echo "bench/recovery.sh: no $b (make build build-cuda)" >&2; exit 2; }; done
"$ulfm" --version | grep -q "with ULFM" || { echo "bench/recovery.sh: $ulfm has no ULFM" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/raw/gnu" "$tmp/raw/other"
cp /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/LGPL-2.1 "$tmp/raw/gnu/"
cp /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/MPL-2.0 "$tmp/raw/other/"
"$cpu" prepare --input "$tmp/raw" --out "$tmp/corpus" --val-fraction 0.5 >/dev/null
args=(train --model tiny --data "$tmp/corpus" --seq-len 32 --batch-size 2 --steps "$steps" --threads 1
      --eval-every "$steps" --set eval.windows=4 --strategy fl-fsdp --group-size 2 --sync-every 4 --checkpoint-every 4)
fault=kill:6:6,kill:7:6
mpi4=(mpirun --oversubscribe --allow-run-as-root)
mpi5=("$root/.venv/bin/mpirun" --with-ft ulfm --oversubscribe --allow-run-as-root)

timed() {  # LOG COMMAND...: wall seconds of COMMAND (its output in LOG)
  local t0 t1
  t0=$(date +%s.%N)
  "${@:2}" >"$1" 2>&1
  t1=$(date +%s.%N)
  python3 -c "print(f'{$t1 - $t0:.1f}')"
}
# "RESUMED_FROM RECOVER_S GROUPS JOIN_S" of a run directory: the step training went on from after the loss, the
# seconds the recovery took, the groups at the end, the seconds the rejoin took.
after_loss() {
  python3 - "$1/metrics.jsonl" <<'EOF'
import json, sys
lost = resumed = recover = join = groups = None
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j["type"] == "group_lost": lost, recover = j["step"], j["recover_s"]
    if j["type"] == "group_joined": join = j["join_s"]
    if j["type"] == "resume": resumed = j["step"]
    if j["type"] == "summary": groups = len(j["group_sizes"])
print(resumed if resumed is not None else lost, f"{recover:.3f}" if recover is not None else "-", groups,
      f"{join:.2f}" if join is not None else "-")
EOF
}

base4=$(timed "$tmp/base4.log" "${mpi4[@]}" -np 8 "$cpu" "${args[@]}" --out "$tmp/base4")
venv_path=PATH=$root/.venv/bin:$PATH
base5=$(timed "$tmp/base5.log" env "$venv_path" "${mpi5[@]}" -np 8 "$ulfm" "${args[@]}" --out "$tmp/base5")
injob=$(timed "$tmp/injob.log" env "$venv_path" FEDSHARD_FAULT=$fault "${mpi5[@]}" -x FEDSHARD_FAULT -np 8 \
        "$ulfm" "${args[@]}" --out "$tmp/injob")
rejoin=$(timed "$tmp/rejoin.log" env "$venv_path" FEDSHARD_FAULT=$fault "${mpi5[@]}" -x FEDSHARD_FAULT -np 8 \
        "$ulfm" "${args[@]}" --out "$tmp/rejoin" --set federation.rejoin_after=1)
relaunch=$(timed "$tmp/relaunch.log" env FEDSHARD_FAULT=$fault bash "$root/scripts/fedshard-elastic.sh" --max-restarts 1 \
           --np 8 --launcher "${mpi4[*]} -x FEDSHARD_FAULT -np {NP}" -- "$cpu" "${args[@]}" --out "$tmp/relaunch")
for run in base4 base5 injob rejoin relaunch; do
  grep -q '"type":"summary"' "$tmp/$run/metrics.jsonl" 2>/dev/null || { echo "bench/recovery.sh: $run did not finish:"; tail -5 "$tmp/$run.log"; exit 1; }
done
read -r injob_from injob_recover injob_groups _ < <(after_loss "$tmp/injob")
read -r rejoin_from rejoin_recover rejoin_groups rejoin_join < <(after_loss "$tmp/rejoin")
read -r relaunch_from _ relaunch_groups _ < <(after_loss "$tmp/relaunch")
echo "fl-fsdp, 4 groups of 2, K = 4, $steps steps, checkpoints every 4; group 3 (ranks 6, 7) killed in step 6"
echo
echo "| arm | MPI | job wall s | uninterrupted s | lost s | went on from | steps trained again | groups at the end |" \
  "recover_s | join_s |"
echo "|---|---|---|---|---|---|---|---|---|---|"
python3 - "$base5" "$base4" "$injob" "$injob_from" "$injob_recover" "$injob_groups" "$rejoin" "$rejoin_from" \
  "$rejoin_recover" "$rejoin_groups" "$rejoin_join" "$relaunch" "$relaunch_from" "$relaunch_groups" <<'EOF'
import sys
(base5, base4, injob, injob_from, injob_recover, injob_groups, rejoin, rejoin_from, rejoin_recover, rejoin_groups,
 rejoin_join, relaunch, relaunch_from, relaunch_groups) = sys.argv[1:]
# In-job the kept groups go on from the round after the loss (step 8) without training a step again; the
# relaunch trains again from its checkpoint's step to step 5, the last step completed before the kill.
for arm, mpi, wall, base, went_on, again, groups, recover, join in (
        ("in-job (ULFM)", "Open MPI 5.0.11", injob, base5, f"round of step {injob_from}", 0, injob_groups,
         injob_recover, "-"),
        ("in-job, rejoin after 1 round", "Open MPI 5.0.11", rejoin, base5, f"round of step {rejoin_from}", 0,
         rejoin_groups, rejoin_recover, rejoin_join),
        ("relaunch (fedshard-elastic.sh)", "Open MPI 4.1", relaunch, base4, f"checkpoint of step {relaunch_from}",
         5 - int(relaunch_from), relaunch_groups, "-", "-")):
    print(f"| {arm} | {mpi} | {wall} | {base} | {float(wall) - float(base):.1f} | {went_on} | {again} | {groups} | "
          f"{recover} | {join} |")
EOF
