// Checks a Chrome trace document against the Trace Event Format's rules that Perfetto and
// chrome://tracing rely on; returns the first broken rule, or "" when it holds.
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
