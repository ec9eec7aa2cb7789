// Device time per kind of dispatch, from GPU timestamps written after every recorded command
// (Recorder with a GpuTimes sink). Each command is charged from the previous timestamp to its
// own, so the barrier and launch gap before it count as its time and the entries sum to `total`.
// No Vulkan header here: the decoder's public header includes this.
#pragma once

#include <map>
#include <string>

namespace pylon::vk {

struct GpuTimes {
  struct Entry {
    double seconds = 0;
    long count = 0;
  };
  std::map<std::string, Entry> by_kernel;  // kernel name, or "copy"
  double total = 0;                         // seconds from each run's first timestamp to its last
  long runs = 0;                            // command buffers timed
  void clear() { *this = GpuTimes{}; }
};

}  // namespace pylon::vk
