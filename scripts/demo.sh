#!/usr/bin/env bash
# make demo: train configs/demo.toml on the prepared Brown corpus, print the final validation perplexity, then a
# short sample from the trained model (its final checkpoint), so the number comes with what it reads like.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
"$build/fedshard" train --config configs/demo.toml "${@:2}"
out=$(sed -n 's/^out = "\(.*\)"/\1/p' configs/demo.toml)
args=("${@:2}")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do [ "${args[i]}" = --out ] && out=${args[i + 1]}; done
sample=(--prompt "The jury said" --max-new-tokens 200 --temperature 0.8 --top-p 0.95 --seed 1)
echo "sample: fedshard generate $out$(printf ' %q' "${sample[@]}")"
"$build/fedshard" generate "$out" "${sample[@]}"
