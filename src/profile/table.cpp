// Self and total times from properly nested ranges: a stack per thread gives each range its
// direct parent, whose self time loses the child's duration.
#include "profile/table.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>
#include <utility>

#include "core/error.h"

namespace pylon::profile {
namespace {

std::string csv_field(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

std::string format_us(double us, int us_decimals) {
  char buf[32];
  if (us >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3fs", us / 1e6);
  else if (us >= 1e3)
    std::snprintf(buf, sizeof buf, "%.3fms", us / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.*fus", us_decimals, us);
  return buf;
}

std::vector<OpStats> op_stats(const Trace& trace, bool group_by_shapes) {
  std::map<std::pair<std::string, std::string>, OpStats> by_key;
  // The ranges open around each launching API call, outermost first (the call itself excluded).
  std::unordered_map<int64_t, std::vector<OpStats*>> launched_in;
  for (const ThreadTrace& t : trace.threads) {
    // ranges are sorted by begin, enclosing first; the stack holds the open ancestors.
    std::vector<std::pair<const RangeEvent*, OpStats*>> stack;
    for (const RangeEvent& e : t.ranges) {
      if (!std::strcmp(e.category, kInstantCategory)) continue;  // a moment, not an op
      while (!stack.empty() && stack.back().first->end_ns <= e.begin_ns) stack.pop_back();
      const std::string shapes = group_by_shapes ? shapes_text(e.args) : "";
      OpStats& s = by_key[{e.name, shapes}];
      s.name = e.name, s.shapes = shapes;
      const double dur = static_cast<double>(e.end_ns - e.begin_ns) / 1e3;
      s.calls += 1;
      s.total_cpu_us += dur;
      s.self_cpu_us += dur;
      if (!stack.empty()) stack.back().second->self_cpu_us -= dur;
      if (e.args.key && !std::strcmp(e.args.key, kCorrelationArg)) {
        std::vector<OpStats*>& chain = launched_in[e.args.values[0]];
        for (const auto& open : stack) chain.push_back(open.second);
      }
      stack.emplace_back(&e, &s);
    }
  }
  // Device time: a record's own row (self = total), self time of the innermost range that
  // launched it, total time of every range around that launch (counted once per range name).
  bool device = false;
  for (const DeviceRecord& r : trace.device) {
    device = true;
    const double dur = static_cast<double>(r.end_ns - r.begin_ns) / 1e3;
    OpStats& k = by_key[{r.name, ""}];
    k.name = r.name;
    k.device_record = true;
    k.calls += 1;
    k.self_device_us += dur, k.total_device_us += dur;
    const auto chain = launched_in.find(r.correlation);
    if (chain == launched_in.end() || chain->second.empty()) continue;
    chain->second.back()->self_device_us += dur;
    std::vector<OpStats*> seen;
    for (OpStats* s : chain->second)
      if (std::find(seen.begin(), seen.end(), s) == seen.end()) s->total_device_us += dur, seen.push_back(s);
  }
  std::vector<OpStats> out;
  for (auto& [key, s] : by_key) out.push_back(std::move(s));
  std::stable_sort(out.begin(), out.end(), [device](const OpStats& a, const OpStats& b) {
    return device ? a.total_device_us > b.total_device_us : a.total_cpu_us > b.total_cpu_us;
  });
  return out;
}

std::string format_table(const std::vector<OpStats>& stats, size_t rows) {
  double self_sum = 0;
  bool shapes = false;
  for (const OpStats& s : stats) self_sum += s.self_cpu_us, shapes = shapes || !s.shapes.empty();
  auto pct = [&](double v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.2f%%", self_sum > 0 ? 100.0 * v / self_sum : 0.0);
    return std::string(buf);
  };
  auto device = [](double v) { return v > 0 ? format_us(v) : std::string("-"); };
  std::string out;
  char line[512];
  const char* fmt = "%-40s %11s %11s %11s %11s %11s %11s %11s %8s  %s\n";
  std::snprintf(line, sizeof line, fmt, "Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total",
                "CPU avg", "Self dev", "Dev total", "Calls", shapes ? "Input shapes" : "");
  const std::string header = line;
  const std::string rule(header.size() - 1, '-');
  out += rule + "\n" + header + rule + "\n";
  for (size_t i = 0; i < stats.size() && i < rows; ++i) {
    const OpStats& s = stats[i];
    std::snprintf(line, sizeof line, fmt, s.name.substr(0, 40).c_str(), pct(s.self_cpu_us).c_str(),
                  format_us(s.self_cpu_us).c_str(), pct(s.total_cpu_us).c_str(),
                  format_us(s.total_cpu_us).c_str(), format_us(s.total_cpu_us / static_cast<double>(s.calls)).c_str(),
                  device(s.self_device_us).c_str(), device(s.total_device_us).c_str(),
                  std::to_string(s.calls).c_str(), s.shapes.c_str());
    out += line;
  }
  double device_sum = 0;  // every record once: the device rows
  for (const OpStats& s : stats) device_sum += s.device_record ? s.self_device_us : 0;
  out += rule + "\nSelf CPU time total: " + format_us(self_sum) + "\n";
  if (device_sum > 0) out += "Self device time total: " + format_us(device_sum) + "\n";
  return out;
}

void write_csv(const std::vector<OpStats>& stats, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  PYLON_CHECK(f, path, ": cannot open for writing");
  std::fputs("name,input_shapes,calls,self_cpu_us,total_cpu_us,avg_cpu_us,self_device_us,total_device_us\n", f);
  for (const OpStats& s : stats)
    std::fprintf(f, "%s,%s,%lld,%.3f,%.3f,%.3f,%s,%s\n", csv_field(s.name).c_str(), csv_field(s.shapes).c_str(),
                 static_cast<long long>(s.calls), s.self_cpu_us, s.total_cpu_us,
                 s.total_cpu_us / static_cast<double>(s.calls), s.self_device_us > 0 ? std::to_string(s.self_device_us).c_str() : "",
                 s.total_device_us > 0 ? std::to_string(s.total_device_us).c_str() : "");
  const bool ok = !std::ferror(f);
  PYLON_CHECK(std::fclose(f) == 0 && ok, path, ": cannot write (disk full?)");
}

}  // namespace pylon::profile
