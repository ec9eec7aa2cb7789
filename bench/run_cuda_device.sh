#!/usr/bin/env bash
# Builds Pylon with CUDA, runs every Cuda* test suite in its own process (a crash stays in its
# suite), the small-size suites again under compute-sanitizer memcheck, then the kernel benchmark
# and, where PyTorch is installed, the same ops in PyTorch eager.
# Full logs go to $OUT (or ./cuda-logs); a short summary is printed last.
set -u
bash "$(dirname "$0")/device_deps.sh"  # xxHash's headers where the image lacks them
out=${OUT:-cuda-logs}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv > "$out/gpu.txt" 2>&1
if ! { cmake -S . -B build -G Ninja -DPYLON_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a > "$out/cmake.txt" 2>&1 &&
       cmake --build build -j"$(nproc)" > "$out/build.txt" 2>&1; }; then
  tail -40 "$out/cmake.txt" "$out/build.txt"
  exit 1
fi
tests=./build/tests/pylon_tests
: > "$out/tests.txt"
# The op harness's CUDA rows (tests/ops/cuda/cuda_op_table.cpp), one process per op: rows are named
# <op>_<dtype>_<shape>..., the op as their GetParam() line gives it.
ops=$($tests --gtest_list_tests --gtest_filter='Cuda/OpHarness.*' | sed -n 's/.*GetParam() = \([a-z0-9_]*\) \[.*/\1/p' | sort -u)
for op in $ops; do
  f="Cuda/OpHarness.*/${op}_bf16_*:Cuda/OpHarness.*/${op}_f32_*"
  timeout 300 $tests --gtest_filter="$f" >> "$out/tests.txt" 2>&1 || echo "[ SUITE FAILED ] $op (exit $?)" >> "$out/tests.txt"
done
# The other Cuda* suites (argument checks, the model and the trainer), each in its own process.
suites=$($tests --gtest_list_tests --gtest_filter='Cuda*' | grep -E '^Cuda' | grep -v '^Cuda/OpHarness' | tr -d '.')
for s in $suites; do
  timeout 300 $tests --gtest_filter="$s.*" >> "$out/tests.txt" 2>&1 || echo "[ SUITE FAILED ] $s (exit $?)" >> "$out/tests.txt"
done
# Small rows under memcheck: odd sizes, unaligned buffers, the in-place backward, every bf16 GEMM.
r='Cuda/OpHarness.*'
small="$r/cast_*_unaligned:$r/embedding_*_N7_*:$r/embedding_*_N1000_*:$r/embedding_*_N999_*"
small+=":$r/*rmsnorm_*_N7_*:$r/*rmsnorm_*_N33_*:$r/*rmsnorm_*_N37_*:$r/*rmsnorm_*_N100_*:$r/*rmsnorm_*_N1000_*"
small+=":$r/rmsnorm_*in_place"
small+=":$r/silu_*_bf16_n7*:$r/silu_forward_bf16_n1000003*:$r/silu_backward_bf16_n1000003*"
small+=":$r/rope_*_bf16_B2_T7_*:$r/rope_*_bf16_B1_T3_*:$r/bias_backward_*_N7_*:$r/bias_backward_*_N33_*"
small+=":$r/bias_backward_*_N100003_*:$r/bias_backward_*_N1000_*:$r/bias_backward_*_N4099_*"
small+=":$r/cross_entropy_*_bf16_N5_*:$r/cross_entropy_*_bf16_N7_*:$r/cross_entropy_*_bf16_N3_*:$r/gemm_bf16_*"
if command -v compute-sanitizer > /dev/null; then
  timeout 240 compute-sanitizer --tool memcheck --print-limit 20 $tests --gtest_filter="$small" > "$out/memcheck.txt" 2>&1
  echo "memcheck exit $?" >> "$out/memcheck.txt"
fi
timeout 200 ./build/bench/pylon_bench_kernels > "$out/bench.txt" 2>&1
if python3 -c 'import torch' 2> /dev/null; then
  timeout 200 python3 bench/torch_kernels_bench.py > "$out/torch.txt" 2>&1
fi
echo "== gpu"; cat "$out/gpu.txt"
echo "== build warnings: $(grep -c 'warning' "$out/build.txt")"; grep -m5 'warning' "$out/build.txt"
echo "== tests: $(grep -c '^\[       OK \]' "$out/tests.txt") passed, $(grep -c '^\[  FAILED  \] Cuda.*)$' "$out/tests.txt") failed, $(grep -c '^\[  SKIPPED \]' "$out/tests.txt") skipped"
grep -E '^\[  FAILED  \] Cuda.*\)$|SUITE FAILED|Actual: false|elements outside|differ bitwise|compared no output|exception|what\(\)' \
  "$out/tests.txt" | cut -c1-300 | head -40
echo "== memcheck"; grep -E 'ERROR SUMMARY|memcheck exit|Invalid|FAILED' "$out/memcheck.txt" | head -20
grep -h '^\[ gemm diag \]' "$out/tests.txt" | cut -c1-140 | head -24
echo "== bench"; cat "$out/bench.txt"
[ -f "$out/torch.txt" ] && { echo "== PyTorch $(python3 -c 'import torch; print(torch.__version__)')"; tail -25 "$out/torch.txt"; }
