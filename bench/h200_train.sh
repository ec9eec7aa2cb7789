#!/usr/bin/env bash
# On the GPU machine: build Pylon, optionally run the CUDA tests, then train the seed preset at its
# default size with Pylon on 1 GPU and on NPROC GPUs (FSDP over NCCL), and PyTorch FSDP2
# (shared/bench/torch_fsdp2_bench.py, copied into .carry/bench) on NPROC GPUs, in the same call.
# Usage: bench/h200_train.sh NPROC OUT_DIR   (SKIP_TESTS=1: no tests; TESTS='Cuda*': gtest filter;
#   PYLON_FLAGS='--whole-root --reduce-dtype bf16': extra flags for every Pylon run;
#   ALSO_FLAGS='--one-gpu-reshard': a second Pylon run at each count with these flags too (pylon_N_also.*);
#   PRESET=seed|causal (causal: PyTorch runs bench/torch_causal_fsdp2_bench.py, SDPA is_causal + RoPE);
#   BATCH=8 SEQ=1024: per GPU; TORCH=eager|compile|both|none: the PyTorch variants, default eager)
# NPROC may be a list, "1 2 4 8": Pylon and PyTorch then run at each count (the scaling run), and
# PROFILE=1 adds a profiled 2-step run at the largest count, merged and analysed into OUT_DIR.
set -euo pipefail
bash "$(dirname "$0")/device_deps.sh"  # xxHash's headers where the image lacks them
cd "$(dirname "$0")/.."
nproc=${1:-1}
out=${2:-/tmp/pylon-bench}
preset=${PRESET:-seed} batch=${BATCH:-8} seq=${SEQ:-1024}
build=$(realpath -m "${BUILD_DIR:-build}")
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # the workplace forbids NVLink multicast
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPYLON_CUDA=ON >"$out/cmake.log" 2>&1
cmake --build "$build" -j"$(nproc)" --target pylon pylon_bench_kernels >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
# The PyTorch baseline: ../shared/bench where this checkout sits beside it, else the copy carried in .carry/bench.
torch_bench=""
for f in ../shared/bench/torch_fsdp2_bench.py .carry/bench/torch_fsdp2_bench.py; do
  [[ -f $f ]] && { torch_bench=$f; break; }
done
[[ $preset == causal ]] && torch_bench=bench/torch_causal_fsdp2_bench.py
[[ -n $torch_bench ]] || echo "WARNING: no torch_fsdp2_bench.py in ../shared/bench or .carry/bench: PyTorch will not run"
if [[ -z "${SKIP_TESTS:-}" ]]; then
  cmake --build "$build" -j"$(nproc)" --target pylon_tests >>"$out/build.log" 2>&1 || tail -40 "$out/build.log"
  # The CPU reference runs inside the tests use small models: uncapped, OpenMP's CPU trainer ran at
  # ~340 tokens/s on the 32-core machine (a 60-step test past its time limit); with 8 threads
  # CudaTrainer.FollowsTheCpuLossCurve took 1.2 s in all (2026-11-30).
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} timeout 400 "./$build/tests/pylon_tests" --gtest_filter="${TESTS:-Cuda*}" >"$out/cuda_tests.log" 2>&1 || true
  grep -E '^\[  (PASSED|FAILED) |FAILED  \]' "$out/cuda_tests.log" 2>/dev/null | head -30 || true
  grep -B2 -A8 'Failure' "$out/cuda_tests.log" 2>/dev/null | head -80 || true
