// Per-kernel hardware counters of a Pylon run through CUPTI's range profiler (one range per kernel,
// kernel replay): the metrics of Nsight Compute's SpeedOfLight section, turned into the same
// KernelCounters as an ncu CSV. Built only with CUPTI (profile/cuda/counter_profile.cpp).
#pragma once

#include <string>
#include <vector>

#include "profile/roofline.h"

namespace pylon::profile {

bool counter_profiling_available();  // this build has CUPTI's range profiler

// Starts collecting on the current device's context; every kernel launched until stop is replayed
// as often as the metrics need (slow: for one step). Returns the number of replay passes per
// kernel. Throws pylon::Error when CUPTI refuses (counters not permitted, another profiler
// attached, a metric the chip lacks). Caches are not flushed between kernels: the counters match
// `ncu --cache-control none` (bench/profiler_notes.md).
int counter_profiling_start();
// Waits for the device, decodes the counters, and returns them per kernel name (launches summed).
std::vector<KernelCounters> counter_profiling_stop();
// The current device's name ("NVIDIA H200"), for its ceilings; "" when unknown.
std::string current_device_name();

}  // namespace pylon::profile
