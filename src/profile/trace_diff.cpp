#include "profile/trace_diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "profile/table.h"

namespace pylon::profile {
namespace {

double larger(const DiffRow& r) { return std::max(r.a_us, r.b_us); }

void sort_by_size(std::vector<DiffRow>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const DiffRow& x, const DiffRow& y) { return larger(x) > larger(y); });
}

// "+1.234ms" / "-12.0us": B - A with its sign.
std::string signed_us(double us) { return (us < 0 ? "-" : "+") + format_us(std::fabs(us), 1); }

std::string ratio(const DiffRow& r) {
  if (r.a_us <= 0) return r.b_us > 0 ? "new" : "-";
  char buf[32];
  const double x = r.b_us / r.a_us;
  std::snprintf(buf, sizeof buf, x < 1000 ? "%.3f" : "%.3g", x);
  return buf;
}

std::string cut(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 3) + "..."; }

}  // namespace

TraceDiff diff_traces(const TraceAnalysis& a, const TraceAnalysis& b) {
  PYLON_CHECK(a.device == b.device, "trace diff: A has ", a.device ? "device records" : "only CPU ranges",
              " and B ", b.device ? "device records" : "only CPU ranges",
              "; compare two traces of the same kind (both CUDA or both CPU runs)");
  PYLON_CHECK(!a.steps.empty() && !b.steps.empty(), "trace diff: a trace without steps");
  TraceDiff d;
  d.device = a.device;
  d.a_steps = static_cast<int64_t>(a.steps.size());
  d.b_steps = static_cast<int64_t>(b.steps.size());
  const double na = static_cast<double>(d.a_steps), nb = static_cast<double>(d.b_steps);

  auto mean = [](const TraceAnalysis& t, double StepBreakdown::*field) {
    double s = 0;
    for (const StepBreakdown& st : t.steps) s += st.*field;
    return s / static_cast<double>(t.steps.size());
  };
  const std::pair<const char*, double StepBreakdown::*> fields[] = {
      {"step", &StepBreakdown::step_us},
      {"compute", &StepBreakdown::compute_us},
      {"communication", &StepBreakdown::comm_us},
      {"exposed comm", &StepBreakdown::exposed_comm_us},
      {"idle", &StepBreakdown::idle_us}};
  for (const auto& [name, field] : fields) d.breakdown.push_back({name, "", mean(a, field), mean(b, field), 0, 0});

  std::map<std::string, DiffRow> classes, kernels;
  for (const ClassTotal& c : a.classes) {
    DiffRow& r = classes[c.name];
    r.name = c.name, r.a_us = c.total_us / na, r.a_count = c.count;
  }
  for (const ClassTotal& c : b.classes) {
    DiffRow& r = classes[c.name];
    r.name = c.name, r.b_us = c.total_us / nb, r.b_count = c.count;
  }
  for (const NameTotal& n : a.names) {
    DiffRow& r = kernels[n.name];
    r.name = n.name, r.kernel_class = n.kernel_class, r.a_us = n.total_us / na, r.a_count = n.count;
  }
  for (const NameTotal& n : b.names) {
    DiffRow& r = kernels[n.name];
    r.name = n.name, r.kernel_class = n.kernel_class, r.b_us = n.total_us / nb, r.b_count = n.count;
  }
  for (auto& [name, r] : classes) d.classes.push_back(r);
  for (auto& [name, r] : kernels) d.kernels.push_back(r);
  sort_by_size(d.classes);
  sort_by_size(d.kernels);
  return d;
}

