#!/usr/bin/env bash
# On the GPU machine: build pylon, then (1) tracing overhead on the seed preset's default size:
# step time (device events) of the profiled steps with and without --profile, alternated;
# (2) a CUPTI-traced run's trace, table and analysis; (3) Nsight Compute's counters for one
# training step of a 2-layer model at the same width, and `pylon roofline --ncu-csv` on them.
# usage: bench/profile_device.sh WORK_DIR TARBALL   (logs, traces, CSV and SVG packed into TARBALL)
#   BUILD_DIR=DIR: reuse a configured CUDA build there; ROUNDS=N: overhead rounds (2);
#   OVERHEAD_ONLY=1: stop after (1) and (2)
set -uo pipefail
bash "$(dirname "$0")/device_deps.sh"  # xxHash's headers where the image lacks them
cd "$(dirname "$0")/.."
out=${1:-/tmp/pylon-prof}
tarball=${2:-/tmp/pylon-prof.tar.gz}
mkdir -p "$out"
b=${BUILD_DIR:-/tmp/pylon-prof-build}
if [[ -z "${BUILD_DIR:-}" ]]; then
  cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DPYLON_CUDA=ON -DPYLON_CUPTI=ON -DPYLON_TESTS=OFF \
    >"$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
fi
cmake --build $b --target pylon -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -B2 -A8 error "$out/build.log" | head -60; exit 1; }
pylon=$b/src/pylon
python3 -c "
import numpy as np
np.random.default_rng(1234).integers(0, 32000, 20_000_000, dtype=np.uint16).tofile('$out/tokens.bin')"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
seed="--preset seed --vocab 32000 --dim 2048 --heads 16 --batch 8 --seq 1024 --lr 3e-4 --weight-decay 0.01
      --lr-schedule constant --grad-clip 0 --device cuda --data $out/tokens.bin --log-every 0"

# (1) + (2): steps 5..10 are the profiled ones (wait 3, warmup 2, active 6).
prof="--profile-wait 3 --profile-warmup 2 --profile-active 6"
for round in $(seq "${ROUNDS:-2}"); do
  $pylon train $seed --layers 12 --steps 12 --metrics "$out/off.$round.jsonl" >"$out/off.$round.log" 2>&1 || tail -5 "$out/off.$round.log"
  $pylon train $seed --layers 12 --steps 12 --metrics "$out/on.$round.jsonl" --profile "$out/prof.$round" $prof \
    >"$out/on.$round.log" 2>&1 || tail -5 "$out/on.$round.log"
done
python3 - "$out" <<'PY'
import json, statistics, sys, glob
out = sys.argv[1]
def steps(path):  # step_ms of steps 5..10 (0-based), the profiled ones
    return [json.loads(l)["step_ms"] for l in open(path)][5:11]
for mode in ("off", "on"):
    ms = [m for f in sorted(glob.glob(f"{out}/{mode}.*.jsonl")) for m in steps(f)]
    print(f"OVERHEAD {mode}: median {statistics.median(ms):.3f} ms over {len(ms)} steps: " + " ".join(f"{m:.2f}" for m in ms))
PY
sed -n '/profile of rank 0/,$p' "$out/on.1.log" | head -80
if [[ -n "${OVERHEAD_ONLY:-}" ]]; then
  tar -czf "$tarball" -C "$out" --exclude tokens.bin . && ls -la "$tarball"
  exit 0
fi

# (3) ncu on one step of a 2-layer model (every kernel of step 0 after the first cast).
metrics="gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,sm__sass_thread_inst_executed_op_fadd_pred_on.sum,sm__sass_thread_inst_executed_op_fmul_pred_on.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
ncu --query-metrics >"$out/ncu_query.txt" 2>&1
tensor=$(grep -oE '^sm__ops_path_tensor_src_(bf16|fp16)_dst_fp32 ' "$out/ncu_query.txt" | tr -d ' ' | sed 's/$/.sum/' | paste -sd, -)
echo "tensor metrics: ${tensor:-none}"
[ -n "$tensor" ] && metrics="$metrics,$tensor"
timeout 150 ncu --clock-control none --csv --page raw --metrics "$metrics,device__attribute_display_name" \
  --launch-count 100 --log-file "$out/ncu.csv" $pylon train $seed --layers 2 --steps 1 >"$out/ncu_app.log" 2>&1 \
  || { echo "ncu with the device name failed; without it"; tail -3 "$out/ncu.csv";
       timeout 150 ncu --clock-control none --csv --page raw --metrics "$metrics" --launch-count 100 \
         --log-file "$out/ncu.csv" $pylon train $seed --layers 2 --steps 1 >"$out/ncu_app.log" 2>&1; }
tail -2 "$out/ncu_app.log"
$pylon roofline --ncu-csv "$out/ncu.csv" --json "$out/roofline.json" --svg "$out/roofline.svg" --top 40
$pylon trace analyze "$out/prof.1/trace.rank0.json" >/dev/null && echo "trace analyze ok"

# (4) the same model's step 1 through CUPTI's range profiler, compared kernel by kernel with ncu.
$pylon train $seed --layers 2 --steps 3 --profile "$out/counters" --profile-wait 1 --profile-warmup 0 \
  --profile-active 1 --profile-roofline >"$out/counters.log" 2>&1 || tail -5 "$out/counters.log"
python3 - "$out/roofline.json" "$out/counters/roofline.json" <<'PY'
import json, re, sys
# ncu and the C++ demangler spell names apart: ncu drops nested namespaces after an anonymous one
# and writes template bools as 0/1.
key = lambda n: re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", n.replace("pylon::cuda::", "pylon::")))
ncu = {key(k["name"]): k for k in json.load(open(sys.argv[1]))["kernels"]}
cupti = {key(k["name"]): k for k in json.load(open(sys.argv[2]))["kernels"]}
both = [n for n in cupti if n in ncu]
print(f"COMPARE {len(both)} kernels in both (ncu {len(ncu)}, cupti {len(cupti)})")
worst = {"sm_pct": 0, "dram_pct": 0}
for n in sorted(both, key=lambda n: -ncu[n]["seconds"]):
    a, b = ncu[n], cupti[n]
    d = {m: b[m] - a[m] for m in worst}
    for m in worst: worst[m] = max(worst[m], abs(d[m]))
    print(f"  {n[:60]:60s} us {a['seconds']*1e6/a['launches']:9.1f} {b['seconds']*1e6/b['launches']:9.1f}  "
          f"SM {a['sm_pct']:5.1f} {b['sm_pct']:5.1f}  DRAM {a['dram_pct']:5.1f} {b['dram_pct']:5.1f}")
print("COMPARE max |cupti - ncu| points: " + json.dumps(worst))
PY
tar -czf "$tarball" -C "$out" --exclude tokens.bin . && ls -la "$tarball"
