// Step breakdown by interval unions: each step's slices become sorted, merged interval lists for
// compute and communication; overlaps and gaps are measured on those lists.
#include "profile/analysis.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <utility>

#include "core/error.h"
#include "io/atomic_file.h"
#include "profile/table.h"

namespace pylon::profile {
namespace {

using Intervals = std::vector<std::pair<double, double>>;  // [begin, end) in µs

// Sorted, disjoint union of the intervals, clipped to [lo, hi).
Intervals merged(Intervals v, double lo, double hi) {
  for (auto& [b, e] : v) b = std::max(b, lo), e = std::min(e, hi);
  std::erase_if(v, [](const auto& i) { return i.second <= i.first; });
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& i : v) {
    if (!out.empty() && i.first <= out.back().second)
      out.back().second = std::max(out.back().second, i.second);
    else
      out.push_back(i);
  }
  return out;
}

double length(const Intervals& v) {
  double s = 0;
  for (const auto& [b, e] : v) s += e - b;
  return s;
}

// Length of the intersection of two merged lists.
double overlap(const Intervals& a, const Intervals& b) {
  double s = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    s += std::max(0.0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
    a[i].second < b[j].second ? ++i : ++j;
  }
  return s;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool has_any(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (s.find(w) != std::string::npos) return true;
  return false;
}

bool is_communication(const TraceSlice& s) {
  return s.cat == "collective" || (is_device_slice(s) && lower(s.name).find("nccl") != std::string::npos);
}

// Innermost CPU ranges of each thread (slices properly nested per thread): the ones no later
// slice of the thread starts inside.
std::vector<const TraceSlice*> cpu_leaves(const std::vector<const TraceSlice*>& cpu) {
  std::map<std::pair<int64_t, int64_t>, std::vector<const TraceSlice*>> by_thread;
  for (const TraceSlice* s : cpu) by_thread[{s->pid, s->tid}].push_back(s);
  std::vector<const TraceSlice*> leaves;
  for (auto& [thread, list] : by_thread) {
    std::sort(list.begin(), list.end(), [](const TraceSlice* a, const TraceSlice* b) {
      return a->ts_us != b->ts_us ? a->ts_us < b->ts_us : a->dur_us > b->dur_us;
    });
    for (size_t i = 0; i < list.size(); ++i)
      if (i + 1 == list.size() || list[i + 1]->ts_us >= list[i]->ts_us + list[i]->dur_us)
        leaves.push_back(list[i]);
  }
  return leaves;
}

struct Step {
  double begin, end;
  std::vector<const TraceSlice*> slices;  // what runs in it on the analysed device
};

StepBreakdown breakdown(const Step& st, bool device) {
  StepBreakdown b;
  double lo = st.begin, hi = st.end;
  if (device) {  // a device step spans its records
    lo = 1e300, hi = -1e300;
    for (const TraceSlice* s : st.slices) lo = std::min(lo, s->ts_us), hi = std::max(hi, s->ts_us + s->dur_us);
  }
  Intervals compute, comm;
  for (const TraceSlice* s : st.slices)
    (is_communication(*s) ? comm : compute).emplace_back(s->ts_us, s->ts_us + s->dur_us);
  const Intervals c = merged(std::move(compute), lo, hi), m = merged(std::move(comm), lo, hi);
  b.begin_us = lo;
  b.step_us = hi - lo;
  b.compute_us = length(c);
  b.comm_us = length(m);
  const double both = overlap(c, m);
  b.exposed_comm_us = b.comm_us - both;
  b.idle_us = std::max(0.0, b.step_us - (b.compute_us + b.comm_us - both));
  return b;
}

std::string percent(double part, double whole) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

}  // namespace

std::vector<TraceSlice> read_trace_slices(const std::string& path) {
  const nlohmann::json doc = nlohmann::json::parse(read_text_file(path), nullptr, /*allow_exceptions=*/false);
  PYLON_CHECK(!doc.is_discarded(), path, ": not a Chrome trace (not valid JSON)");
  const nlohmann::json* list = doc.is_array() ? &doc : nullptr;  // the format allows a bare array
  if (doc.is_object() && doc.contains("traceEvents")) list = &doc["traceEvents"];
  PYLON_CHECK(list && list->is_array(), path, ": not a Chrome trace (no traceEvents array)");
  std::vector<TraceSlice> out;
  for (const nlohmann::json& e : *list) {
    PYLON_CHECK(e.is_object() && e.contains("ph") && e["ph"].is_string(), path,
                ": not a Chrome trace (an event without a \"ph\" phase)");
    if (e["ph"] != "X") continue;
    PYLON_CHECK(e.contains("ts") && e["ts"].is_number() && e.contains("dur") && e["dur"].is_number(), path,
                ": an \"X\" event without numeric ts and dur: ", e.dump().substr(0, 200));
    auto integer = [&](const char* k) { return e.contains(k) && e[k].is_number_integer() ? e[k].get<int64_t>() : 0; };
    auto text = [&](const char* k) { return e.contains(k) && e[k].is_string() ? e[k].get<std::string>() : ""; };
    TraceSlice s;
    s.pid = integer("pid"), s.tid = integer("tid");
    s.name = text("name"), s.cat = text("cat");
    s.ts_us = e["ts"].get<double>();
    s.dur_us = std::max(0.0, e["dur"].get<double>());
    if (e.contains("args") && e["args"].is_object() && e["args"].contains("correlation") &&
        e["args"]["correlation"].is_number_integer())
      s.correlation = e["args"]["correlation"].get<int64_t>();
    out.push_back(std::move(s));
  }
  return out;
}

bool is_device_slice(const TraceSlice& s) {
  return s.cat == "kernel" || s.cat == "gpu_memcpy" || s.cat == "gpu_memset";
}

std::string kernel_class(const TraceSlice& s) {
  if (s.cat == "gpu_memcpy") return "memcpy";
  if (s.cat == "gpu_memset") return "memset";
  if (s.cat == "collective") return "communication";
  if (s.cat == "data") return "data";
  const std::string n = lower(s.name);
  if (has_any(n, {"nccl"})) return "NCCL";
  if (has_any(n, {"attention", "flash", "fmha", "softmax"})) return "attention";
  if (has_any(n, {"gemm", "gemv", "matmul", "linear", "cublas", "cutlass", "nvjet", "xmma"})) return "GEMM";
  if (has_any(n, {"norm"})) return "norm";
  if (has_any(n, {"adam", "clip", "optimizer"}) || s.cat == "optimizer") return "optimizer";
  if (has_any(n, {"cross_entropy", "loss"})) return "loss";
  if (has_any(n, {"embedding"})) return "embedding";
  if (has_any(n, {"reduce", "sum_", "column_sum", "partials"})) return "reduction";
  if (has_any(n, {"cast", "silu", "gelu", "relu", "rope", "add", "mul", "copy", "fill", "iota", "elementwise"}))
    return "elementwise";
  return is_device_slice(s) || s.cat == "op" ? "elementwise" : "other";
}

TraceAnalysis analyze_trace(const std::vector<TraceSlice>& slices) {
  TraceAnalysis a;
  for (const TraceSlice& s : slices) a.device = a.device || is_device_slice(s);
  std::map<int64_t, std::vector<const TraceSlice*>> cpu_by_pid, device_by_pid;
  // (rank, correlation) -> CPU launch time: each rank's process numbers its own API calls.
  std::map<std::pair<int64_t, int64_t>, double> launch_ts;
  for (const TraceSlice& s : slices) {
    (is_device_slice(s) ? device_by_pid : cpu_by_pid)[s.pid].push_back(&s);
    if (!is_device_slice(s) && s.correlation) launch_ts[{s.pid, s.correlation}] = s.ts_us;
  }
  std::map<std::string, ClassTotal> classes;
  std::map<std::string, NameTotal> names;
  for (auto& [pid, cpu] : cpu_by_pid) {
    // The analysed slices: device records, or innermost CPU ranges plus the collectives.
    std::vector<const TraceSlice*> work;
    if (a.device) {
      work = device_by_pid[pid];
    } else {
      for (const TraceSlice* s : cpu_leaves(cpu))
        if (s->cat != "step" && s->cat != "collective") work.push_back(s);
      for (const TraceSlice* s : cpu)
        if (s->cat == "collective") work.push_back(s);
    }
    std::vector<Step> steps;
    for (const TraceSlice* s : cpu)
      if (s->name == "train_step") steps.push_back({s->ts_us, s->ts_us + s->dur_us, {}});
    std::sort(steps.begin(), steps.end(), [](const Step& x, const Step& y) { return x.begin < y.begin; });
    if (steps.empty()) steps.push_back({-1e300, 1e300, {}});  // the whole trace as one step
    for (const TraceSlice* s : work) {
      const auto launch = s->correlation ? launch_ts.find({pid, s->correlation}) : launch_ts.end();
      const double at = launch != launch_ts.end() ? launch->second : s->ts_us;
      auto it = std::upper_bound(steps.begin(), steps.end(), at, [](double t, const Step& st) { return t < st.begin; });
      if (it == steps.begin() || at >= std::prev(it)->end) continue;  // outside every step
      std::prev(it)->slices.push_back(s);
    }
    int64_t index = 0;
    for (const Step& st : steps) {
      if (st.slices.empty()) continue;
      StepBreakdown b = breakdown(st, a.device || st.begin < -1e299);
      b.pid = pid, b.index = index++;
      a.steps.push_back(b);
      for (const TraceSlice* s : st.slices) {
        ClassTotal& c = classes[kernel_class(*s)];
        c.name = kernel_class(*s);
        c.count += 1;
        c.total_us += s->dur_us;
        NameTotal& n = names[s->name];
        n.name = s->name, n.kernel_class = c.name;
        n.count += 1;
        n.total_us += s->dur_us;
      }
    }
  }
  PYLON_CHECK(!a.steps.empty(), "the trace has no ranges or device records to analyse");
  for (auto& [name, c] : classes) a.classes.push_back(c);
  std::stable_sort(a.classes.begin(), a.classes.end(),
                   [](const ClassTotal& x, const ClassTotal& y) { return x.total_us > y.total_us; });
  for (auto& [name, n] : names) a.names.push_back(n);
  std::stable_sort(a.names.begin(), a.names.end(),
                   [](const NameTotal& x, const NameTotal& y) { return x.total_us > y.total_us; });
  return a;
}

std::string format_analysis(const TraceAnalysis& a) {
  std::string out;
  char line[256];
  out += std::string("step time breakdown (") + (a.device ? "device records" : "CPU ranges") + "):\n";
  const char* fmt = "%-6s %-5s %11s %17s %17s %17s %17s %8s\n";
  std::snprintf(line, sizeof line, fmt, "rank", "step", "step", "compute", "communication", "exposed comm",
                "idle", "hidden");
  out += line;
  std::map<int64_t, StepBreakdown> sums;
  auto row = [&](const std::string& rank, const std::string& step, const StepBreakdown& b) {
    auto cell = [&](double v) { return format_us(v, 1) + " " + percent(v, b.step_us); };
    std::snprintf(line, sizeof line, fmt, rank.c_str(), step.c_str(), format_us(b.step_us, 1).c_str(),
                  cell(b.compute_us).c_str(), cell(b.comm_us).c_str(), cell(b.exposed_comm_us).c_str(),
                  cell(b.idle_us).c_str(),
                  b.comm_us > 0 ? percent(b.comm_us - b.exposed_comm_us, b.comm_us).c_str() : "-");
    out += line;
  };
  for (const StepBreakdown& b : a.steps) {
    row(std::to_string(b.pid), std::to_string(b.index), b);
    StepBreakdown& s = sums[b.pid];
    s.step_us += b.step_us, s.compute_us += b.compute_us, s.comm_us += b.comm_us;
    s.exposed_comm_us += b.exposed_comm_us, s.idle_us += b.idle_us;
  }
  for (const auto& [pid, s] : sums) row(std::to_string(pid), "all", s);
  double total = 0;
  for (const ClassTotal& c : a.classes) total += c.total_us;
  out += std::string("time per ") + (a.device ? "kernel" : "op") + " class (summed durations over the steps):\n";
  for (const ClassTotal& c : a.classes) {
    std::snprintf(line, sizeof line, "  %-14s %12s %7s %9lld calls\n", c.name.c_str(), format_us(c.total_us, 1).c_str(),
                  percent(c.total_us, total).c_str(), static_cast<long long>(c.count));
    out += line;
  }
  return out;
}

nlohmann::json analysis_json(const TraceAnalysis& a) {
  nlohmann::json steps = nlohmann::json::array(), classes = nlohmann::json::array();
  for (const StepBreakdown& b : a.steps)
    steps.push_back({{"rank", b.pid}, {"step", b.index}, {"begin_us", b.begin_us}, {"step_us", b.step_us},
                     {"compute_us", b.compute_us}, {"comm_us", b.comm_us},
                     {"exposed_comm_us", b.exposed_comm_us}, {"idle_us", b.idle_us},
                     {"hidden_comm_frac", b.comm_us > 0 ? (b.comm_us - b.exposed_comm_us) / b.comm_us : 0.0}});
  for (const ClassTotal& c : a.classes)
    classes.push_back({{"class", c.name}, {"count", c.count}, {"total_us", c.total_us}});
  return {{"source", a.device ? "device" : "cpu"}, {"steps", steps}, {"classes", classes}};
}

}  // namespace pylon::profile
