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

// Streams the trace to path (ts and dur in µs) atomically. Throws pylon::Error when it cannot write.
void write_chrome_trace(const Trace& trace, const std::string& path);

// Merges per-rank trace files into one, a process per input: each input keeps its pids unless an
// earlier input used them, then they get the next free ones; flow ids of later inputs are moved
// apart. Throws pylon::Error naming the file (and the event) for input that is not a Chrome trace
// or breaks check_trace_event's rules (profile/trace_json.h). Written atomically: nothing at
// out_path on failure.
void merge_chrome_traces(const std::string& out_path, const std::vector<std::string>& inputs);

}  // namespace pylon::profile
