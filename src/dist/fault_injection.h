// Test hooks for the fault-tolerance tests, compiled in always and inert unless set:
//   PYLON_TEST_CRASH_RANK=r [PYLON_TEST_CRASH_STEP=k]  rank r calls std::abort() as it starts
//                                                     optimizer step k (1-based, default 1)
//   PYLON_TEST_HANG_RANK=r  [PYLON_TEST_HANG_STEP=k]   rank r sleeps there until it is killed
// They stand in for a rank that dies (segfault, OOM kill) or hangs (deadlocked driver, stuck I/O).
#pragma once

#include <cstdint>

namespace pylon {

void inject_test_faults(int rank, int64_t step);

}  // namespace pylon
