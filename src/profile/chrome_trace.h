// Chrome trace JSON (the Trace Event Format that Perfetto UI and chrome://tracing open): one
// process per rank, "X" complete events for ranges and device records (a track per stream), "C"
// counter events, "M" name metadata, "s"/"f" flow pairs from each launch to its device record.
#pragma once

#include <string>
#include <vector>

#include "profile/tracer.h"

namespace pylon::profile {

// The tids of device tracks start here (one per device and stream).
inline constexpr int64_t kStreamTidBase = 1000000000;

// Streams the trace to path (ts and dur in µs). Throws pylon::Error when it cannot write.
void write_chrome_trace(const Trace& trace, const std::string& path);

// Merges per-rank trace files into one, a process per input: each input keeps its pids unless an
// earlier input used them, then they get the next free ones. Throws pylon::Error naming the file
// for input that is not a Chrome trace (not JSON, no traceEvents array, events without ph).
void merge_chrome_traces(const std::string& out_path, const std::vector<std::string>& inputs);

}  // namespace pylon::profile
