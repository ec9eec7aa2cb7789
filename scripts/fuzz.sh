#!/usr/bin/env bash
# Coverage-guided fuzzing of Pylon's parsers (fuzz/, libFuzzer + ASan + UBSan, clang-14).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (default 30 s for each of fuzz/'s targets)
# Builds build-fuzz/, runs each target for SECONDS from a scratch copy of its committed corpus
# fuzz/corpus/<target>/ (the repo is not changed), prints each target's executions and findings.
# A finding (crash, sanitizer report, an exception other than pylon::Error, a timeout, out of
# memory) keeps its input in build-fuzz/findings/ and makes the script exit 1.
# Environment: FUZZ_JOBS (targets run at once; default 1), FUZZ_FLAGS (more libFuzzer flags; a long
# run that goes on past findings: FUZZ_FLAGS='-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1').
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(safetensors edge_header token_file checkpoint ncu_csv trace_json hf_config hf_tokenizer)
cxx=${FUZZ_CXX:-clang++-14}
command -v "$cxx" >/dev/null || { echo "fuzz.sh: $cxx not found (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 2; }

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_C_COMPILER="${cxx/clang++/clang}" -DPYLON_FUZZ=ON -DPYLON_TESTS=OFF \
      -DPYLON_CUDA=OFF -DPYLON_VULKAN=OFF -DPYLON_MPI=OFF >build-fuzz.configure.log 2>&1 \
  || { cat build-fuzz.configure.log >&2; exit 2; }
mv build-fuzz.configure.log build-fuzz/configure.log
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}"

mkdir -p build-fuzz/findings build-fuzz/logs
run_one() {  # target: fuzzes it for $seconds; its log says what happened
  local t=$1 work=build-fuzz/corpus/$1
  rm -rf "$work" && mkdir -p "$work" && cp -r "fuzz/corpus/$t/." "$work/"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: more than 2 GB is a finding.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build-fuzz/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="build-fuzz/findings/$t-" ${FUZZ_FLAGS:-} "$work" \
    >"build-fuzz/logs/$t.log" 2>&1
}
jobs_max=${FUZZ_JOBS:-1}
declare -A pid_of
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
  run_one "$t" &
  pid_of[$t]=$!
done

status=0
printf '%-14s %12s %8s  %s\n' target executions exec/s result
for t in "${targets[@]}"; do
  rc=0
  wait "${pid_of[$t]}" || rc=$?
  log=build-fuzz/logs/$t.log
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  if [[ -z "$execs" ]]; then  # -fork=N (long runs) prints "#EXECS: cov: ... exec/s: N ..." instead
    execs=$(grep -oE '^#[0-9]+: cov' "$log" | tail -1 | grep -oE '[0-9]+' || true)
    rate=$(grep -oE '^#[0-9]+: cov.* exec/s:? [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
  fi
  found=$(ls build-fuzz/findings/ 2>/dev/null | grep -c "^$t-" || true)
  if ((rc != 0 || found > 0)); then
    status=1
    printf '%-14s %12s %8s  FINDING (exit %d): %s\n' "$t" "${execs:-?}" "${rate:-?}" "$rc" \
      "$(grep -m1 -E 'ERROR: |runtime error|terminate called|deadly signal|Timeout|out-of-memory' "$log" || echo "see $log")"
    grep -E '^    #[0-9]+ .* in pylon::' "$log" | head -8 || true
    ls build-fuzz/findings/ | grep "^$t-" | sed 's|^|  input kept: build-fuzz/findings/|' || true
  else
    printf '%-14s %12s %8s  clean\n' "$t" "$execs" "$rate"
  fi
done
exit $status
