// Checks a Chrome trace document against the Trace Event Format's rules that Perfetto and
// chrome://tracing rely on (metadata, nesting per thread, monotone counters, paired flows bound to
// slices); returns the first broken rule, or "" when it holds.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace pylon::testing {

inline std::string check_chrome_trace(const nlohmann::json& doc) {
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    return "no traceEvents array";
  std::set<int64_t> pids, named_pids;
  std::set<std::pair<int64_t, int64_t>> tids, named_tids;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>> slices;  // (ts, end)
  std::map<std::pair<int64_t, std::string>, double> last_counter_ts;
  struct FlowEnd { int64_t pid, tid; double ts; };
  std::map<std::string, std::pair<std::pair<bool, FlowEnd>, std::pair<bool, FlowEnd>>> flows;  // start, end
  for (const auto& e : doc["traceEvents"]) {
    if (!e.contains("ph") || !e["ph"].is_string()) return "an event without ph: " + e.dump();
    const std::string ph = e["ph"];
    if (!e.contains("pid") || !e["pid"].is_number_integer() || !e.contains("tid") || !e["tid"].is_number_integer())
      return "an event without integer pid/tid: " + e.dump();
    const int64_t pid = e["pid"], tid = e["tid"];
    if (!e.contains("name") || !e["name"].is_string()) return "an event without a name: " + e.dump();
    if (ph == "M") {
      if (e["name"] == "process_name") named_pids.insert(pid);
      if (e["name"] == "thread_name") named_tids.insert({pid, tid});
      continue;
    }
    if (!e.contains("ts") || !e["ts"].is_number() || e["ts"].get<double>() < 0) return "bad ts: " + e.dump();
    const double ts = e["ts"];
    pids.insert(pid);
    if (ph == "X") {
      if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0) return "bad dur: " + e.dump();
      tids.insert({pid, tid});
      slices[{pid, tid}].emplace_back(ts, ts + e["dur"].get<double>());
    } else if (ph == "C") {
      if (!e.contains("args") || !e["args"].is_object()) return "a counter without args: " + e.dump();
      double& last = last_counter_ts.try_emplace({pid, e["name"]}, -1.0).first->second;
      if (ts < last) return "counter " + e["name"].get<std::string>() + " goes back in time";
      last = ts;
    } else if (ph == "i") {  // an instant on its thread's track
      if (!e.contains("s") || e["s"] != "t") return "an instant event not scoped to its thread: " + e.dump();
      tids.insert({pid, tid});
    } else if (ph == "s" || ph == "f") {
      if (!e.contains("id") || !(e["id"].is_number_integer() || e["id"].is_string()) || !e.contains("cat"))
        return "a flow event without id or cat: " + e.dump();
      const std::string key = e["cat"].dump() + "/" + e["id"].dump();
      auto& [start, end] = flows[key];
      if ((ph == "s" ? start : end).first) return "flow " + key + " has two " + ph + " events";
      (ph == "s" ? start : end) = {true, {pid, tid, ts}};
    } else {
      return "unexpected phase " + ph;
    }
  }
  for (int64_t p : pids)
    if (!named_pids.count(p)) return "no process_name for pid " + std::to_string(p);
  for (const auto& t : tids)
    if (!named_tids.count(t)) return "no thread_name for tid " + std::to_string(t.second);
  const double eps = 1e-3;  // µs: the files carry ns
  for (auto& [thread, list] : slices) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<double> open_ends;
    for (const auto& [b, e] : list) {
      while (!open_ends.empty() && open_ends.back() <= b + eps) open_ends.pop_back();
      if (!open_ends.empty() && e > open_ends.back() + eps)
        return "slices overlap partially on tid " + std::to_string(thread.second) + " at ts " + std::to_string(b);
      open_ends.push_back(e);
    }
  }
  // Flows: start and end pair up, the start is not later than the end, and each end binds to a
  // slice of its thread that encloses it.
  auto enclosed = [&](const FlowEnd& f) {
    const auto it = slices.find({f.pid, f.tid});
    if (it == slices.end()) return false;
    for (const auto& [b, e] : it->second)
      if (b <= f.ts + eps && f.ts <= e + eps) return true;
    return false;
  };
  for (const auto& [key, ends] : flows) {
    const auto& [start, end] = ends;
    if (!start.first || !end.first) return "flow " + key + " has no " + (start.first ? "end" : "start");
    if (start.second.ts > end.second.ts + eps) return "flow " + key + " ends before it starts";
    if (!enclosed(start.second) || !enclosed(end.second)) return "flow " + key + " is not bound to a slice";
  }
  return "";
}

// The names of the X events.
inline std::set<std::string> slice_names(const nlohmann::json& doc) {
  std::set<std::string> names;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X") names.insert(e["name"].get<std::string>());
  return names;
}

}  // namespace pylon::testing
