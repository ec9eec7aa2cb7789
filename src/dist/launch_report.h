// What the launcher says about the errors its ranks reported: each distinct error once, with the
// ranks that reported it ("rank 0 (and ranks 1-3, the same error): ..."). Pure functions over the
// ranks' reports, so that tests check the wording without starting processes.
#pragma once

#include <string>
#include <vector>

namespace pylon {

// Ascending ranks as "3", "1, 2", "1-3", "0, 2-5, 7": runs of three or more as a range.
std::string format_rank_list(std::vector<int> ranks);

struct RankReport {
  int rank = 0;
  std::string error;  // the rank's error line without its "pylon CMD: error: "
};

// One line per distinct error, ordered by the lowest rank that reported it: "rank 2: E", or
// "rank 0 (and ranks 1-3, the same error): E". A message that starts with the reporting rank's own
// "rank r: " (the communicators' errors do) is compared and printed without it: the line names
// the ranks.
std::vector<std::string> group_rank_errors(const std::vector<RankReport>& reports);

// The index of the line of group_rank_errors(reports) that holds `rank`'s report; reports.size()
// when that rank reported nothing.
size_t rank_error_line(const std::vector<RankReport>& reports, int rank);

}  // namespace pylon
