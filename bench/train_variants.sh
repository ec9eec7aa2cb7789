#!/usr/bin/env bash
# On the GPU machine, with Pylon built: the seed preset at its default size (bench/h200_train.sh's
# command; PRESET=causal for the causal preset, SEQ/BATCH for other shapes) run ROUNDS times per
# variant, the variants alternated so drift in clocks and power hits each alike; prints each run's
# median step time (steps 6..STEPS), loss, peak memory and energy a step (where the GPU reports it),
# then per variant the median over its runs.
# usage: bench/train_variants.sh BUILD_DIR TOKENS OUT_DIR NPROC "VARIANT FLAGS" ["VARIANT FLAGS" ...]
#   a variant is a name and Pylon flags in one word list, e.g. "graph --cuda-graph" or "eager";
#   NAME=DIR as the name runs DIR's build instead of BUILD_DIR's (two builds A/B, e.g. "before=/tmp/old/build")
#   (ROUNDS=2, STEPS=30, PRESET=seed, BATCH=8, SEQ=1024 by default)
set -euo pipefail
build=$1 tokens=$2 out=$3 nproc=$4
shift 4
mkdir -p "$out"
for round in $(seq "${ROUNDS:-2}"); do
  for variant in "$@"; do
    read -r name flags <<<"$variant"
    bin=$build
    [[ $name == *=* ]] && bin=${name#*=} name=${name%%=*}
    log="$out/${name}_r$round"
    timeout 180 "$bin/src/pylon" train --preset "${PRESET:-seed}" --vocab 32000 --dim 2048 --layers 12 --heads 16 \
      --batch "${BATCH:-8}" --seq "${SEQ:-1024}" --steps "${STEPS:-30}" --lr 3e-4 --weight-decay 0.01 --lr-schedule constant \
      --grad-clip 0 --device cuda --dtype bf16 --nproc-per-node "$nproc" --data "$tokens" \
      --metrics "$log.jsonl" --log-every 0 $flags >"$log.log" 2>&1 || { tail -5 "$log.log"; continue; }
    python3 - "$log.jsonl" "$name" "$round" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
energy = [r['energy_j'] for r in rows[5:] if 'energy_j' in r]
print(f"{sys.argv[2]:>12} round {sys.argv[3]}: median step {statistics.median(r['step_ms'] for r in rows[5:]):.2f} ms,"
      f" final loss {rows[-1]['loss']:.6f}, peak {max(r['peak_mem_bytes'] for r in rows) / 1e9:.2f} GB"
      + (f", {statistics.median(energy):.1f} J a step" if energy else ""))
PY
  done
done | tee "$out/runs.txt"
python3 - "$out/runs.txt" <<'PY'
import collections, re, statistics, sys
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"\s*(\S+) round \d+: median step ([\d.]+) ms", line)
    if m: by[m.group(1)].append(float(m.group(2)))
for name, ms in by.items():
    print(f"VARIANT {name}: {statistics.median(ms):.2f} ms over {len(ms)} runs ({', '.join(f'{x:.2f}' for x in ms)})")
PY
