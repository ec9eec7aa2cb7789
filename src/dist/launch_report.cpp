// Grouping the ranks' error reports for the launcher's last words.
#include "dist/launch_report.h"

#include <algorithm>
#include <map>

namespace pylon {

std::string format_rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    const auto item = [&](size_t k) { out += (out.empty() ? "" : ", ") + std::to_string(ranks[k]); };
    if (j - i >= 2) {
      item(i);
      out += "-" + std::to_string(ranks[j]);
    } else {
      for (size_t k = i; k <= j; ++k) item(k);
    }
    i = j + 1;
  }
  return out;
}

namespace {

// The report's error without the reporting rank's own "rank r: " in front.
std::string message_of(const RankReport& r) {
  const std::string own = "rank " + std::to_string(r.rank) + ": ";
  return r.error.rfind(own, 0) == 0 ? r.error.substr(own.size()) : r.error;
}

// The distinct messages ordered by the lowest rank that reported each, and their ranks.
struct Grouped {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> ranks;
};
Grouped group(const std::vector<RankReport>& reports) {
  Grouped g;
  std::vector<RankReport> sorted = reports;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const RankReport& a, const RankReport& b) { return a.rank < b.rank; });
  for (const RankReport& r : sorted) {
    const std::string message = message_of(r);
    auto [it, fresh] = g.ranks.try_emplace(message);
    if (fresh) g.order.push_back(message);
    it->second.push_back(r.rank);
  }
  return g;
}

}  // namespace

size_t rank_error_line(const std::vector<RankReport>& reports, int rank) {
  const auto mine = std::find_if(reports.begin(), reports.end(), [&](const RankReport& r) { return r.rank == rank; });
  if (mine == reports.end()) return reports.size();
  const Grouped g = group(reports);
  return static_cast<size_t>(std::find(g.order.begin(), g.order.end(), message_of(*mine)) - g.order.begin());
}

std::vector<std::string> group_rank_errors(const std::vector<RankReport>& reports) {
  Grouped g = group(reports);
  const std::vector<std::string>& order = g.order;
  std::map<std::string, std::vector<int>>& ranks = g.ranks;
  std::vector<std::string> lines;
  for (const std::string& message : order) {
    const std::vector<int>& who = ranks[message];
    std::string line = "rank " + std::to_string(who.front());
    if (who.size() > 1) {
      const std::vector<int> others(who.begin() + 1, who.end());
      line += std::string(" (and rank") + (others.size() > 1 ? "s " : " ") + format_rank_list(others) +
              ", the same error)";
    }
    lines.push_back(line + ": " + message);
  }
  return lines;
}

}  // namespace pylon
