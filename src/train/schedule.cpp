#include "train/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace pylon {

LrSchedule parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrSchedule::constant;
  if (name == "cosine") return LrSchedule::cosine;
  throw Error("unknown lr schedule '" + name + "' (expected constant or cosine)");
}

float lr_at(const ScheduleConfig& s, int64_t t, int64_t total_steps) {
  if (t < s.warmup)
    return static_cast<float>(static_cast<double>(s.lr) * static_cast<double>(t + 1) /
                              static_cast<double>(s.warmup));
  if (s.kind == LrSchedule::constant) return s.lr;
  const double progress = static_cast<double>(t - s.warmup) /
                          static_cast<double>(std::max<int64_t>(1, total_steps - s.warmup));
  const double lr = s.lr, min_lr = static_cast<double>(s.min_lr_frac) * lr;
  const double p = std::min(progress, 1.0);
  return static_cast<float>(min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * p)));
}

}  // namespace pylon
