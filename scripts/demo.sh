#!/usr/bin/env bash
# make demo: train configs/demo.toml on the prepared Brown corpus and print the final validation perplexity.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
exec "$build/fedshard" train --config configs/demo.toml "${@:2}"
