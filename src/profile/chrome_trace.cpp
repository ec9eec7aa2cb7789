// Chrome trace JSON writing (streamed, no document in memory) and the per-rank merge.
#include "profile/chrome_trace.h"

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "profile/trace_json.h"

namespace pylon::profile {
namespace {

// A JSON string literal; bytes that are not UTF-8 (a kernel name from CUPTI) become U+FFFD.
std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The trace file's events, separated by commas, written through an AtomicFile: a failure leaves
// no partial file at the path.
class EventWriter {
 public:
  explicit EventWriter(const std::string& path)
      : file_(path), buffer_("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n") {}
  // One event, printf-style.
  __attribute__((format(printf, 2, 3))) void add(const char* format, ...) {
    separate();
    char small[512];
    std::va_list args, again;
    va_start(args, format);
    va_copy(again, args);
    const int n = std::vsnprintf(small, sizeof small, format, args);
    va_end(args);
    PYLON_ASSERT(n >= 0, "bad trace event format");
    if (static_cast<size_t>(n) < sizeof small) {
      buffer_.append(small, static_cast<size_t>(n));
    } else {
      const size_t at = buffer_.size();
      buffer_.resize(at + static_cast<size_t>(n) + 1);
      std::vsnprintf(buffer_.data() + at, static_cast<size_t>(n) + 1, format, again);
      buffer_.resize(at + static_cast<size_t>(n));
    }
    va_end(again);
    flush_if_large();
  }
  void add_text(const std::string& event) {
    separate();
    buffer_ += event;
    flush_if_large();
  }
  void finish() {
    buffer_ += "\n]}\n";
    file_.write(buffer_.data(), buffer_.size());
    file_.commit();
  }

