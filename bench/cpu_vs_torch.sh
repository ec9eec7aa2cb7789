#!/usr/bin/env bash
# Pylon's CPU reference beside PyTorch on the same machine and sizes: the seed preset at a small
# size, fp32, 2 threads, median step time after warm-up. Needs build/ and python3 with torch
# (scripts/install-deps.sh --with-torch). Usage: bench/cpu_vs_torch.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
# The Python that has PyTorch: Debian's python3-torch lives under /usr/bin/python3.
py=python3
for cand in /usr/bin/python3 python3; do
  if "$cand" -c "import torch" 2>/dev/null; then py=$cand; break; fi
done
size="--vocab 32000 --dim 256 --layers 4 --heads 4 --batch 4 --seq 256"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/tokens.bin" <<'PY'
import random, struct, sys
random.seed(1234)
open(sys.argv[1], "wb").write(struct.pack("<%dH" % 400000, *[random.randrange(32000) for _ in range(400000)]))
PY
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
for r in $(seq "$rounds"); do  # alternate, so both see the same machine load
  ./build/src/pylon train --preset seed $size --steps 12 --lr 3e-4 --lr-schedule constant \
    --data "$tmp/tokens.bin" --metrics "$tmp/m.jsonl" --log-every 0 --eval-every 0 >/dev/null
  python3 - "$tmp/m.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]  # skip 2 warm-up steps
med = statistics.median(r["step_ms"] for r in rows) / 1e3
print(json.dumps({"framework": "pylon cpu", "threads": 2, "step_s_median": med,
                  "tokens_per_s": 4 * 256 / med, "peak_rss_bytes": rows[-1]["peak_mem_bytes"]}))
PY
  # PyTorch's best setting here: its OpenMP workers stop spinning between ops, which would
  # otherwise fight its BLAS's own threads for the 2 cores (2.7 s -> 2.0 s a step, measured).
  OMP_WAIT_POLICY=passive "$py" bench/torch_cpu_bench.py $size --threads 2
done
