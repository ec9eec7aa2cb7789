#!/usr/bin/env bash
# On nvidia-h200-x2 with built binaries: (1) 2-GPU FSDP tracing overhead at steady state: step
# time (device events) of steps 13..18 with and without --profile (wait 10, warmup 2, active 6),
# alternated, plus one profiled run of an older binary (the "before"); NCCL launch times from the
# traces; (2) `pylon roofline -- pylon train` on a command without CUDA kernels and on a failing
# one (one clear error each). CUPTI's counters against ncu's: bench/roofline_device.sh.
# usage: bench/profile_x2.sh OUT_DIR PYLON [PYLON_BEFORE] [SECONDS]   (stops starting work after SECONDS;
#        the whole needs ~100 s: 5 x 14 s of 2-GPU runs)
# env: STEPS (24), WAIT (10), ACTIVE (6): the 2-GPU runs' length and schedule (warm-up 2 steps);
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
# A command without CUDA kernels, and a failing one: one clear error each.
tiny="--preset seed --vocab 97 --dim 32 --layers 1 --heads 2 --batch 1 --seq 8 --steps 1"
CUDA_VISIBLE_DEVICES=0 timeout "$(cap 20)" "$pylon" roofline -- pylon train $tiny --device cpu 2>&1 | tail -n 1
CUDA_VISIBLE_DEVICES=0 timeout "$(cap 20)" "$pylon" roofline -- pylon train $tiny --device cuda --data /nonexistent.bin 2>&1 | tail -n 1
tar -czf "$out/results.tar.gz" -C "$w" --exclude tokens.bin --exclude '*.merged.json' --exclude 'trace.rank*' . 2>/dev/null
echo "done in $(($(date +%s) - start)) s"
