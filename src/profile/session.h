// One profiled training run on one rank: the step schedule, then DIR/trace.rank<R>.json, and on
// rank 0 DIR/ops.csv, DIR/analysis.json and the printed top-ops table and step breakdown. With
// device tracing, CUPTI starts with the warmup (its start-up cost lands there) and stops, with an
// explicit device sync, when the last active step is over.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profile/roofline.h"
#include "profile/tracer.h"

namespace pylon::profile {

struct ProfileOptions {
  std::string dir;  // "" = no profiling
  Schedule schedule;
  bool device = false;  // also trace the CUDA device (CUPTI; profile/device_trace.h)
  // Instead of tracing: hardware counters of the first active step's kernels (CUPTI's range
  // profiler, profile/counter_profile.h), written as DIR/roofline.json and DIR/roofline.svg.
  bool counters = false;
};

// Checks the schedule for a run of `steps` steps: one clear error unless an active step falls
// inside the run (no-op without a profile directory).
void check_schedule(const ProfileOptions& options, int64_t steps);

// The tracer is process-wide: one session at a time per process (one rank per process, as
// `pylon train` runs them).
class ProfileSession {
 public:
  // Creates dir. Inactive (every call a no-op) when options.dir is empty.
  ProfileSession(const ProfileOptions& options, int rank);
  ~ProfileSession();  // recording off (an exception may end the run early)
  ProfileSession(const ProfileSession&) = delete;
  ProfileSession& operator=(const ProfileSession&) = delete;

  void step(int64_t k);  // at the start of step k (0-based within this run)
  // Recording off; writes the files; rank 0 prints the table. Returns what it wrote on this rank.
  std::string finish();

 private:
  ProfileOptions options_;
  int rank_;
  StepScheduler scheduler_;
  bool open_ = false;
  int statm_fd_ = -1;
  void write_roofline(const std::vector<KernelCounters>& kernels) const;
  bool device_started_ = false, device_stopped_ = false, active_seen_ = false;
  bool counters_started_ = false, counters_done_ = false;
  int counter_passes_ = 0;
  std::vector<DeviceRecord> device_records_;
};

}  // namespace pylon::profile
