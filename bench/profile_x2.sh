#!/usr/bin/env bash
# On nvidia-h200-x2 with built binaries: (1) 2-GPU FSDP tracing overhead at steady state: step
# time (device events) of steps 13..18 with and without --profile (wait 10, warmup 2, active 6),
# alternated, plus one profiled run of an older binary (the "before"); NCCL launch times from the
# traces; (2) one training step of a small model through `pylon roofline -- pylon train` (CUPTI
# range profiler, with and without the L2 flush) on GPU 0 while ncu measures the same command on
# GPU 1, compared kernel by kernel.
# usage: bench/profile_x2.sh OUT_DIR PYLON [PYLON_BEFORE] [SECONDS]   (stops starting work after SECONDS;
#        the whole needs ~400 s: 5 x 14 s of 2-GPU runs, then the counters)
# env: STEPS (24), WAIT (10), ACTIVE (6): the 2-GPU runs' length and schedule (warm-up 2 steps);
#      ONLY_OVERHEAD=1 skips the counters.
set -uo pipefail
out=$1 pylon=$2 before=${3:-} budget=${4:-400}
w=/tmp/prof-x2
mkdir -p "$out" "$w"
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
cap() { local l; l=$(left); echo $(($1 < l ? $1 : (l > 1 ? l : 1))); }  # a timeout within the budget
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
python3 -c "
import numpy as np
np.random.default_rng(1234).integers(0, 8192, 4_000_000, dtype=np.uint16).tofile('$w/tokens.bin')"

# (1) Overhead: 24 steps of the seed preset's default size on 2 GPUs.
steps=${STEPS:-24} wait=${WAIT:-10} active=${ACTIVE:-6}
big="--preset seed --vocab 32000 --dim 2048 --layers 12 --heads 16 --batch 8 --seq 1024 --lr 3e-4
     --lr-schedule constant --grad-clip 0 --device cuda --nproc-per-node 2 --data $w/tokens.bin --log-every 0 --steps $steps"
prof="--profile-wait $wait --profile-warmup 2 --profile-active $active"
train_x2() {  # name binary [flags]
  local name=$1 bin=$2 t0=$SECONDS
  shift 2
  [ "$(left)" -gt 60 ] || { echo "$name: skipped (budget)"; return; }
  timeout "$(cap 40)" "$bin" train $big --metrics "$w/$name.jsonl" "$@" >"$w/$name.log" 2>&1
  echo "$name: rc=$? in $((SECONDS - t0)) s"
}
train_x2 off1 "$pylon"
train_x2 on1 "$pylon" --profile "$w/on1" $prof
[ -n "$before" ] && train_x2 before "$before" --profile "$w/before" $prof
train_x2 off2 "$pylon"
train_x2 on2 "$pylon" --profile "$w/on2" $prof
python3 - "$w" "$steps" "$wait" "$active" <<'PY'
import glob, json, os, statistics, sys
w, steps, wait, active = sys.argv[1], *map(int, sys.argv[2:])
a, b = wait + 2, wait + 2 + active  # the active steps' indices (step a+1 .. b, 1-based)
for name in ("off1", "on1", "before", "off2", "on2"):
    p = f"{w}/{name}.jsonl"
    if not os.path.exists(p): continue
    ms = [json.loads(l)["step_ms"] for l in open(p)]
    print(f"STEP {name}: {len(ms)} steps; active {a+1}-{b} median {statistics.median(ms[a:b] or [0]):.2f} ms, after"
          f" {statistics.median(ms[b:] or [0]):.2f} ms, before {statistics.median(ms[2:wait] or [0]):.2f} ms | "
          + " ".join(f"{m:.1f}" for m in ms[2:]))
for name in ("on1", "before", "on2"):
    for rank in (0, 1):
        p = f"{w}/{name}/trace.rank{rank}.json"
        if not os.path.exists(p): continue
        t = json.load(open(p)); ev = t["traceEvents"] if isinstance(t, dict) else t
        kern = {e["args"]["correlation"]: e["name"] for e in ev if e.get("cat") == "kernel"}
        nccl = sorted(e["dur"] for e in ev if e.get("cat") == "cuda_runtime"
                      and "nccl" in kern.get(e.get("args", {}).get("correlation"), ""))
        other = sorted(e["dur"] for e in ev if e.get("cat") == "cuda_runtime" and e["name"].startswith("cuLaunch")
                       and "nccl" not in kern.get(e.get("args", {}).get("correlation"), "x"))
        threads = len({e["tid"] for e in ev if e.get("cat") == "cuda_runtime"})
        if nccl:
            print(f"LAUNCH {name} rank {rank}: {len(nccl)} NCCL launches median {nccl[len(nccl)//2]:.1f} us max {nccl[-1]:.0f} us"
                  f" total {sum(nccl)/1e3:.1f} ms; other cuLaunch* median {other[len(other)//2] if other else 0:.1f} us;"
                  f" {threads} launching threads")
PY
for name in on1 before; do
  [ -f "$w/$name/trace.rank1.json" ] || continue
  "$pylon" trace merge "$w/$name.merged.json" "$w/$name/trace.rank0.json" "$w/$name/trace.rank1.json" >/dev/null &&
    "$pylon" trace analyze "$w/$name.merged.json" | sed "s/^/ANALYZE $name: /" | head -12
done
cp "$w/on1.merged.json" "$out/trace_2gpu.json" 2>/dev/null
sed -n '/profile of rank 0/,/^Self device/p' "$w/on1.log" | head -24
if [ -n "${ONLY_OVERHEAD:-}" ]; then
  tar -czf "$out/results.tar.gz" -C "$w" --exclude tokens.bin --exclude '*.merged.json' --exclude 'trace.rank*' .
  echo "done in $(($(date +%s) - start)) s"; exit 0
