#include "dist/fault_injection.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace pylon {

void inject_test_faults(const TestFaults& f, int rank, int64_t step) {
  if (rank == f.crash_rank && step == f.crash_step) {
    std::fprintf(stderr, "rank %d: PYLON_TEST_CRASH_RANK: aborting at step %lld\n", rank, static_cast<long long>(step));
    std::abort();
  }
  if (rank == f.hang_rank && step == f.hang_step) {
    std::fprintf(stderr, "rank %d: PYLON_TEST_HANG_RANK: hanging at step %lld\n", rank, static_cast<long long>(step));
    for (;;) ::pause();  // until a signal ends the process
  }
}

}  // namespace pylon
