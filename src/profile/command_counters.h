// Hardware counters of a whole command run in this process (`pylon roofline -- pylon CMD ...`):
// the range profiler around the command's entry point, and one clear error when the command
// fails or launches no CUDA kernel.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "profile/counter_profile.h"
#include "profile/roofline.h"

namespace pylon::profile {

// The range profiler's two ends; tests substitute their own.
struct CounterProfiler {
  std::function<int()> start = counter_profiling_start;
  std::function<std::vector<KernelCounters>()> stop = counter_profiling_stop;
};

struct CommandCounters {
  std::vector<KernelCounters> kernels;  // per kernel name, launches summed
  int passes = 0;                       // replay passes per kernel
};

// Runs `run` (a command's entry point, returning its exit code; `what` names it in errors, e.g.
// "pylon train") between start and stop. Throws pylon::Error when the command throws or returns
// non-zero, or launched no CUDA kernel; the profiler is stopped in every case.
CommandCounters count_command_kernels(const std::string& what, const std::function<int()>& run,
                                      const CounterProfiler& profiler = {});

}  // namespace pylon::profile
