// Test hooks for the fault-tolerance tests, inert unless set: a rank that dies (segfault, OOM kill)
// or hangs (deadlocked driver, stuck I/O) at a chosen step. `pylon train` reads them from
// PYLON_TEST_CRASH_RANK / PYLON_TEST_CRASH_STEP and PYLON_TEST_HANG_RANK / PYLON_TEST_HANG_STEP
// (docs/environment.md).
#pragma once

#include <cstdint>

namespace pylon {

struct TestFaults {
  int crash_rank = -1;      // this rank calls std::abort() as it starts optimizer step crash_step
  int64_t crash_step = 1;   // 1-based
  int hang_rank = -1;       // this rank sleeps there until it is killed
  int64_t hang_step = 1;
};

void inject_test_faults(const TestFaults& faults, int rank, int64_t step);

}  // namespace pylon
