#!/usr/bin/env bash
# On the GPU machine: the Nsight Compute exports users make, of the same kernels of a one-step run of
# a small seed model, for `pylon roofline --ncu-csv` (issue 37): Pylon's own --metrics list, the
# default sections, --set full, the SpeedOfLight section alone, --page details, and a .ncu-rep report
# read back with `ncu --import`. Also two profiled traces of the same model (batch 4 and 8) for
# `pylon trace diff`, and what NVML reports (nvidia-smi -q). Everything lands in OUT_DIR/exports.tgz.
# usage: bench/ncu_exports_device.sh OUT_DIR   (BUILD_DIR=... to reuse a build; KERNELS=16)
set -uo pipefail
bash "$(dirname "$0")/device_deps.sh"  # xxHash's headers where the image lacks them
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-/tmp/pylon-ncu}")
b=${BUILD_DIR:-/tmp/pylon-prof-build}
n=${KERNELS:-16}
mkdir -p "$out/x"
cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPYLON_CUDA=ON -DPYLON_CUPTI=ON >"$out/cmake.log" 2>&1 ||
  { tail -30 "$out/cmake.log"; exit 1; }
cmake --build "$b" --target pylon -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -B2 -A8 error "$out/build.log" | head -60; exit 1; }
echo "built at ${SECONDS}s"
pylon=$b/src/pylon
python3 -c "
import numpy as np
np.random.default_rng(1234).integers(0, 4096, 400_000, dtype=np.uint16).tofile('$out/tokens.bin')"
model=(--preset seed --vocab 4096 --dim 512 --heads 8 --layers 2 --seq 256 --lr 3e-4 --lr-schedule constant
       --grad-clip 0 --device cuda --data "$out/tokens.bin" --log-every 0)
cmd=(train "${model[@]}" --batch 4 --steps 1)
metrics=$($pylon roofline --help | grep -oE 'gpu__time_duration[^ ]+' | head -1)
ncu_run() {  # name, ncu flags...
  local name=$1; shift
  local start=$SECONDS
  timeout 240 ncu --clock-control none -c "$n" "$@" "$pylon" "${cmd[@]}" >"$out/x/$name.app.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $((SECONDS - start)) s"
}
ncu_run pylon_metrics --csv --page raw --metrics "$metrics" --log-file "$out/x/pylon_metrics.csv"
ncu_run default_raw --csv --page raw --log-file "$out/x/default_raw.csv"
ncu_run default_details --csv --page details --log-file "$out/x/default_details.csv"
ncu_run full_raw --set full --csv --page raw --log-file "$out/x/full_raw.csv"
ncu_run sol_raw --section SpeedOfLight --csv --page raw --log-file "$out/x/sol_raw.csv"
ncu_run report --set full -o "$out/x/report" -f
ncu --import "$out/x/report.ncu-rep" --csv --page raw >"$out/x/import_raw.csv" 2>"$out/x/import.err"; echo "import raw rc=$?"
ncu --import "$out/x/report.ncu-rep" --csv --page details >"$out/x/import_details.csv" 2>>"$out/x/import.err"; echo "import details rc=$?"
rm -f "$out/x/report.ncu-rep"
for f in "$out"/x/*.csv; do
  "$pylon" roofline --ncu-csv "$f" --top 20 >"${f%.csv}.roofline.txt" 2>&1; echo "roofline $(basename "$f"): rc=$?"
done
for batch in 4 8; do
  timeout 120 "$pylon" train "${model[@]}" --batch $batch --steps 8 --profile "$out/x/trace_b$batch" \
    >"$out/x/trace_b$batch.log" 2>&1; echo "trace batch $batch: rc=$?"
done
nvidia-smi -q -d PERFORMANCE,POWER,CLOCK,TEMPERATURE >"$out/x/nvidia_smi_q.txt" 2>&1
ldconfig -p | grep -i nvidia-ml >"$out/x/nvml_lib.txt" 2>&1
tar czf "$out/exports.tgz" -C "$out/x" . && rm -rf "$out/x" "$out/tokens.bin"
ls -la "$out"
