// Device tracing in a build without CUPTI (CMake compiles this file instead of
// profile/cuda/cupti_trace.cpp): not available; asking for it is the user's error.
#include "core/error.h"
#include "profile/device_trace.h"

namespace pylon::profile {

bool device_tracing_available() { return false; }
void device_tracing_start() {
  throw Error("--profile on CUDA: this build has no CUPTI (install the CUDA toolkit's CUPTI and rebuild)");
}
void device_tracing_discard() {}
std::vector<DeviceRecord> device_tracing_stop() { return {}; }
double device_used_bytes() { return 0; }

}  // namespace pylon::profile