fi

# (2) Counters: one step of a small model, CUPTI (GPU 0) beside ncu (GPU 1).
small="--preset seed --vocab 8192 --dim 1024 --layers 2 --heads 8 --batch 4 --seq 512 --lr 3e-4
       --lr-schedule constant --grad-clip 0 --device cuda --data $w/tokens.bin --log-every 0 --steps 1"
metrics="gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,sm__sass_thread_inst_executed_op_fadd_pred_on.sum,sm__sass_thread_inst_executed_op_fmul_pred_on.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__ops_path_tensor_src_bf16_dst_fp32.sum,device__attribute_display_name"
t0=$SECONDS
# CUPTI's kernel replay took ~0.8 s per range on the H200 (86 kernels of a step: 70 s; with the
# flush twice the ranges), ncu 39 s for the same 86 kernels: give the CUPTI runs 200 s each.
(CUDA_VISIBLE_DEVICES=1 timeout "$(cap 100)" ncu --clock-control none --csv --page raw --metrics "$metrics" \
   --launch-count 1000 --log-file "$w/ncu.csv" "$pylon" train $small >"$w/ncu_app.log" 2>&1
 echo "ncu: rc=$? in $((SECONDS - t0)) s"
 CUDA_VISIBLE_DEVICES=1 timeout "$(cap 200)" "$pylon" roofline --cache-control none --top 5 \
   --json "$w/cupti_noflush.json" -- pylon train $small >"$w/cupti_noflush.log" 2>&1
 echo "cupti no flush: rc=$? in $((SECONDS - t0)) s") &
(CUDA_VISIBLE_DEVICES=0 timeout "$(cap 200)" "$pylon" roofline --cache-control all --top 12 --json "$w/cupti_flush.json" \
   --svg "$out/cupti_flush.svg" -- pylon train $small >"$w/cupti_flush.log" 2>&1
 echo "cupti flush: rc=$? in $((SECONDS - t0)) s") &
wait
grep -h "CUPTI range profiler" "$w"/cupti_*.log
tail -n 3 "$w/cupti_flush.log" "$w/ncu_app.log"
"$pylon" roofline --ncu-csv "$w/ncu.csv" --json "$w/ncu.json" --top 5 >"$w/ncu_roofline.log" 2>&1 || tail -n 3 "$w/ncu_roofline.log"
python3 - "$w" <<'PY'
import json, os, re, statistics, sys
w = sys.argv[1]
key = lambda n: re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", n.replace("pylon::cuda::", "pylon::")))
def load(f):
    p = f"{w}/{f}"
    return {key(k["name"]): k for k in json.load(open(p))["kernels"]} if os.path.exists(p) else {}
ncu = load("ncu.json")
for tag in ("cupti_flush", "cupti_noflush"):
    cu = load(f"{tag}.json")
    if not cu or not ncu: print(f"COMPARE {tag}: missing"); continue
    unnamed = sum(1 for n in cu if n.startswith("kernel #"))
    both = [n for n in cu if n in ncu]
    print(f"COMPARE {tag}: {len(both)} kernel names in both (ncu {len(ncu)}, cupti {len(cu)}, unnamed {unnamed});"
          f" launches ncu {sum(k['launches'] for k in ncu.values())} cupti {sum(k['launches'] for k in cu.values())}")
    if not both: continue
    total = sum(ncu[n]["seconds"] for n in both)
    for m in ("sm_pct", "dram_pct"):
        d = {n: abs(cu[n][m] - ncu[n][m]) for n in both}
        worst = max(d, key=d.get)
        ok = [n for n in both if d[n] <= 3]
        print(f"  {m}: median {statistics.median(d.values()):.2f} time-weighted mean "
              f"{sum(d[n]*ncu[n]['seconds'] for n in both)/total:.2f} max {d[worst]:.1f} ({worst[:50]} "
              f"{cu[worst][m]:.1f} vs {ncu[worst][m]:.1f}); within 3 points {len(ok)}/{len(both)} kernels, "
              f"{100*sum(ncu[n]['seconds'] for n in ok)/total:.1f}% of the time")
    if tag == "cupti_flush":
        for n in sorted(both, key=lambda n: -ncu[n]["seconds"]):
            a, b = ncu[n], cu[n]
            print(f"  {n[:58]:58s} x{a['launches']:<3d} us {a['seconds']*1e6/a['launches']:8.1f} {b['seconds']*1e6/b['launches']:8.1f}"
                  f"  SM {a['sm_pct']:5.1f} {b['sm_pct']:5.1f}  DRAM {a['dram_pct']:5.1f} {b['dram_pct']:5.1f}"
                  f"  MB {a['dram_bytes']/1e6/a['launches']:7.1f} {b['dram_bytes']/1e6/b['launches']:7.1f}")
PY
# A command without CUDA kernels, and a failing one: one clear error each.
tiny="--preset seed --vocab 97 --dim 32 --layers 1 --heads 2 --batch 1 --seq 8 --steps 1"
CUDA_VISIBLE_DEVICES=0 timeout "$(cap 20)" "$pylon" roofline -- pylon train $tiny --device cpu 2>&1 | tail -n 1
CUDA_VISIBLE_DEVICES=0 timeout "$(cap 20)" "$pylon" roofline -- pylon train $tiny --device cuda --data /nonexistent.bin 2>&1 | tail -n 1
tar -czf "$out/results.tar.gz" -C "$w" --exclude tokens.bin --exclude '*.merged.json' --exclude 'trace.rank*' . 2>/dev/null
echo "done in $(($(date +%s) - start)) s"
