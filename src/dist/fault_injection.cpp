// The PYLON_TEST_CRASH_* / PYLON_TEST_HANG_* hooks of fault_injection.h.
#include "dist/fault_injection.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace pylon {
namespace {

// The variable as an integer, or `fallback` when it is unset or not a number.
int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  return end && *end == '\0' ? x : fallback;
}

}  // namespace

void inject_test_faults(int rank, int64_t step) {
  static const int64_t crash_rank = env_int("PYLON_TEST_CRASH_RANK", -1);
  static const int64_t crash_step = env_int("PYLON_TEST_CRASH_STEP", 1);
  static const int64_t hang_rank = env_int("PYLON_TEST_HANG_RANK", -1);
  static const int64_t hang_step = env_int("PYLON_TEST_HANG_STEP", 1);
  if (rank == crash_rank && step == crash_step) {
    std::fprintf(stderr, "rank %d: PYLON_TEST_CRASH_RANK: aborting at step %lld\n", rank,
                 static_cast<long long>(step));
    std::abort();
  }
  if (rank == hang_rank && step == hang_step) {
    std::fprintf(stderr, "rank %d: PYLON_TEST_HANG_RANK: hanging at step %lld\n", rank,
                 static_cast<long long>(step));
    for (;;) ::pause();  // until a signal ends the process
  }
}

}  // namespace pylon
