// Analyses of a trace, the ones people use Holistic Trace Analysis for: per step, how the device's
// time splits into compute, communication (hidden behind compute or exposed) and idle, and the
// totals per kernel class. The "device" is the GPU's kernels and copies when the trace has them
// (CUPTI records), else the CPU's innermost ranges (a CPU run computes on its threads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pylon::profile {

// One complete ("X") event of a Chrome trace file, or a sample of the GPU monitor's power-cap
// counter (cat kPowerCapSample: a "C" event gpu_power_capped at ts_us, dur_us 0, its value 0 or 1).
struct TraceSlice {
  int64_t pid = 0, tid = 0;
  std::string name, cat;
  double ts_us = 0, dur_us = 0;
  int64_t correlation = 0;  // args.correlation: links a device record to its CPU launch (0: none)
  double value = 0;         // a counter sample's value
};
inline constexpr const char* kPowerCapSample = "power_cap_sample";

// The X events of a Chrome trace file, and its gpu_power_capped samples. Throws pylon::Error naming the file (and the event) when it
// is not a Chrome trace, an event breaks check_trace_event's rules (profile/trace_json.h) or an X
// event lacks ts or dur. String tids ("stream 7") become negative ids, one per text.
std::vector<TraceSlice> read_trace_slices(const std::string& path);

// Device records as the CUPTI tracer writes them (Kineto's categories).
bool is_device_slice(const TraceSlice& s);  // cat kernel, gpu_memcpy or gpu_memset
// GEMM, attention, norm, elementwise, loss, embedding, reduction, optimizer, NCCL, memcpy, memset,
// communication (CPU collectives), data, other: from the category and the name.
std::string kernel_class(const TraceSlice& s);

// One step of one process (rank); times in µs. busy = compute ∪ communication, so
// step = busy + idle and communication = hidden + exposed.
struct StepBreakdown {
  int64_t pid = 0;
  int64_t index = 0;            // 0-based among this process's steps in the trace
  double begin_us = 0, step_us = 0;
  double compute_us = 0;        // union of compute slices
  double comm_us = 0;           // union of communication slices
  double exposed_comm_us = 0;   // communication while no compute runs
  double idle_us = 0;           // neither
  double power_capped_frac = -1;  // share of the step the GPU's clocks were held by the power cap
                                  // (the gpu_power_capped samples held until the next); -1: no samples
};

struct ClassTotal {
  std::string name;
  int64_t count = 0;
  double total_us = 0;
};

// One kernel (device records) or innermost op (CPU ranges) by name, summed over the steps.
struct NameTotal {
  std::string name, kernel_class;
  int64_t count = 0;
  double total_us = 0;
};

struct TraceAnalysis {
  bool device = false;  // device records were analysed (else CPU ranges)
  std::vector<StepBreakdown> steps;  // by pid, then time
  std::vector<ClassTotal> classes;   // summed over the steps, largest first
  std::vector<NameTotal> names;      // summed over the steps, largest first
};

// Steps are the "train_step" ranges of each process; device records belong to the step whose CPU
// range launched them (by correlation, else by start time), and a device step spans its records.
// A process without steps is one step over all its slices. Throws pylon::Error when nothing is left
// to analyse.
TraceAnalysis analyze_trace(const std::vector<TraceSlice>& slices);

std::string format_analysis(const TraceAnalysis& a);
nlohmann::json analysis_json(const TraceAnalysis& a);

}  // namespace pylon::profile
