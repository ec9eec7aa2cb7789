#!/usr/bin/env bash
# Runs a command while nvidia-smi samples every GPU's SM clock, power and active clock-event
# (throttle) reasons every 100 ms; prints per GPU the median and minimum SM clock, median and
# maximum power, and how often each throttle reason was active. For telling a kernel that is slow
# from a chip that clocked down under sustained load.
# usage: bench/gpu_clocks.sh OUT_CSV COMMAND [ARGS...]
set -uo pipefail
csv=$1
shift
reasons=clocks_event_reasons.active  # called clocks_throttle_reasons by older drivers
nvidia-smi --query-gpu=$reasons --format=csv >/dev/null 2>&1 || reasons=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,$reasons \
  --format=csv,noheader,nounits -lms 100 >"$csv" 2>/dev/null &
sampler=$!
"$@"
rc=$?
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
python3 - "$csv" <<'PY'
import collections, statistics, sys
by_gpu = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    if len(f) < 5: continue
    try: by_gpu[f[1]].append((float(f[2]), float(f[3]), int(f[4], 16)))
    except ValueError: continue
# nvmlClocksEventReasons bits
names = {0x1: "idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal",
         0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}
for gpu, rows in sorted(by_gpu.items()):
    busy = [r for r in rows if r[1] > 150] or rows  # samples under load (power above idle)
    clocks, power = [r[0] for r in busy], [r[1] for r in busy]
    reasons = {n: sum(1 for r in busy if r[2] & bit) for bit, n in names.items()}
    print(f"CLOCKS gpu {gpu}: {len(busy)} loaded samples of {len(rows)}; SM MHz median {statistics.median(clocks):.0f} "
          f"min {min(clocks):.0f}; power W median {statistics.median(power):.0f} max {max(power):.0f}; reasons "
          + ", ".join(f"{n} {100 * c / len(busy):.0f}%" for n, c in reasons.items() if c))
PY
exit $rc