std::string format_diff(const TraceDiff& d, const std::string& a_label, const std::string& b_label, size_t top) {
  std::string out;
  char line[512];
  auto steps = [](int64_t n) { return std::to_string(n) + (n == 1 ? " step" : " steps"); };
  out += "A: " + a_label + " (" + steps(d.a_steps) + ")\nB: " + b_label + " (" + steps(d.b_steps) + ")\n";
  out += std::string("times per step of one rank, from the ") + (d.device ? "device records" : "CPU ranges") + "\n";
  const char* fmt = "  %-66s %12s %12s %12s %7s\n";
  auto header = [&](const char* title) {
    out += title;
    std::snprintf(line, sizeof line, fmt, "", "A", "B", "B - A", "B / A");
    out += line;
  };
  auto row = [&](const DiffRow& r, const std::string& name) {
    std::snprintf(line, sizeof line, fmt, cut(name, 66).c_str(), format_us(r.a_us, 1).c_str(),
                  format_us(r.b_us, 1).c_str(), signed_us(r.b_us - r.a_us).c_str(), ratio(r).c_str());
    out += line;
  };
  header("step breakdown (mean per step):\n");
  for (const DiffRow& r : d.breakdown) row(r, r.name);
  header(d.device ? "time per step by kernel class:\n" : "time per step by op class:\n");
  for (const DiffRow& r : d.classes) row(r, r.name);

  std::vector<const DiffRow*> both, added, vanished;
  for (const DiffRow& r : d.kernels) (r.a_count == 0 ? added : r.b_count == 0 ? vanished : both).push_back(&r);
  std::stable_sort(both.begin(), both.end(), [](const DiffRow* x, const DiffRow* y) {
    return std::fabs(x->b_us - x->a_us) > std::fabs(y->b_us - y->a_us);
  });
  std::snprintf(line, sizeof line, "%s that moved most (%zu of %zu in both):\n", d.device ? "kernels" : "ops",
                std::min(top, both.size()), both.size());
  header(line);
  for (size_t i = 0; i < both.size() && i < top; ++i) row(*both[i], both[i]->name);
  auto list = [&](const char* title, const std::vector<const DiffRow*>& rows) {
    if (rows.empty()) return;
    std::snprintf(line, sizeof line, "%s (%zu", title, rows.size());
    out += line;
    out += rows.size() > top ? ", the largest " + std::to_string(top) + "):\n" : "):\n";
    for (size_t i = 0; i < rows.size() && i < top; ++i) {
      const DiffRow& r = *rows[i];
      std::snprintf(line, sizeof line, "  %-66s %12s %9lld calls\n", cut(r.name, 66).c_str(),
                    format_us(std::max(r.a_us, r.b_us), 1).c_str(),
                    static_cast<long long>(std::max(r.a_count, r.b_count)));
      out += line;
    }
  };
  list(d.device ? "kernels new in B" : "ops new in B", added);
  list(d.device ? "kernels vanished from A" : "ops vanished from A", vanished);
  return out;
}

nlohmann::json diff_json(const TraceDiff& d, const std::string& a_label, const std::string& b_label) {
  auto rows = [](const std::vector<DiffRow>& v, bool counts) {
    nlohmann::json out = nlohmann::json::array();
    for (const DiffRow& r : v) {
      nlohmann::json j = {{"name", r.name}, {"a_us", r.a_us}, {"b_us", r.b_us}, {"diff_us", r.b_us - r.a_us}};
      j["ratio"] = r.a_us > 0 ? nlohmann::json(r.b_us / r.a_us) : nlohmann::json(nullptr);
      if (!r.kernel_class.empty()) j["class"] = r.kernel_class;
      if (counts) j["a_count"] = r.a_count, j["b_count"] = r.b_count;
      out.push_back(std::move(j));
    }
    return out;
  };
  nlohmann::json added = nlohmann::json::array(), vanished = nlohmann::json::array();
  for (const DiffRow& r : d.kernels) {
    if (r.a_count == 0) added.push_back(r.name);
    if (r.b_count == 0) vanished.push_back(r.name);
  }
  return {{"a", {{"file", a_label}, {"steps", d.a_steps}}},
          {"b", {{"file", b_label}, {"steps", d.b_steps}}},
          {"source", d.device ? "device" : "cpu"},
          {"breakdown", rows(d.breakdown, false)},
          {"classes", rows(d.classes, true)},
          {"kernels", rows(d.kernels, true)},
          {"new", added},
          {"vanished", vanished}};
}

}  // namespace pylon::profile
