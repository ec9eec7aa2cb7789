// The tracer's per-thread buffers: each thread registers its buffer once, then appends without a
// lock; the registry owns the buffers so a thread's records outlive it.
#include "profile/tracer.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>

namespace pylon::profile {
namespace {

struct ThreadBuffer {
  int64_t tid = 0;
  std::string name;
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

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void record_range(RangeEvent&& e) { this_thread_buffer().ranges.push_back(std::move(e)); }

void record_counter(const char* name, double value) {
  if (!enabled()) return;
  this_thread_buffer().counters.push_back({name, now_ns(), value});
}

void set_thread_name(const std::string& name) { this_thread_buffer().name = name; }

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

void clear() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& b : r.buffers) b->ranges.clear(), b->counters.clear();
}

Trace snapshot(int pid, const std::string& process_name) {
  Trace t;
  t.pid = pid;
  t.process_name = process_name;
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& b : r.buffers) {
    if (b->ranges.empty() && b->counters.empty()) continue;
    ThreadTrace th{b->tid, b->name, b->ranges, b->counters};
    // Recorded at their ends: order by begin, the enclosing range first on ties.
    std::sort(th.ranges.begin(), th.ranges.end(), [](const RangeEvent& a, const RangeEvent& c) {
      return a.begin_ns != c.begin_ns ? a.begin_ns < c.begin_ns : a.end_ns > c.end_ns;
    });
    t.threads.push_back(std::move(th));
  }
  return t;
}

void StepScheduler::step(int64_t k) {
  const bool warmup = k >= s_.wait && k < s_.wait + s_.warmup;
  if (k == s_.wait + s_.warmup) clear();  // the warmup's records are not kept
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
