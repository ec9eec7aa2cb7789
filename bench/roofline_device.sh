#!/usr/bin/env bash
# On a 2-GPU machine: CUPTI's counters (`pylon roofline -- pylon train`, range profiler in this
# process, caches not flushed) on GPU 0 against Nsight Compute's for the same one-step run of a
# 2-layer seed model on GPU 1, ncu once with --cache-control none (the same cache policy) and once
# with its default, all (L1/L2 flushed before every replay pass). Then per kernel name (time-weighted
# over its launches, as both reports aggregate): |CUPTI - ncu| of SM % and DRAM %.
# usage: bench/roofline_device.sh OUT_DIR   (BUILD_DIR=... to reuse a build)
set -uo pipefail
bash "$(dirname "$0")/device_deps.sh"  # xxHash's headers where the image lacks them
cd "$(dirname "$0")/.."
out=${1:-/tmp/pylon-roofline}
b=${BUILD_DIR:-/tmp/pylon-prof-build}
mkdir -p "$out"
cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPYLON_CUDA=ON -DPYLON_CUPTI=ON >"$out/cmake.log" 2>&1 ||
  { tail -30 "$out/cmake.log"; exit 1; }
cmake --build "$b" --target pylon -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -B2 -A8 error "$out/build.log" | head -60; exit 1; }
pylon=$b/src/pylon
python3 -c "
import numpy as np
np.random.default_rng(1234).integers(0, 32000, 2_000_000, dtype=np.uint16).tofile('$out/tokens.bin')"
cmd=(train --preset seed --vocab 32000 --dim 2048 --heads 16 --layers 2 --batch 8 --seq 1024 --lr 3e-4
     --weight-decay 0.01 --lr-schedule constant --grad-clip 0 --device cuda --data "$out/tokens.bin"
     --log-every 0 --steps 1)
metrics=$($pylon roofline --help | grep -oE 'gpu__time_duration[^ ]+' | head -1)
[ -n "$metrics" ] || { echo "no metric list in pylon roofline --help"; exit 1; }
(
  export CUDA_VISIBLE_DEVICES=0
  start=$SECONDS
  timeout 280 "$pylon" roofline --top 12 --json "$out/cupti.json" --svg "$out/cupti.svg" \
    -- pylon "${cmd[@]}" >"$out/cupti.log" 2>&1
  echo "cupti: rc=$? in $((SECONDS - start)) s"
) &
(
  export CUDA_VISIBLE_DEVICES=1
  for cc in all none; do
    start=$SECONDS
    for m in "$metrics" "${metrics%%,sm__ops_path_tensor_src_fp16*}"; do  # the second: without the optional ones
      timeout 200 ncu --cache-control $cc --clock-control none --csv --page raw --metrics "$m" \
        --log-file "$out/ncu_$cc.csv" "$pylon" "${cmd[@]}" >"$out/ncu_$cc.app.log" 2>&1
      rc=$?
      [ $rc = 0 ] && break
    done
    echo "ncu --cache-control $cc: rc=$rc in $((SECONDS - start)) s"
    "$pylon" roofline --ncu-csv "$out/ncu_$cc.csv" --json "$out/ncu_$cc.json" --top 12 >"$out/ncu_$cc.log" 2>&1 ||
      tail -3 "$out/ncu_$cc.log"
  done
) &
wait
head -30 "$out/cupti.log"
python3 - "$out" <<'PY'
import json, os, re, sys
out = sys.argv[1]
# ncu and the C++ demangler spell names apart: ncu drops nested namespaces after an anonymous one and
# writes template bools as 0/1.
key = lambda n: re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", n.replace("pylon::cuda::", "pylon::")))
def load(name):
    path = f"{out}/{name}.json"
    if not os.path.exists(path): return None
    return {key(k["name"]): k for k in json.load(open(path))["kernels"]}
for ncu_mode in ("none", "all"):
    cupti, ncu = load("cupti"), load(f"ncu_{ncu_mode}")
    if cupti is None or ncu is None:
        print(f"COMPARE cupti / ncu --cache-control {ncu_mode}: missing report"); continue
    unnamed = sum(1 for n in cupti if n.startswith("kernel #"))
    both = sorted((n for n in cupti if n in ncu), key=lambda n: -ncu[n]["seconds"])
    total = sum(ncu[n]["seconds"] for n in both)
    print(f"COMPARE cupti / ncu --cache-control {ncu_mode}: {len(both)} kernel names in both "
          f"(cupti {len(cupti)}, {unnamed} unnamed; ncu {len(ncu)})")
    for m in ("sm_pct", "dram_pct"):
        d = sorted(abs(cupti[n][m] - ncu[n][m]) for n in both)
        ok = [n for n in both if abs(cupti[n][m] - ncu[n][m]) <= 3]
        share = sum(ncu[n]["seconds"] for n in ok) / total if total else 0
        print(f"  {m}: within 3 points {len(ok)}/{len(both)} names, {100 * share:.1f}% of the time; "
              f"median {d[len(d) // 2]:.2f}, max {d[-1]:.1f}")
    for n in both:
        a, c = ncu[n], cupti[n]
        flag = " <" if abs(c["sm_pct"] - a["sm_pct"]) > 3 or abs(c["dram_pct"] - a["dram_pct"]) > 3 else ""
        print(f"    {n[:56]:56s} x{a['launches']:<3d} us {a['seconds'] * 1e6 / a['launches']:8.1f} "
              f"{c['seconds'] * 1e6 / c['launches']:8.1f}  SM {a['sm_pct']:5.1f} {c['sm_pct']:5.1f}  "
              f"DRAM {a['dram_pct']:5.1f} {c['dram_pct']:5.1f}{flag}")
PY