fi
# The ceiling for "% of peak": cuBLASLt's best large bf16 GEMM on this GPU, measured now.
peak=$("$build/bench/pylon_bench_kernels" --peak | awk '/^PEAK_TFLOPS/ {print $2}')
echo "measured bf16 GEMM peak (pylon_bench_kernels --peak): ${peak:-?} TFLOP/s"
# Random tokens like the PyTorch benchmark's torch.randint (uniform over the vocabulary).
python3 -c "
import numpy as np
np.random.default_rng(1234).integers(0, 32000, 50_000_000, dtype=np.uint16).tofile('$out/tokens.bin')"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
counts=$(printf '%s\n' 1 $nproc | sort -un)
largest=$(printf '%s\n' $nproc | sort -n | tail -n 1)
runs=("")
[[ -n "${ALSO_FLAGS:-}" ]] && runs+=("_also")
for run in "${runs[@]}"; do for n in $counts; do
  flags=${PYLON_FLAGS:-}
  [[ -n $run ]] && flags="$flags $ALSO_FLAGS"
  timeout 120 "$build/src/pylon" train --preset "$preset" --vocab 32000 --dim 2048 --layers 12 --heads 16 \
    --batch "$batch" --seq "$seq" --steps "${STEPS:-30}" --lr 3e-4 --weight-decay 0.01 --lr-schedule constant --grad-clip 0 \
    --device cuda --dtype bf16 --nproc-per-node "$n" --data "$out/tokens.bin" \
    --metrics "$out/pylon_$n$run.jsonl" --log-every 10 $flags 2>&1 | tee "$out/pylon_$n$run.log"
  echo "Pylon flags:$flags"
  python3 - "$out/pylon_$n$run.jsonl" "$n" "${peak:-0}" "$batch" "$seq" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][5:]  # 5 warm-up steps
n, peak, batch, seq = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
med = lambda k: statistics.median(r[k] for r in rows)
ms = med("step_ms")
tok = batch * seq  # per GPU
mm = 12 * 12 * 2048 ** 2 + 32000 * 2048
flops = (6 * mm + 12 * 12 * seq * 2048) * tok  # attention counted full (causal too), as PyTorch's script
comm = med("gather_ms") + med("reduce_ms")
exposed = med("exposed_wait_ms") + med("tail_ms")
print("PYLON " + json.dumps({"gpus": n, "step_ms_median": round(ms, 2),
      "tokens_per_s_per_gpu": round(tok / (ms / 1e3)), "tflops_per_gpu": round(flops / (ms / 1e3) / 1e12, 1),
      "pct_of_measured_peak": round(100 * flops / (ms / 1e3) / 1e12 / peak, 1) if peak > 0 else None,
      "peak_mem_gb_rank0": round(max(r["peak_mem_bytes"] for r in rows) / 1e9, 2),
      "allocated_gb": round(rows[-1]["allocated_bytes"] / 1e9, 2),
      "gather_ms": round(med("gather_ms"), 2), "reduce_ms": round(med("reduce_ms"), 2),
      "exposed_wait_ms": round(med("exposed_wait_ms"), 2), "tail_ms": round(med("tail_ms"), 2),
      "hidden_share": round(1 - exposed / comm, 3) if n > 1 and comm > 0 else None,
      "energy_j": round(med("energy_j"), 1) if "energy_j" in rows[0] else None,
      "final_loss": rows[-1]["loss"]}))
PY
done; done
if [[ -n $torch_bench ]]; then
  case ${TORCH:-eager} in
    eager) variants=("") ;; compile) variants=(--compile) ;; none) variants=() ;; *) variants=("" --compile) ;;
  esac
  for n in $nproc; do
    for v in "${variants[@]}"; do
      timeout "${TORCH_TIMEOUT:-240}" torchrun --nproc_per_node="$n" "$torch_bench" --steps 20 --warmup 5 \
        --batch "$batch" --seq "$seq" $v 2>"$out/torch_${n}${v//-/_}.err" | grep RESULT | tee -a "$out/torch.txt" ||
        tail -n 5 "$out/torch_${n}${v//-/_}.err"
    done
  done
fi
if [[ -n "${PROFILE:-}" ]]; then  # one profiled run at the largest count: trace, table, analysis
  timeout 180 "$build/src/pylon" train --preset seed --vocab 32000 --dim 2048 --layers 12 --heads 16 \
    --batch 8 --seq 1024 --steps 14 --lr 3e-4 --lr-schedule constant --grad-clip 0 --device cuda \
    --nproc-per-node "$largest" --data "$out/tokens.bin" --profile "$out/prof" --profile-wait 10 \
    --profile-warmup 1 --profile-active 2 >"$out/profiled.log" 2>&1 || tail -n 20 "$out/profiled.log"
  "$build/src/pylon" trace merge "$out/trace_merged.json" "$out"/prof/trace.rank*.json &&
    "$build/src/pylon" trace analyze "$out/trace_merged.json" | tee "$out/analysis.txt"
fi
