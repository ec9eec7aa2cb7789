// A line "LABEL: i/N (eta ...)" on stdout at most every 10 s (PYLON_TEST_PROGRESS_MS) of a long
// loop, so that a long validation or many micro-steps show that they proceed. Silent when !on
// (ranks other than 0).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "core/env.h"
#include "core/timer.h"

namespace pylon {

class ProgressLine {
 public:
  ProgressLine(std::string label, int64_t total, bool on)
      : label_(std::move(label)), total_(total), on_(on),
        period_(static_cast<double>(env_int("PYLON_TEST_PROGRESS_MS", 10000, 1, 3600000)) / 1e3) {}

  void done(int64_t count) {  // count of total finished
    if (!on_ || count <= 0 || count >= total_) return;
    const double now = clock_.seconds();
    if (now - last_ < period_) return;
    last_ = now;
    const double eta = now / static_cast<double>(count) * static_cast<double>(total_ - count);
    std::printf("%s: %lld/%lld (eta %s)\n", label_.c_str(), static_cast<long long>(count),
                static_cast<long long>(total_), format_duration(eta).c_str());
    std::fflush(stdout);
  }

 private:
  std::string label_;
  int64_t total_;
  bool on_;
  double period_, last_ = 0;
  Stopwatch clock_;
};

}  // namespace pylon
