#!/usr/bin/env bash
# On the GPU machine: build Pylon, optionally run CUDA tests, then train a Llama-style model of about
# 1B parameters (hidden 2048, 16 layers, 32 heads over 8 KV heads, MLP 5632, vocab 32000, seq 2048)
# with Pylon on 1 GPU, and the same model in PyTorch FSDP2 (bench/torch_llama_fsdp2_bench.py),
# eager and with per-block torch.compile, in the same call.
# Usage: bench/h200_llama.sh OUT_DIR   (SKIP_TESTS=1: no tests; TESTS='Cuda*': gtest filter;
#   BATCH=4 SEQ=2048 STEPS=20; PYLON_FLAGS: extra flags for the Pylon run; TORCH=eager|compile|both|none)
set -euo pipefail
bash "$(dirname "$0")/device_deps.sh"  # xxHash's headers where the image lacks them
cd "$(dirname "$0")/.."
out=${1:-/tmp/pylon-llama}
build=$(realpath -m "${BUILD_DIR:-build}")
batch=${BATCH:-4} seq=${SEQ:-2048} steps=${STEPS:-20}
model=(--vocab 32000 --dim 2048 --layers 16 --heads 32)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # the workplace forbids NVLink multicast
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPYLON_CUDA=ON >"$out/cmake.log" 2>&1
cmake --build "$build" -j"$(nproc)" --target pylon pylon_tests >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "built at ${SECONDS}s"
if [[ -z "${SKIP_TESTS:-}" ]]; then
  # Small CPU reference runs inside the tests: 8 OpenMP threads (bench/h200_train.sh says why).
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} timeout "${TESTS_TIMEOUT:-300}" "$build/tests/pylon_tests" \
    --gtest_filter="${TESTS:-Cuda*}" >"$out/cuda_tests.log" 2>&1 || true
  grep -E '^\[  (PASSED|FAILED) |FAILED  \]' "$out/cuda_tests.log" | head -40 || true
  grep -B2 -A8 'Failure' "$out/cuda_tests.log" | head -60 || true
  echo "tests done at ${SECONDS}s"
fi
python3 -c "
import numpy as np
np.random.default_rng(1234).integers(0, 32000, 20_000_000, dtype=np.uint16).tofile('$out/tokens.bin')"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
timeout "${PYLON_TIMEOUT:-180}" "$build/src/pylon" train --preset llama "${model[@]}" --kv-heads 8 --ffn-dim 5632 \
  --batch "$batch" --seq "$seq" --steps $((steps + 5)) --lr 3e-4 --weight-decay 0.01 --lr-schedule constant \
  --grad-clip 0 --device cuda --dtype bf16 --data "$out/tokens.bin" --metrics "$out/pylon.jsonl" --log-every 5 \
  ${PYLON_FLAGS:-} 2>&1 | tee "$out/pylon.log" | tail -n 4
python3 - "$out/pylon.jsonl" "$batch" "$seq" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][5:]  # 5 warm-up steps
batch, seq = int(sys.argv[2]), int(sys.argv[3])
ms = statistics.median(r["step_ms"] for r in rows)
tok = batch * seq
D, L, H, KV, hd, F, V = 2048, 16, 32, 8, 64, 5632, 32000
mm = L * (D * (H + 2 * KV) * hd + H * hd * D + 3 * D * F) + V * D  # matmul parameters a token passes
flops = (6 * mm + 12 * L * seq * H * hd) * tok  # attention counted full, as the seed benchmark does
print("PYLON " + json.dumps({"model": "llama", "batch": batch, "seq": seq, "step_ms_median": round(ms, 2),
      "tokens_per_s_per_gpu": round(tok / (ms / 1e3)), "tflops_per_gpu": round(flops / (ms / 1e3) / 1e12, 1),
      "peak_mem_gb_rank0": round(max(r["peak_mem_bytes"] for r in rows) / 1e9, 2),
      "final_loss": rows[-1]["loss"]}))
PY
echo "pylon done at ${SECONDS}s"
torch_flags=(--batch "$batch" --seq "$seq" --steps "$steps" --warmup 5)
case ${TORCH:-both} in
  eager) variants=("") ;; compile) variants=(--compile) ;; none) variants=() ;; *) variants=("" --compile) ;;
esac
for v in "${variants[@]}"; do
  timeout "${TORCH_TIMEOUT:-240}" torchrun --nproc_per_node=1 bench/torch_llama_fsdp2_bench.py "${torch_flags[@]}" $v \
    2>"$out/torch${v//-/_}.err" | grep RESULT | tee -a "$out/torch.txt" || tail -n 5 "$out/torch${v//-/_}.err"
  echo "torch ${v:-eager} done at ${SECONDS}s"
done
