// Counter profiling in a build without CUPTI (CMake compiles this file instead of
// profile/cuda/counter_profile.cpp): not available; asking for it is the user's error.
#include "core/error.h"
#include "profile/counter_profile.h"

namespace pylon::profile {

bool counter_profiling_available() { return false; }
int counter_profiling_start() {
  throw Error("--profile-roofline: this build has no CUPTI (install the CUDA toolkit's CUPTI and rebuild)");
}
std::vector<KernelCounters> counter_profiling_stop() { return {}; }
std::string current_device_name() { return ""; }

}  // namespace pylon::profile
