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
#include "profile/table.h"
#include "profile/trace_json.h"

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

// The share of [b.begin_us, b.begin_us + b.step_us) in which a 0/1 signal sampled at `samples` (time
// order; each value held until the next sample) was 1; before the first sample it is unknown and
// left out. -1 when no sample reaches into the step.
double held_share(std::vector<std::pair<double, double>>& samples, const StepBreakdown& b) {
  std::sort(samples.begin(), samples.end());
  const double lo = b.begin_us, hi = b.begin_us + b.step_us;
  double on = 0, known = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const double from = std::max(lo, samples[i].first);
    const double to = std::min(hi, i + 1 < samples.size() ? samples[i + 1].first : hi);
    if (to <= from) continue;
    known += to - from;
    on += samples[i].second * (to - from);
  }
  return known > 0 ? on / known : -1;
}

std::string percent(double part, double whole) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

}  // namespace

std::vector<TraceSlice> read_trace_slices(const std::string& path) {
  const nlohmann::json list = read_trace_events(path);  // checked: types, ranges, nesting
  std::map<std::string, int64_t> named_tids;  // "tid": "stream 7" -> -1, -2, ... (integer tids are >= 0)
  std::vector<TraceSlice> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& e = list[i];
    if (e["ph"] == "C" && e.contains("name") && e["name"] == "gpu_power_capped" && e.contains("ts") &&
        e.contains("args") && e["args"].contains("value") && e["args"]["value"].is_number()) {
      TraceSlice s;
      s.pid = e.contains("pid") ? e["pid"].get<int64_t>() : 0;
      s.name = "gpu_power_capped", s.cat = kPowerCapSample;
      s.ts_us = e["ts"].get<double>();
      s.value = e["args"]["value"].get<double>() > 0 ? 1 : 0;
      out.push_back(std::move(s));
      continue;
    }
    if (e["ph"] != "X") continue;
    PYLON_CHECK(e.contains("ts") && e.contains("dur"), path, ": event ", i,
                ": an \"X\" event without \"ts\" and \"dur\"");
    auto text = [&](const char* k) { return e.contains(k) ? e[k].get<std::string>() : ""; };
    TraceSlice s;
    s.pid = e.contains("pid") ? e["pid"].get<int64_t>() : 0;
    if (e.contains("tid") && e["tid"].is_string())
      s.tid = named_tids.try_emplace(e["tid"].get<std::string>(), -1 - static_cast<int64_t>(named_tids.size()))
                  .first->second;
    else if (e.contains("tid"))
      s.tid = e["tid"].get<int64_t>();
    s.name = text("name"), s.cat = text("cat");
    s.ts_us = e["ts"].get<double>();
    s.dur_us = e["dur"].get<double>();
    if (e.contains("args") && e["args"].contains("correlation")) s.correlation = e["args"]["correlation"].get<int64_t>();
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
  std::map<int64_t, std::vector<std::pair<double, double>>> capped;  // per pid: (ts, 0 or 1) in time order
  for (const TraceSlice& s : slices) {
    if (s.cat == kPowerCapSample) {
      capped[s.pid].emplace_back(s.ts_us, s.value);
      continue;
    }
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
      if (const auto c = capped.find(pid); c != capped.end()) b.power_capped_frac = held_share(c->second, b);
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
  bool capped = false;  // the GPU monitor's power-cap samples are in the trace
  for (const StepBreakdown& b : a.steps) capped = capped || b.power_capped_frac >= 0;
  std::snprintf(line, sizeof line, fmt, "rank", "step", "step", "compute", "communication", "exposed comm",
                "idle", "hidden");
  out += line;
  if (capped) {
    out.pop_back();
    out += "  power-capped\n";
  }
  std::map<int64_t, StepBreakdown> sums;
  auto row = [&](const std::string& rank, const std::string& step, const StepBreakdown& b) {
    auto cell = [&](double v) { return format_us(v, 1) + " " + percent(v, b.step_us); };
    std::snprintf(line, sizeof line, fmt, rank.c_str(), step.c_str(), format_us(b.step_us, 1).c_str(),
                  cell(b.compute_us).c_str(), cell(b.comm_us).c_str(), cell(b.exposed_comm_us).c_str(),
                  cell(b.idle_us).c_str(),
                  b.comm_us > 0 ? percent(b.comm_us - b.exposed_comm_us, b.comm_us).c_str() : "-");
    out += line;
    if (capped) {
      out.pop_back();
      out += b.power_capped_frac >= 0 ? "  " + percent(b.power_capped_frac, 1) + "\n" : "  -\n";
    }
  };
  std::map<int64_t, std::pair<double, double>> capped_us;  // per pid: capped time, time with samples
  for (const StepBreakdown& b : a.steps) {
    row(std::to_string(b.pid), std::to_string(b.index), b);
    StepBreakdown& s = sums[b.pid];
    s.step_us += b.step_us, s.compute_us += b.compute_us, s.comm_us += b.comm_us;
    s.exposed_comm_us += b.exposed_comm_us, s.idle_us += b.idle_us;
    if (b.power_capped_frac >= 0)
      capped_us[b.pid].first += b.power_capped_frac * b.step_us, capped_us[b.pid].second += b.step_us;
  }
  for (auto& [pid, s] : sums) {
    const auto c = capped_us.find(pid);
    if (c != capped_us.end() && c->second.second > 0) s.power_capped_frac = c->second.first / c->second.second;
    row(std::to_string(pid), "all", s);
  }
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
                     {"hidden_comm_frac", b.comm_us > 0 ? (b.comm_us - b.exposed_comm_us) / b.comm_us : 0.0},
                     {"power_capped_frac", b.power_capped_frac >= 0 ? nlohmann::json(b.power_capped_frac)
                                                                    : nlohmann::json(nullptr)}});
  for (const ClassTotal& c : a.classes)
    classes.push_back({{"class", c.name}, {"count", c.count}, {"total_us", c.total_us}});
  return {{"source", a.device ? "device" : "cpu"}, {"steps", steps}, {"classes", classes}};
}

}  // namespace pylon::profile