 private:
  void separate() {
    if (count_++) buffer_ += ",\n";
  }
  void flush_if_large() {
    if (buffer_.size() < (1u << 20)) return;
    file_.write(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  AtomicFile file_;
  std::string buffer_;
  size_t count_ = 0;
};

void write_metadata(EventWriter& w, const char* what, int pid, int64_t tid, const std::string& name) {
  w.add(R"({"name":"%s","ph":"M","pid":%d,"tid":%lld,"args":{"name":%s}})", what, pid,
               static_cast<long long>(tid), quoted(name).c_str());
}

// ns as µs with three decimals, exactly: a child's ts + dur never passes its parent's end.
std::string us(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  return buf;
}

// Device records go on one track per (device, stream), after the CPU threads.
int64_t stream_tid(const DeviceRecord& r) { return kStreamTidBase + int64_t{r.device} * 1000000 + r.stream; }

void write_device_records(EventWriter& w, const Trace& trace) {
  const int pid = trace.pid;
  std::map<int64_t, const DeviceRecord*> tracks;
  for (const DeviceRecord& r : trace.device) tracks.try_emplace(stream_tid(r), &r);
  for (const auto& [tid, r] : tracks) {
    write_metadata(w, "thread_name", pid, tid,
                   "cuda:" + std::to_string(r->device) + " stream " + std::to_string(r->stream));
    w.add( R"({"name":"thread_sort_index","ph":"M","pid":%d,"tid":%lld,"args":{"sort_index":%lld}})",
                 pid, static_cast<long long>(tid), static_cast<long long>(tid));
  }
  // The launching API call of each correlation: where the flow starts.
  std::map<int64_t, std::pair<int64_t, int64_t>> launch;  // correlation -> (tid, begin_ns)
  for (const ThreadTrace& t : trace.threads)
    for (const RangeEvent& e : t.ranges)
      if (e.args.key && !std::strcmp(e.args.key, kCorrelationArg)) launch.try_emplace(e.args.values[0], t.tid, e.begin_ns);
  for (const DeviceRecord& r : trace.device) {
    const auto tid = static_cast<long long>(stream_tid(r));
    w.add(
                 R"({"name":%s,"cat":"%s","ph":"X","pid":%d,"tid":%lld,"ts":%s,"dur":%s,"args":{"correlation":%lld,"device":%d,"stream":%d%s}})",
                 quoted(r.name).c_str(), r.category, pid, tid, us(r.begin_ns).c_str(), us(r.end_ns - r.begin_ns).c_str(),
                 static_cast<long long>(r.correlation), r.device, r.stream,
                 r.bytes ? (",\"bytes\":" + std::to_string(r.bytes)).c_str() : "");
    const auto l = launch.find(r.correlation);
    if (!r.correlation || l == launch.end()) continue;
    // A flow from the launch to the record (Kineto's "ac2g" arrows); "bp":"e" binds the end to the
    // slice that encloses it: the record itself.
    w.add( R"({"name":"launch","cat":"ac2g","ph":"s","id":%lld,"pid":%d,"tid":%lld,"ts":%s})",
                 static_cast<long long>(r.correlation), pid, static_cast<long long>(l->second.first),
                 us(l->second.second).c_str());
    w.add( R"({"name":"launch","cat":"ac2g","ph":"f","bp":"e","id":%lld,"pid":%d,"tid":%lld,"ts":%s})",
                 static_cast<long long>(r.correlation), pid, tid, us(r.begin_ns).c_str());
  }
}

}  // namespace

void write_chrome_trace(const Trace& trace, const std::string& path) {
  EventWriter w(path);
  const int pid = trace.pid;
  write_metadata(w, "process_name", pid, 0, trace.process_name);
  w.add( R"({"name":"process_sort_index","ph":"M","pid":%d,"tid":0,"args":{"sort_index":%d}})",
               pid, pid);
  for (const ThreadTrace& t : trace.threads) {
    write_metadata(w, "thread_name", pid, t.tid, t.name);
    const auto tid = static_cast<long long>(t.tid);
    for (const RangeEvent& e : t.ranges) {
      if (!std::strcmp(e.category, kInstantCategory)) {  // thread-scoped instant
        w.add(R"({"name":"%s","cat":"%s","ph":"i","s":"t","pid":%d,"tid":%lld,"ts":%s})", e.name, e.category, pid,
              tid, us(e.begin_ns).c_str());
        continue;
      }
      const std::string args = args_json(e.args);
      w.add( R"({"name":"%s","cat":"%s","ph":"X","pid":%d,"tid":%lld,"ts":%s,"dur":%s%s%s})",
                   e.name, e.category, pid, tid, us(e.begin_ns).c_str(), us(e.end_ns - e.begin_ns).c_str(),
                   args.empty() ? "" : ",\"args\":", args.c_str());
    }
    for (const CounterSample& c : t.counters)
      w.add( R"({"name":"%s","ph":"C","pid":%d,"tid":%lld,"ts":%s,"args":{"value":%.17g}})",
                   c.name, pid, tid, us(c.ts_ns).c_str(), c.value);
  }
  write_device_records(w, trace);
  w.finish();
}

void merge_chrome_traces(const std::string& out_path, const std::vector<std::string>& inputs) {
  PYLON_CHECK(!inputs.empty(), "no input traces");
  std::vector<nlohmann::json> events;  // every input's traceEvents, pids remapped
  std::set<int64_t> used;
  for (size_t input = 0; input < inputs.size(); ++input) {
    const std::string& path = inputs[input];
    nlohmann::json list = read_trace_events(path);  // checked, nested at most kMaxTraceJsonDepth
    std::map<int64_t, int64_t> pid_of;
    for (nlohmann::json& e : list) {
      const int64_t old = e.contains("pid") ? e["pid"].get<int64_t>() : 0;
      auto [it, fresh] = pid_of.try_emplace(old, old);
      if (fresh) {  // the next free pid, wrapping past the largest
        while (used.count(it->second))
          it->second = it->second == std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::min()
                                                                          : it->second + 1;
        used.insert(it->second);
      }
      e["pid"] = it->second;
      // Flow ids (launch correlations) are per process: keep the inputs' apart (modulo 2^64).
      if (e.contains("id") && input > 0) {
        if (e["id"].is_string())
          e["id"] = std::to_string(input) + ":" + e["id"].get<std::string>();
        else
          e["id"] = static_cast<int64_t>(static_cast<uint64_t>(e["id"].get<int64_t>()) + (uint64_t{input} << 40));
      }
      events.push_back(std::move(e));
    }
  }
  EventWriter w(out_path);
  for (const nlohmann::json& e : events) w.add_text(e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  w.finish();
}

}  // namespace pylon::profile
