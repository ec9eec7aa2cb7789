#!/usr/bin/env bash
# On the GPU machine, after bench/h200_train.sh (which builds Pylon and writes OUT/tokens.bin): the
# seed preset at its default size on 2 GPUs once per variant, STEPS steps each (default 20), one
# summary line per variant (medians of steps 6..STEPS, as h200_train.sh).
# Usage: bench/h200_fsdp_variants.sh BUILD_DIR OUT_DIR 'NAME|ENV|FLAGS' ...
#   e.g. 'bf16||--reduce-dtype bf16'  'cta8|NCCL_MAX_CTAS=8|'
set -uo pipefail
build=$1 out=$2
shift 2
export NCCL_NVLS_ENABLE=0  # the workplace forbids NVLink multicast
for variant in "$@"; do
  IFS='|' read -r name vars flags <<<"$variant"
  # shellcheck disable=SC2086  # vars and flags are word lists
  if ! env $vars timeout 60 "$build/src/pylon" train --preset seed --vocab 32000 --dim 2048 --layers 12 \
      --heads 16 --batch 8 --seq 1024 --steps "${STEPS:-20}" --lr 3e-4 --weight-decay 0.01 --lr-schedule constant \
      --grad-clip 0 --device cuda --dtype bf16 --nproc-per-node 2 --data "$out/tokens.bin" \
      --metrics "$out/variant_$name.jsonl" --log-every 0 $flags >"$out/variant_$name.log" 2>&1; then
    echo "VARIANT $name failed:"; tail -n 5 "$out/variant_$name.log"; continue
  fi
  python3 - "$out/variant_$name.jsonl" "$name" "$vars $flags" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][5:]  # 5 warm-up steps
med = lambda k: statistics.median(r[k] for r in rows)
ms = med("step_ms")
comm = med("gather_ms") + med("reduce_ms")
exposed = med("exposed_wait_ms") + med("tail_ms")
print("VARIANT " + json.dumps({"name": sys.argv[2], "settings": sys.argv[3].strip(), "steps": len(rows),
      "step_ms_median": round(ms, 2), "tokens_per_s_per_gpu": round(8 * 1024 / (ms / 1e3)),
      "allocated_gb": round(rows[-1]["allocated_bytes"] / 1e9, 2),
      "peak_mem_gb_rank0": round(max(r["peak_mem_bytes"] for r in rows) / 1e9, 2),
      "gather_ms": round(med("gather_ms"), 2), "reduce_ms": round(med("reduce_ms"), 2),
      "exposed_wait_ms": round(med("exposed_wait_ms"), 2), "tail_ms": round(med("tail_ms"), 2),
      "hidden_share": round(1 - exposed / comm, 3), "final_loss": rows[-1]["loss"]}))
PY
done
