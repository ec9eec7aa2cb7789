// The tracer's per-thread buffers: each thread registers its buffer once, then appends without a
// lock; the registry owns the buffers so a thread's records outlive it. Only the owning thread
// changes a buffer: clear() moves a cut-off time that the owner and snapshot() apply (NCCL's
// launch threads record while the schedule clears the warm-up).
#include "profile/tracer.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>

namespace pylon::profile {
namespace {

struct ThreadBuffer {
  int64_t tid = 0;
  std::string name;
  int64_t cleared_ns = 0;  // the cut-off this buffer has applied
  std::vector<RangeEvent> ranges;
  std::vector<CounterSample> counters;
};

struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may record during exit
  return *r;
}

ThreadBuffer& this_thread_buffer() {
  thread_local ThreadBuffer* mine = [] {
    auto b = std::make_unique<ThreadBuffer>();
    b->tid = static_cast<int64_t>(::syscall(SYS_gettid));
    const bool main = b->tid == ::getpid();
    b->name = main ? "main" : "thread " + std::to_string(b->tid);
    // ~2 MB on the main thread: a few steps of a small model without regrowing. Other threads
    // start empty: NCCL launches each collective from a new thread that records a few ranges.
    if (main) b->ranges.reserve(16384);
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    r.buffers.push_back(std::move(b));
    return r.buffers.back().get();
  }();
  return *mine;
}

std::atomic<int64_t> g_cleared_ns{0};  // records before it are dropped

// The calling thread's buffer, emptied first if a clear() came since its last record.
ThreadBuffer& own_buffer() {
  ThreadBuffer& b = this_thread_buffer();
  const int64_t cleared = g_cleared_ns.load(std::memory_order_acquire);
  if (b.cleared_ns != cleared) b.ranges.clear(), b.counters.clear(), b.cleared_ns = cleared;
  return b;
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void record_range(RangeEvent&& e) { own_buffer().ranges.push_back(std::move(e)); }

void record_counter(const char* name, double value) {
  if (!enabled()) return;
  own_buffer().counters.push_back({name, now_ns(), value});
}

void set_thread_name(const std::string& name) { this_thread_buffer().name = name; }

void record_instant(const char* name) {
  if (!enabled()) return;
  const int64_t t = now_ns();
  record_range({kInstantCategory, name, t, t, {}});
}

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

void clear() {
  const int64_t now = now_ns();
  int64_t was = g_cleared_ns.load();
  while (!g_cleared_ns.compare_exchange_weak(was, std::max(now, was + 1))) {  // each clear a new cut-off
  }
  own_buffer();  // the caller's own memory goes now
}

void drop_records_launched_before(Trace& trace) {
  int64_t first = std::numeric_limits<int64_t>::max();
  for (const ThreadTrace& th : trace.threads)
    for (const RangeEvent& e : th.ranges)
      if (e.args.key && !std::strcmp(e.args.key, kCorrelationArg) && e.args.values[0] > 0) first = std::min(first, e.args.values[0]);
  if (first == std::numeric_limits<int64_t>::max()) return;  // no launch traced: nothing to tell apart
  std::erase_if(trace.device, [first](const DeviceRecord& d) { return d.correlation > 0 && d.correlation < first; });
}

Trace snapshot(int pid, const std::string& process_name) {
  Trace t;
  t.pid = pid;
  t.process_name = process_name;
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const int64_t cleared = g_cleared_ns.load(std::memory_order_acquire);
  for (const auto& b : r.buffers) {
    ThreadTrace th{b->tid, b->name, {}, {}};
    for (const RangeEvent& e : b->ranges)
      if (e.begin_ns >= cleared) th.ranges.push_back(e);
    for (const CounterSample& c : b->counters)
      if (c.ts_ns >= cleared) th.counters.push_back(c);
    if (th.ranges.empty() && th.counters.empty()) continue;
    // Recorded at their ends: order by begin, the enclosing range first on ties.
    std::sort(th.ranges.begin(), th.ranges.end(), [](const RangeEvent& a, const RangeEvent& c) {
      return a.begin_ns != c.begin_ns ? a.begin_ns < c.begin_ns : a.end_ns > c.end_ns;
    });
    t.threads.push_back(std::move(th));
  }
  return t;
}

void StepScheduler::step(int64_t k) {
  const bool warmup = k >= s_.wait && k < s_.first_active();
  if (k == s_.first_active()) clear();  // the warmup's records are not kept
  set_enabled(warmup || active(k));
}

void Range::begin(const char* category, const char* name) {
  e_.emplace();
  e_->category = category;
  e_->name = name;
  e_->begin_ns = now_ns();
}

void Range::end() {
  e_->end_ns = now_ns();
  record_range(std::move(*e_));
}

void Range::set_shapes(std::initializer_list<std::initializer_list<int64_t>> shapes) {
  RangeArgs& a = e_->args;
  size_t at = 0;
  for (const auto& shape : shapes) {
    if (a.shapes == 4 || at + shape.size() > 8) break;  // more is not kept
    a.dims[a.shapes++] = static_cast<uint8_t>(shape.size());
    for (int64_t d : shape) a.values[at++] = d;
  }
}

void Range::set_int(const char* key, int64_t value) {
  e_->args.key = key;
  e_->args.values[0] = value;
}

std::string shapes_text(const RangeArgs& a) {
  if (a.key || a.shapes == 0) return "";
  std::string s = "[";
  size_t at = 0;
  for (int i = 0; i < a.shapes; ++i) {
    s += i ? ",[" : "[";
    for (int d = 0; d < a.dims[i]; ++d) s += (d ? "," : "") + std::to_string(a.values[at++]);
    s += ']';
  }
  return s + "]";
}

std::string args_json(const RangeArgs& a) {
  if (a.key) return std::string("{\"") + a.key + "\":" + std::to_string(a.values[0]) + "}";
  return a.shapes ? "{\"shapes\":\"" + shapes_text(a) + "\"}" : "";
}

}  // namespace pylon::profile
