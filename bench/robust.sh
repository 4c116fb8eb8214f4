#!/usr/bin/env bash
# Robust aggregation against a hostile site (issue 63, item 3): four sites, each its own mpirun of one rank (`tiny` on
# Brown, a quarter of the data each by sites.data, seq 64, batch 4, lr 1e-2, K = 4), through one round server shard
# on loopback over mutual TLS. Site 3 attacks at every round from round 1 on (FEDSHARD_SITE_ATTACK: its change times
# S, or random values of standard deviation SIGMA, in place of its change); the server combines the sites' deltas by
# each rule. Per attack and rule: site 0's final validation perplexity (the global model after the last round, which
# every site holds), its gap to the plain mean without an attacker, and the rounds in which the attacker was clipped
# or refused (the server's rounds.jsonl).
# Rules: mean (weighted FedAvg), clip (mean, each delta clipped to --norm-bound), refuse (mean, a delta above the bound
# left out), trimmed:F, median; clip:B and refuse:B with a bound of their own; joined by "+" they compose
# (clip+trimmed:0.25: each delta clipped, then trimmed).
# Usage: bench/robust.sh [BUILD_DIR] [STEPS]   env: ATTACKS ("none scale:10 scale:-4 random:0.05"),
#   RULES ("mean clip refuse refuse:10 trimmed:0.25 clip+trimmed:0.25"; with 4 sites trimmed:0.25 is the median), BOUND (the norm
#   bound: 2), SEED (0)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-256}
attacks=${ATTACKS:-none scale:10 scale:-4 random:0.05}
rules=${RULES:-mean clip refuse refuse:10 trimmed:0.25 clip+trimmed:0.25}
bound=${BOUND:-2}
seed=${SEED:-0}
cd "$(dirname "$0")/.."
[ -f data/brown/manifest.json ] || { echo "run make demo (or scripts/fetch-brown.sh + prepare-brown.sh) first" >&2; exit 1; }
"$build/fedshard" --version | grep -q "sites: yes" || { echo "$build/fedshard was built without sites (gRPC)" >&2; exit 1; }
out=docs/results/robust/$steps
mkdir -p "$out"
work=$(mktemp -d /tmp/fedshard-robust.XXXXXX)
server=
trap '[ -n "$server" ] && kill -9 $server 2>/dev/null; rm -rf "$work"' EXIT
source bench/certs.sh
federation_certs "$work" DNS:localhost,IP:127.0.0.1 roundserver site-0 site-1 site-2 site-3

run_arm() {  # ATTACK RULE DIR
  local attack=$1 rule=$2 run=$3 i pids=() rule_args=()
  local part
  for part in ${rule//+/ }; do
    [ "$part" = clip ] || [ "$part" = refuse ] && part+=":$bound"
    case $part in
      mean) ;;
      clip:*) rule_args+=(--norm-bound "${part#clip:}") ;;
      refuse:*) rule_args+=(--norm-bound "${part#refuse:}" --norm-action refuse) ;;
      *) rule_args+=(--aggregate "$part") ;;
    esac
  done
  rm -rf "$run" "$work/state" "$work/port"
  mkdir -p "$run"
  "$build/fedshard" serve --shard 0/1 --address 127.0.0.1 --state "$work/state" --port-file "$work/port" \
    --tls-cert "$work/roundserver.pem" --tls-key "$work/roundserver.key" --tls-ca "$work/ca.pem" --quorum 4 \
    --round-deadline 600 "${rule_args[@]}" >"$run/server.log" 2>&1 &
  server=$!
  for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
  [ -s "$work/port" ] || { echo "the server did not start: $(tail -n 2 "$run/server.log")" >&2; exit 1; }
  for i in 0 1 2 3; do
    local env=()
    [ "$i" = 3 ] && [ "$attack" != none ] && env=(-x "FEDSHARD_SITE_ATTACK=$attack")
    mpirun --oversubscribe --allow-run-as-root "${env[@]}" -np 1 "$build/fedshard" train --model tiny \
      --data data/brown --seq-len 64 --batch-size 4 --lr 1e-2 --steps "$steps" --sync-every 4 --threads 1 \
      --eval-every "$steps" --set eval.windows=64 --seed "$seed" --strategy fsdp --site "site-$i" \
      --server "127.0.0.1:$(cat "$work/port")" --tls-cert "$work/site-$i.pem" --tls-key "$work/site-$i.key" \
      --tls-ca "$work/ca.pem" --set "sites.data=$i/4" --out "$work/site-$i" >"$run/site-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { echo "site $i failed: $run/site-$i.log: $(tail -n 2 "$run/site-$i.log")" >&2; exit 1; }
  done
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=
  cp "$work/site-0/metrics.jsonl" "$work/state/rounds.jsonl" "$run/"
  rm -rf "$work"/site-*/
}

for attack in $attacks; do
  for rule in $rules; do
    run=$out/$(echo "$attack-$rule" | tr ':+' '_-')
    if [ ! -f "$run/metrics.jsonl" ]; then
      echo "== attack $attack, rule $rule" >&2
      run_arm "$attack" "$rule" "$run"
    fi
  done
done
python3 - "$out" "$bound" $attacks -- $rules <<'PY' | tee "$out/table.md"
import json, math, sys
out, bound = sys.argv[1], sys.argv[2]
split = sys.argv.index("--")
attacks, rules = sys.argv[3:split], sys.argv[split + 1:]
def arm(attack, rule):
    d = f"{out}/{attack}-{rule}".replace(":", "_").replace("+", "-")
    summary = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if '"summary"' in l][-1]
    rounds = [json.loads(l) for l in open(f"{d}/rounds.jsonl")][1:]
    honest = [p["delta_norm"] for r in rounds for p in r["participants"] if p["site"] != "site-3"]
    bad = [p for r in rounds for p in r["participants"] if p["site"] == "site-3"]
    return summary["final_val_ppl"], len(rounds), len(rounds) - len(bad), sum(p["scale"] < 1 for p in bad), honest, bad
base = arm("none", "mean")[0] if "none" in attacks and "mean" in rules else math.nan
print(f"Bound {bound} (clip, refuse); the honest sites' delta norms per round over every arm below.\n")
print("| attack by site 3 | rule | val ppl | gap to mean without attacker | rounds | attacker left out | clipped | attacker's delta norm (median) |")
print("|---|---|---|---|---|---|---|---|")
norms = []
for attack in attacks:
    for rule in rules:
        ppl, n, out_, clipped, honest, bad = arm(attack, rule)
        norms += honest
        bn = sorted(p["delta_norm"] for p in bad)
        med = f"{bn[len(bn) // 2]:.3g}" if bn else "-"
        print(f"| {attack} | {rule} | {ppl:.3f} | {100 * (ppl / base - 1):+.2f}% | {n} | {out_} | {clipped} | {med} |")
norms.sort()
print(f"\nHonest sites' delta norms: median {norms[len(norms) // 2]:.3g}, 90th percentile {norms[int(0.9 * len(norms))]:.3g}, max {norms[-1]:.3g}.")
PY
