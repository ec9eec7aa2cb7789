#!/usr/bin/env bash
# Installs, builds with warnings as errors, and runs every test (CUDA tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DPYLON_WERROR=ON
ctest --test-dir build --output-on-failure -j"$(nproc)"
