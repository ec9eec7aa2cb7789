#!/usr/bin/env bash
# On the GPU machine: build Pylon, run the CUDA tests, then train the seed preset at its default
# size beside PyTorch FSDP2 (shared/bench/torch_fsdp2_bench.py, copied into .carry/bench) on the
# same GPUs in the same call. Usage: bench/h200_train.sh NPROC OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
nproc=${1:-1}
out=${2:-/tmp/pylon-bench}
mkdir -p "$out"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPYLON_CUDA=ON >"$out/cmake.log" 2>&1
cmake --build build -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
if [[ -z "${SKIP_TESTS:-}" ]]; then ./build/tests/pylon_tests --gtest_filter='Cuda*' >"$out/cuda_tests.log" 2>&1 || true; fi
grep -E '^\[  (PASSED|FAILED) |FAILED  \]' "$out/cuda_tests.log" 2>/dev/null | head -20 || true
grep -B2 -A6 'Failure' "$out/cuda_tests.log" 2>/dev/null | head -60 || true
# Random tokens like the PyTorch benchmark's torch.randint (uniform over the vocabulary).
python3 -c "
import numpy as np
np.random.default_rng(1234).integers(0, 32000, 50_000_000, dtype=np.uint16).tofile('$out/tokens.bin')"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
./build/src/pylon train --preset seed --vocab 32000 --dim 2048 --layers 12 --heads 16 --batch 8 \
  --seq 1024 --steps 30 --lr 3e-4 --weight-decay 0.01 --lr-schedule constant --grad-clip 0 \
  --device cuda --dtype bf16 --data "$out/tokens.bin" --metrics "$out/pylon.jsonl" --log-every 10 \
  2>&1 | tee "$out/pylon.log"
python3 - "$out/pylon.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][5:]  # 5 warm-up steps
ms = statistics.median(r["step_ms"] for r in rows)
tok = 8 * 1024
mm = 12 * 12 * 2048 ** 2 + 32000 * 2048
flops = (6 * mm + 12 * 12 * 1024 * 2048) * tok
print("PYLON " + json.dumps({"step_ms_median": ms, "tokens_per_s_per_gpu": tok / (ms / 1e3),
      "tflops_per_gpu": flops / (ms / 1e3) / 1e12, "pct_of_790": 100 * flops / (ms / 1e3) / 790e12,
      "peak_mem_gb": max(r["peak_mem_bytes"] for r in rows) / 1e9, "final_loss": rows[-1]["loss"]}))
PY
if [[ -f .carry/bench/torch_fsdp2_bench.py ]]; then
  torchrun --nproc_per_node="$nproc" .carry/bench/torch_fsdp2_bench.py --steps 20 --warmup 5 \
    2>&1 | grep RESULT | tee "$out/torch.txt"
fi
