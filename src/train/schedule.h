// Learning-rate schedules: linear warmup, then constant or cosine decay to min_lr_frac·lr.
#pragma once

#include <cstdint>
#include <string>

namespace pylon {

enum class LrSchedule { constant, cosine };
LrSchedule parse_lr_schedule(const std::string& name);  // throws pylon::Error

struct ScheduleConfig {
  LrSchedule kind = LrSchedule::cosine;
  float lr = 3e-4f;
  int64_t warmup = 0;
  float min_lr_frac = 0.1f;
};

// Learning rate of optimizer step t (0-based) of a run of total_steps:
// t < warmup: lr·(t+1)/warmup; constant: lr; cosine: progress = (t−warmup)/max(1, total−warmup),
// min + ½(lr − min)(1 + cos(π·progress)), min = min_lr_frac·lr.
float lr_at(const ScheduleConfig& s, int64_t t, int64_t total_steps);

}  // namespace pylon
