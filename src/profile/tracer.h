// The tracer: scoped CPU ranges and counter samples recorded into per-thread buffers, enabled by a
// step schedule (wait / warmup / active, like torch.profiler.schedule). Disabled, a range costs one
// branch. Device records (CUPTI, profile/device_trace.h) join the snapshot as tracks per stream.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace pylon::profile {

// A range's arguments as plain numbers (formatted only when written): up to 4 input shapes of
// 8 dims in all, or one named integer.
struct RangeArgs {
  const char* key = nullptr;  // set: {"key": values[0]}
  uint8_t shapes = 0;         // else: this many shapes, dims[i] values each
  uint8_t dims[4] = {};
  int64_t values[8] = {};
};
// {"shapes":"[[256,32],[96,32]]"}, {"layer":3} or "" for none.
std::string args_json(const RangeArgs& a);
std::string shapes_text(const RangeArgs& a);  // "[[256,32],[96,32]]" or ""

// One finished range on one thread; times in ns of the steady clock (CLOCK_MONOTONIC: one
// timeline for every process of a machine).
struct RangeEvent {
  const char* category;  // static strings: "op", "layer", "collective", "optimizer", "data", ...
  const char* name;
  int64_t begin_ns, end_ns;
  RangeArgs args;
};

struct CounterSample {
  const char* name;
  int64_t ts_ns;
  double value;
};

struct ThreadTrace {
  int64_t tid;
  std::string name;
  std::vector<RangeEvent> ranges;  // sorted by begin, outer before inner
  std::vector<CounterSample> counters;  // in time order
};

// The RangeArgs key of an API call that launched device work: values[0] is the correlation id.
inline constexpr const char* kCorrelationArg = "correlation";

// One record of the device's own activity (CUPTI): a kernel, copy or fill on a stream, linked to
// the API call that launched it (a "cuda_runtime" range with the same correlation argument).
struct DeviceRecord {
  std::string name;      // demangled kernel name, or "Memcpy HtoD" / "Memset"
  const char* category;  // "kernel", "gpu_memcpy", "gpu_memset" (Kineto's)
  int64_t begin_ns, end_ns;  // on the tracer's clock
  int64_t correlation = 0;
  int device = 0, stream = 0;
  int64_t bytes = 0;  // copies and fills
};

// Everything one process recorded: pid is the rank.
struct Trace {
  int pid = 0;
  std::string process_name;
  std::vector<ThreadTrace> threads;
  std::vector<DeviceRecord> device;  // in time order; empty without device tracing
};

inline std::atomic<bool> g_enabled{false};
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
int64_t now_ns();

// Called on the recording thread only (its own buffer, no lock).
void record_range(RangeEvent&& e);
void record_counter(const char* name, double value);
void set_thread_name(const std::string& name);  // names the calling thread's track
// A moment on the calling thread's track (a range of category kInstantCategory and no length,
// written as an instant event, "ph":"i"), e.g. the GPU's clocks starting to be held by the power
// cap. Only while recording; `name` must outlive the trace (a string literal).
inline constexpr const char* kInstantCategory = "instant";
void record_instant(const char* name);

void set_enabled(bool on);
// Drops everything recorded so far (ranges that began and samples taken before now). Safe while
// other threads record: no buffer but the caller's own is touched; each thread empties its own
// buffer at its next record, and snapshot skips what is older.
void clear();
// Every thread's records since the last clear(); take it with recording off.
Trace snapshot(int pid, const std::string& process_name);

// Drops the device records launched before the trace's first launch range: work queued in a step
// before the active window (the GPU runs behind the CPU) that ran while the window was open. CUPTI's
// correlation ids rise with every API call of the process, so those are the records with a
// correlation below the smallest one among the trace's launch ranges (records without a traced launch
// above it, e.g. a library's driver-level fill, stay).
void drop_records_launched_before(Trace& trace);

// torch.profiler.schedule(wait, warmup, active) with repeat=1: step(k) at the start of step k
// (0-based) turns recording off for k < wait, on for the warmup and active steps, drops what the
// warmup recorded when the first active step starts, and turns it off after the last.
struct Schedule {
  int64_t wait = 1, warmup = 1, active = 5;
  // wait + warmup, the first active step; saturated, as the flags may be as large as 2^63-1.
  int64_t first_active() const {
    int64_t k = 0;
    return __builtin_add_overflow(wait, warmup, &k) ? (wait > 0 ? INT64_MAX : INT64_MIN) : k;
  }
};
class StepScheduler {
 public:
  explicit StepScheduler(Schedule s) : s_(s) {}
  void step(int64_t k);
  bool active(int64_t k) const {  // k - first_active() in unsigned: exact for k >= first_active()
    return k >= s_.first_active() &&
           static_cast<uint64_t>(k) - static_cast<uint64_t>(s_.first_active()) < static_cast<uint64_t>(s_.active);
  }

 private:
  Schedule s_;
};

// A scoped range: begins at construction, recorded at destruction (when enabled at its start).
class Range {
 public:
  Range(const char* category, const char* name) {
    if (enabled()) begin(category, name);
  }
  ~Range() {
    if (e_) end();
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;
  bool on() const { return e_.has_value(); }
  // Arguments, only computed when on(): tensor shapes (grouped in the table) and named integers.
  void set_shapes(std::initializer_list<std::initializer_list<int64_t>> shapes);
  void set_int(const char* key, int64_t value);

 private:
  void begin(const char* category, const char* name);
  void end();
  std::optional<RangeEvent> e_;  // empty while disabled: nothing to initialise
};

}  // namespace pylon::profile

#define PYLON_PROFILE_CAT2(a, b) a##b
#define PYLON_PROFILE_CAT(a, b) PYLON_PROFILE_CAT2(a, b)
#define PYLON_PROFILE_VAR PYLON_PROFILE_CAT(pylon_range_, __LINE__)

// PYLON_RANGE("collective", "all_gather"); ranges end with the enclosing scope.
#define PYLON_RANGE(category, name) ::pylon::profile::Range PYLON_PROFILE_VAR(category, name)
// PYLON_RANGE_SHAPES("op", "linear_forward", {N, I}, {O, I}): with the input shapes as args.
#define PYLON_RANGE_SHAPES(category, name, ...)                              \
  ::pylon::profile::Range PYLON_PROFILE_VAR(category, name);                 \
  if (PYLON_PROFILE_VAR.on()) PYLON_PROFILE_VAR.set_shapes({__VA_ARGS__})
