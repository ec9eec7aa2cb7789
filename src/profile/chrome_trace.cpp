// Chrome trace JSON writing (streamed, no document in memory) and the per-rank merge.
#include "profile/chrome_trace.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"

namespace pylon::profile {
namespace {

std::string quoted(const std::string& s) { return nlohmann::json(s).dump(); }

// A FILE* that writes events separated by commas and checks the end.
class EventWriter {
 public:
  explicit EventWriter(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "w")) {
    PYLON_CHECK(f_, path, ": cannot open for writing");
    std::fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f_);
  }
  ~EventWriter() {
    if (f_) std::fclose(f_);
  }
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;
  std::FILE* next() {
    if (count_++) std::fputs(",\n", f_);
    return f_;
  }
  void finish() {
    std::fputs("\n]}\n", f_);
    const bool ok = !std::ferror(f_);
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    PYLON_CHECK(ok && closed, path_, ": cannot write the trace (disk full?)");
  }

 private:
  std::string path_;
  std::FILE* f_;
  size_t count_ = 0;
};

void write_metadata(EventWriter& w, const char* what, int pid, int64_t tid, const std::string& name) {
  std::fprintf(w.next(), R"({"name":"%s","ph":"M","pid":%d,"tid":%lld,"args":{"name":%s}})", what, pid,
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
    std::fprintf(w.next(), R"({"name":"thread_sort_index","ph":"M","pid":%d,"tid":%lld,"args":{"sort_index":%lld}})",
                 pid, static_cast<long long>(tid), static_cast<long long>(tid));
  }
  // The launching API call of each correlation: where the flow starts.
  std::map<int64_t, std::pair<int64_t, int64_t>> launch;  // correlation -> (tid, begin_ns)
  for (const ThreadTrace& t : trace.threads)
    for (const RangeEvent& e : t.ranges)
      if (e.args.key && !std::strcmp(e.args.key, kCorrelationArg)) launch.try_emplace(e.args.values[0], t.tid, e.begin_ns);
  for (const DeviceRecord& r : trace.device) {
    const auto tid = static_cast<long long>(stream_tid(r));
    std::fprintf(w.next(),
                 R"({"name":%s,"cat":"%s","ph":"X","pid":%d,"tid":%lld,"ts":%s,"dur":%s,"args":{"correlation":%lld,"device":%d,"stream":%d%s}})",
                 quoted(r.name).c_str(), r.category, pid, tid, us(r.begin_ns).c_str(), us(r.end_ns - r.begin_ns).c_str(),
                 static_cast<long long>(r.correlation), r.device, r.stream,
                 r.bytes ? (",\"bytes\":" + std::to_string(r.bytes)).c_str() : "");
    const auto l = launch.find(r.correlation);
    if (!r.correlation || l == launch.end()) continue;
    // A flow from the launch to the record (Kineto's "ac2g" arrows); "bp":"e" binds the end to the
    // slice that encloses it: the record itself.
    std::fprintf(w.next(), R"({"name":"launch","cat":"ac2g","ph":"s","id":%lld,"pid":%d,"tid":%lld,"ts":%s})",
                 static_cast<long long>(r.correlation), pid, static_cast<long long>(l->second.first),
                 us(l->second.second).c_str());
    std::fprintf(w.next(), R"({"name":"launch","cat":"ac2g","ph":"f","bp":"e","id":%lld,"pid":%d,"tid":%lld,"ts":%s})",
                 static_cast<long long>(r.correlation), pid, tid, us(r.begin_ns).c_str());
  }
}

}  // namespace

void write_chrome_trace(const Trace& trace, const std::string& path) {
  EventWriter w(path);
  const int pid = trace.pid;
  write_metadata(w, "process_name", pid, 0, trace.process_name);
  std::fprintf(w.next(), R"({"name":"process_sort_index","ph":"M","pid":%d,"tid":0,"args":{"sort_index":%d}})",
               pid, pid);
  for (const ThreadTrace& t : trace.threads) {
    write_metadata(w, "thread_name", pid, t.tid, t.name);
    const auto tid = static_cast<long long>(t.tid);
    for (const RangeEvent& e : t.ranges) {
      const std::string args = args_json(e.args);
      std::fprintf(w.next(), R"({"name":"%s","cat":"%s","ph":"X","pid":%d,"tid":%lld,"ts":%s,"dur":%s%s%s})",
                   e.name, e.category, pid, tid, us(e.begin_ns).c_str(), us(e.end_ns - e.begin_ns).c_str(),
                   args.empty() ? "" : ",\"args\":", args.c_str());
    }
    for (const CounterSample& c : t.counters)
      std::fprintf(w.next(), R"({"name":"%s","ph":"C","pid":%d,"tid":%lld,"ts":%s,"args":{"value":%.17g}})",
                   c.name, pid, tid, us(c.ts_ns).c_str(), c.value);
  }
  write_device_records(w, trace);
  w.finish();
}

void merge_chrome_traces(const std::string& out_path, const std::vector<std::string>& inputs) {
  PYLON_CHECK(!inputs.empty(), "no input traces");
  std::vector<nlohmann::json> events;  // every input's traceEvents, pids remapped
  std::set<int64_t> used;
  for (int64_t input = 0; input < static_cast<int64_t>(inputs.size()); ++input) {
    const std::string& path = inputs[static_cast<size_t>(input)];
    nlohmann::json doc = nlohmann::json::parse(read_text_file(path), nullptr, /*allow_exceptions=*/false);
    PYLON_CHECK(!doc.is_discarded(), path, ": not a Chrome trace (not valid JSON)");
    nlohmann::json* list = doc.is_array() ? &doc : nullptr;  // the format allows a bare array
    if (doc.is_object() && doc.contains("traceEvents")) list = &doc["traceEvents"];
    PYLON_CHECK(list && list->is_array(), path, ": not a Chrome trace (no traceEvents array)");
    std::map<int64_t, int64_t> pid_of;
    for (nlohmann::json& e : *list) {
      PYLON_CHECK(e.is_object() && e.contains("ph") && e["ph"].is_string(), path,
                  ": not a Chrome trace (an event without a \"ph\" phase)");
      const int64_t old = e.contains("pid") && e["pid"].is_number_integer() ? e["pid"].get<int64_t>() : 0;
      auto [it, fresh] = pid_of.try_emplace(old, old);
      if (fresh) {
        while (used.count(it->second)) ++it->second;
        used.insert(it->second);
      }
      e["pid"] = it->second;
      // Flow ids (launch correlations) are per process: keep the inputs' apart.
      if (e.contains("id") && e["id"].is_number_integer() && input > 0)
        e["id"] = e["id"].get<int64_t>() + (input << 40);
      events.push_back(std::move(e));
    }
  }
  EventWriter w(out_path);
  for (const nlohmann::json& e : events) std::fputs(e.dump().c_str(), w.next());
  w.finish();
}

}  // namespace pylon::profile
