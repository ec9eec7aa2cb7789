#!/usr/bin/env bash
# Builds Pylon with CUDA, runs every Cuda* test suite in its own process (a crash stays in its
# suite), the small-size suites again under compute-sanitizer memcheck, then the kernel benchmark
# and, where PyTorch is installed, the same ops in PyTorch eager.
# Full logs go to $OUT (or ./cuda-logs); a short summary is printed last.
set -u
out=${OUT:-cuda-logs}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv > "$out/gpu.txt" 2>&1
if ! { cmake -S . -B build -G Ninja -DPYLON_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a > "$out/cmake.txt" 2>&1 &&
       cmake --build build -j"$(nproc)" > "$out/build.txt" 2>&1; }; then
  tail -40 "$out/cmake.txt" "$out/build.txt"
  exit 1
fi
tests=./build/tests/pylon_tests
suites=$($tests --gtest_list_tests --gtest_filter='Cuda*' | grep -E '^Cuda' | tr -d '.')
: > "$out/tests.txt"
for s in $suites; do
  timeout 300 $tests --gtest_filter="$s.*" >> "$out/tests.txt" 2>&1 || echo "[ SUITE FAILED ] $s (exit $?)" >> "$out/tests.txt"
done
small='CudaCast.Unaligned*:CudaEmbedding.*Odd*:CudaRmsNorm.*Odd*:CudaRmsNorm.BackwardInPlace*:CudaSilu.OddSizes'
small+=':CudaRope.OddHeadSize:CudaColumnSum.*Odd*:CudaCrossEntropy.SmallAndOddVocab:CudaGemm.AllTransposes*'
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
grep -E '^\[  FAILED  \] Cuda.*\)$|SUITE FAILED|Actual: false|exception|what\(\)' "$out/tests.txt" | cut -c1-300 | head -40
echo "== memcheck"; grep -E 'ERROR SUMMARY|memcheck exit|Invalid|FAILED' "$out/memcheck.txt" | head -20
grep -h '^\[ gemm diag \]' "$out/tests.txt" | cut -c1-140 | head -24
echo "== bench"; cat "$out/bench.txt"
[ -f "$out/torch.txt" ] && { echo "== PyTorch $(python3 -c 'import torch; print(torch.__version__)')"; tail -25 "$out/torch.txt"; }
