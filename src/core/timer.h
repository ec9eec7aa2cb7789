// Wall-clock timing and process memory for progress lines and metrics.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace pylon {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void reset() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

int64_t peak_rss_bytes();                 // the process's peak resident set size
std::string format_duration(double secs);  // "1h02m", "3m05s", "12s"

}  // namespace pylon
