// The top-ops table, like PyTorch's key_averages().table(): per range name (and optionally input
// shapes) its calls, self and total CPU time, average and share, and self and total device time
// (CUPTI records: each kernel is a row, and counts towards the ranges around its launch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profile/tracer.h"

namespace pylon::profile {

struct OpStats {
  std::string name, shapes;  // shapes: "" unless grouped by them
  int64_t calls = 0;
  double self_cpu_us = 0, total_cpu_us = 0;   // self: minus the ranges directly inside it
  double self_device_us = 0, total_device_us = 0;  // 0 without device records
  bool device_record = false;  // a kernel / copy / fill row (no CPU time of its own)
};

// Aggregates every thread's ranges and the device records, sorted by total device time when there
// are device records, else by total CPU time (descending).
std::vector<OpStats> op_stats(const Trace& trace, bool group_by_shapes = false);

// The printable table of the first `rows` rows; % columns are shares of the summed self time.
std::string format_table(const std::vector<OpStats>& stats, size_t rows = 30);
// A duration given in µs as "1.234s", "1.234ms" or "1.234us" (µs with `us_decimals` digits).
std::string format_us(double us, int us_decimals = 3);
// Every row as CSV with a header line. Throws pylon::Error when it cannot write.
void write_csv(const std::vector<OpStats>& stats, const std::string& path);

}  // namespace pylon::profile
