#!/usr/bin/env bash
# Tracing overhead on the CPU path: median step time of `pylon train` with every step profiled
# against the same run without --profile, alternated ROUNDS times (tiny and small model).
# usage: bench/profile_overhead.sh [PYLON=build/src/pylon] [ROUNDS=3] [STEPS=20]  (tiny: 10x STEPS)
set -euo pipefail
PYLON=${1:-build/src/pylon}
ROUNDS=${2:-3}
STEPS=${3:-20}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 -c "import random,struct,sys; random.seed(0); open(sys.argv[1],'wb').write(struct.pack('<200000H',*(random.randrange(97) for _ in range(200000))))" "$TMP/tokens.bin"

median_step_s() {  # median of step_ms / 1e3 over the steps after the first 2 (warm-up), from metrics JSONL
  python3 -c "import json,statistics,sys; r=[json.loads(l)['step_ms'] / 1e3 for l in open(sys.argv[1])][2:]; print(statistics.median(r))" "$1"
}

run() {  # name, model flags, mode (off|on), round, steps
  local out="$TMP/$1.$3.$4.jsonl" prof=()
  [ "$3" = on ] && prof=(--profile "$TMP/prof.$1" --profile-wait 0 --profile-warmup 0 --profile-active "$5")
  "$PYLON" train $2 --steps "$5" --data "$TMP/tokens.bin" --lr-schedule constant --eval-every 0 \
    --log-every 0 --metrics "$out" "${prof[@]}" >/dev/null
  median_step_s "$out"
}

for model in tiny small; do
  case $model in
    tiny) flags="--preset seed --vocab 97 --dim 32 --layers 2 --heads 4 --batch 2 --seq 16" steps=$((10 * STEPS)) ;;
    small) flags="--preset causal --vocab 97 --dim 256 --layers 4 --heads 4 --batch 4 --seq 128" steps=$STEPS ;;
  esac
  off=() on=()
  for r in $(seq "$ROUNDS"); do
    off+=("$(run $model "$flags" off "$r" "$steps")")
    on+=("$(run $model "$flags" on "$r" "$steps")")
  done
  python3 - "$model" "${off[*]}" "${on[*]}" <<'PY'
import statistics, sys
model, off, on = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
mo, mn = statistics.median(off), statistics.median(on)
print(f"{model}: step median off {mo*1e3:.3f} ms, profiled {mn*1e3:.3f} ms, overhead {100*(mn-mo)/mo:+.2f}% "
      f"(per-run medians off {['%.3f' % (x*1e3) for x in off]}, on {['%.3f' % (x*1e3) for x in on]})")
PY
done
