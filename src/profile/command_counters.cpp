// The range profiler around one command, and its errors.
#include "profile/command_counters.h"

#include "core/error.h"

namespace pylon::profile {

CommandCounters count_command_kernels(const std::string& what, const std::function<int()>& run,
                                      const CounterProfiler& profiler) {
  CommandCounters c;
  c.passes = profiler.start();
  int status = 0;
  auto stop_quietly = [&] {  // the command's error is the one to report
    try {
      profiler.stop();
    } catch (const Error&) {
    }
  };
  try {
    status = run();
  } catch (const Error& e) {
    stop_quietly();
    throw Error("`" + what + "` failed, so there is no roofline: " + e.what());
  } catch (...) {
    stop_quietly();
    throw;
  }
  if (status != 0) {
    stop_quietly();
    throw Error("`" + what + "` exited with status " + std::to_string(status) + ", so there is no roofline");
  }
  c.kernels = profiler.stop();
  PYLON_CHECK(!c.kernels.empty(), "`", what,
              "` launched no CUDA kernel (the counters are per CUDA kernel: the command must run on --device cuda)");
  return c;
}

}  // namespace pylon::profile
