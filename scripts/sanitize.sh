#!/usr/bin/env bash
# Builds Pylon with AddressSanitizer + UndefinedBehaviorSanitizer (CPU only) into build-asan/ and
# runs the tests under them; any sanitizer report fails the test that triggers it.
# Usage: scripts/sanitize.sh [GTEST_FILTER]
#   default: the parsers' and the CPU trainer's tests, built alone (the subset CI runs);
#   "all" (or "*"): every test file is built and every test runs.
# Environment: SANITIZE_CXX (default g++), SANITIZE_JOBS (parallel builds and tests; default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
parsers='Safetensors*:EdgeFormat*:TokenFile*:MappedFile*:AtomicFile*:Crc32*:HfTokenizer*:UnicodeRegex*:UnicodeText*'
parsers+=':TokenizerTest*:NcuCsv*:TraceAnalysis*:ChromeTrace*:TracerTest*:DropRecordsLaunchedBefore*:HfConfig*'
trainer='Trainer.*:DataLoader*:Schedule*:Metrics*:Fsdp.*'
filter=${1:-$parsers:$trainer}
# The test files that hold the default subset (the others are not built for it).
sources='(^|/)(io/[a-z0-9_]+_test|profile/(analysis|chrome_trace|roofline|tracer)_test'
sources+='|train/(trainer|data_loader|schedule|metrics)_test|dist/fsdp_test|model/golden_test)\.cpp$'
if [[ "$filter" == all || "$filter" == "*" ]]; then filter='*'; sources=''; elif [[ -n "${1:-}" ]]; then sources=''; fi
jobs=${SANITIZE_JOBS:-$(nproc)}
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

start=$(date +%s)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="${SANITIZE_CXX:-g++}" \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
      -DPYLON_CUDA=OFF -DPYLON_VULKAN=OFF -DPYLON_MPI=OFF "-DPYLON_TEST_SOURCES_REGEX=$sources" >/dev/null
cmake --build build-asan -j"$jobs" --target pylon pylon_tests
built=$(date +%s)

# halt_on_error: the first report ends the test (and fails it); leaks are findings too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One process per test (ctest), so a report names its test and the others still run.
status=0
ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 1200 \
      -R "^($(sed -e 's/\./\\./g' -e 's/\*/.*/g' -e 's/:/|/g' <<<"$filter"))$" || status=$?
done_at=$(date +%s)
echo "sanitize.sh: build $((built - start)) s, tests $((done_at - built)) s, filter $filter: $([[ $status == 0 ]] && echo clean || echo FAILED)"
exit $status
