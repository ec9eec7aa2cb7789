#!/usr/bin/env bash
# Installs, builds with warnings as errors, and runs every test (CUDA tests skip without a GPU),
# then the robustness jobs (docs/testing.md): each fuzz target for FUZZ_SECONDS (20), the
# parsers' and CPU trainer's tests under ASan+UBSan, and HOSTILE_CASES (300) hostile-input cases
# against build/src/pylon. Any failure or finding fails the run.
# SKIP_ROBUSTNESS=1 runs the suite alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DPYLON_WERROR=ON
ctest --test-dir build --output-on-failure -j"$(nproc)"
if [[ "${SKIP_ROBUSTNESS:-0}" != 1 ]]; then
  status=0
  FUZZ_JOBS=${FUZZ_JOBS:-$(nproc)} scripts/fuzz.sh "${FUZZ_SECONDS:-20}" || status=1
  scripts/sanitize.sh || status=1
  python3 scripts/hostile.py build/src/pylon --work build/hostile --cases "${HOSTILE_CASES:-300}" --quiet || status=1
  exit $status
fi
