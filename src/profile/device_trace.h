// Device activity tracing through CUPTI: the API calls that launch device work become
// "cuda_runtime" ranges (with their correlation id) on the calling thread while the tracer is
// enabled, and the kernels, copies and fills become DeviceRecords on the tracer's clock.
// Built only with CUPTI (profile/cuda/cupti_trace.cpp); otherwise available() is false.
#pragma once

#include <vector>

#include "profile/tracer.h"

namespace pylon::profile {

bool device_tracing_available();  // this build has CUPTI
// Subscribes to the launch callbacks and enables the activity records. One tracing session per
// process. Throws pylon::Error when CUPTI refuses (another profiler holds it: ncu, nsys).
void device_tracing_start();
// Forgets what was recorded so far (the warmup steps): records that begin before now are dropped.
void device_tracing_discard();
// Waits for the device (an explicit sync, outside any step), flushes CUPTI's buffers, stops, and
// returns the records in time order.
std::vector<DeviceRecord> device_tracing_stop();
// Bytes in use on the current device (cudaMemGetInfo: total - free); 0 when unknown.
double device_used_bytes();

}  // namespace pylon::profile
