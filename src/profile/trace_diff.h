// Two analysed traces side by side ("what got slower?"): the mean step breakdown, time per step of
// each kernel class and of each kernel (or op) by name, and the names present in only one of them.
// "Per step" is per analysed step of one rank: a merged trace of R ranks and S steps each has R x S
// steps, so traces of different world sizes compare per GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profile/analysis.h"

namespace pylon::profile {

struct DiffRow {
  std::string name;
  std::string kernel_class;  // for kernel rows; empty for class and breakdown rows
  double a_us = 0, b_us = 0;  // time per step in A and B (µs)
  int64_t a_count = 0, b_count = 0;  // calls over all analysed steps
};

struct TraceDiff {
  bool device = false;           // both analyses are of device records (else both of CPU ranges)
  int64_t a_steps = 0, b_steps = 0;
  std::vector<DiffRow> breakdown;  // step, compute, communication, exposed comm, idle (means per step)
  std::vector<DiffRow> classes;    // every class in A or B, by max(A, B) descending
  std::vector<DiffRow> kernels;    // every name in A or B, by max(A, B) descending
};

// Throws pylon::Error when one analysis is of device records and the other of CPU ranges (their
// times measure different things).
TraceDiff diff_traces(const TraceAnalysis& a, const TraceAnalysis& b);

// The printed report: breakdown, classes, the `top` kernels that moved most in absolute time, then
// the names new in B and vanished from A (at most `top` each). Names are cut to 64 characters.
std::string format_diff(const TraceDiff& d, const std::string& a_label, const std::string& b_label, size_t top = 15);
// Every row, names whole; ratio null where A's time is 0.
nlohmann::json diff_json(const TraceDiff& d, const std::string& a_label, const std::string& b_label);

}  // namespace pylon::profile
