#!/usr/bin/env bash
# The main job on a fresh machine: install, build, train the causal preset at a small size on the
# default English text (a few minutes on 2 CPU cores), save a checkpoint, continue a prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ckpt=${PYLON_DEMO_DIR:-runs/demo}
mkdir -p "$(dirname "$ckpt")"
./build/src/pylon train --save "$ckpt" --metrics "$ckpt.metrics.jsonl" "$@"
echo
echo "--- a continuation (greedy would repeat; this samples at temperature 0.8, top-k 40):"
./build/src/pylon generate --model "$ckpt" --prompt "The secret of happiness is" --max-new-tokens 60 --seed 1
