#!/usr/bin/env bash
# On the GPU machine: this tree against another revision in one call, for a change that must not
# move the training step. Builds this tree (pylon, the tests) and the other one (pylon only) side by
# side, runs the CUDA tests (TESTS, default 'Cuda*'), then the training step of both builds alternated
# (bench/train_variants.sh: the seed preset, then PRESET_B (default causal), ROUNDS rounds each).
# Make the other tree's archive here first: `git archive REV -o .carry/base.tar`, and carry .carry.
# EXTRA="NAME FLAGS" adds a third variant: this tree with FLAGS (e.g. EXTRA="lean --one-gpu-reshard").
# usage: bench/ab_cuda_device.sh BASE_TAR OUT_DIR   (ROUNDS=2, STEPS=30; SKIP_TESTS=1: no tests)
set -uo pipefail
bash "$(dirname "$0")/device_deps.sh"  # xxHash's headers where the image lacks them
cd "$(dirname "$0")/.."
base_tar=$(realpath "${1:?usage: ab_cuda_device.sh BASE_TAR OUT_DIR}")
out=$(realpath -m "${2:?usage: ab_cuda_device.sh BASE_TAR OUT_DIR}")
mkdir -p "$out" /tmp/ab_base
export NCCL_NVLS_ENABLE=0  # the workplace forbids NVLink multicast
SECONDS=0
tar -xf "$base_tar" -C /tmp/ab_base
( cmake -S /tmp/ab_base -B /tmp/ab_base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPYLON_CUDA=ON -DPYLON_TESTS=OFF \
    > "$out/base_cmake.log" 2>&1 && cmake --build /tmp/ab_base/build -j6 --target pylon > "$out/base_build.log" 2>&1 ) &
base_pid=$!
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPYLON_CUDA=ON > "$out/cmake.log" 2>&1 &&
  cmake --build build -j10 --target pylon pylon_tests > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
wait $base_pid || { tail -40 "$out/base_build.log"; exit 1; }
echo "both built in $SECONDS s"
if [[ -z "${SKIP_TESTS:-}" ]]; then
  OMP_NUM_THREADS=8 timeout "${TESTS_TIMEOUT:-300}" build/tests/pylon_tests --gtest_filter="${TESTS:-Cuda*}" > "$out/tests.log" 2>&1
  echo "tests exit $? after $SECONDS s"
  grep -E '^\[  (PASSED|FAILED) |FAILED  \]|SKIPPED \]' "$out/tests.log" | sort | uniq -c | sort -rn | head -30
  grep -B2 -A10 'Failure' "$out/tests.log" | head -60
fi
python3 -c "
import numpy as np
np.random.default_rng(1234).integers(0, 32000, 50_000_000, dtype=np.uint16).tofile('/tmp/ab_tokens.bin')"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
extra=()
[[ -n "${EXTRA:-}" ]] && extra=("$EXTRA")
ROUNDS=${ROUNDS:-2} bash bench/train_variants.sh build /tmp/ab_tokens.bin "$out/seed" 1 "before=/tmp/ab_base/build" "after" \
  "${extra[@]}"
PRESET=${PRESET_B:-causal} ROUNDS=${ROUNDS:-2} bash bench/train_variants.sh build /tmp/ab_tokens.bin "$out/${PRESET_B:-causal}" 1 \
  "before=/tmp/ab_base/build" "after" "${extra[@]}"
echo "done in $SECONDS s"
