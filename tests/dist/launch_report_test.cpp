// The launcher's summary of its ranks' errors: one line per distinct error with the ranks that
// reported it, rank lists compressed into ranges. (FsdpCli.ErrorEveryRankHitsIsOneLine runs it.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist/launch_report.h"

namespace pylon {
namespace {

using Lines = std::vector<std::string>;

TEST(LauncherReport, RankListsCompressRunsOfThreeOrMore) {
  EXPECT_EQ(format_rank_list({}), "");
  EXPECT_EQ(format_rank_list({3}), "3");
  EXPECT_EQ(format_rank_list({1, 2}), "1, 2");
  EXPECT_EQ(format_rank_list({3, 1, 2}), "1-3");
  EXPECT_EQ(format_rank_list({0, 2, 3, 4, 5, 7, 9, 10}), "0, 2-5, 7, 9, 10");
}

TEST(LauncherReport, AnErrorEveryRankReportedIsOneLine) {
  const std::string e = "data.bin: token at position 5 has id 40, outside the vocabulary of 40";
  EXPECT_EQ(group_rank_errors({{0, e}, {1, e}}), Lines{"rank 0 (and rank 1, the same error): " + e});
  EXPECT_EQ(group_rank_errors({{3, e}, {1, e}, {0, e}, {2, e}}),
            Lines{"rank 0 (and ranks 1-3, the same error): " + e});
  EXPECT_EQ(group_rank_errors({{5, e}}), Lines{"rank 5: " + e});
  EXPECT_EQ(group_rank_errors({}), Lines{});
}

TEST(LauncherReport, DistinctErrorsKeepALineEachInRankOrder) {
  const std::string a = "data.bin: token at position 5 has id 40, outside the vocabulary of 40";
  const std::string b = "ckpt/step_000002: No space left on device";
  EXPECT_EQ(group_rank_errors({{2, b}, {0, a}, {3, a}, {1, a}}),
            (Lines{"rank 0 (and ranks 1, 3, the same error): " + a, "rank 2: " + b}));
}

// The communicators name their own rank first; the same failure on several ranks is one line.
TEST(LauncherReport, AReportsOwnRankPrefixIsNotPartOfTheError) {
  const std::string t = "collective all_gather timed out after 1 s (rank 2 never reached it: hung or stopped)";
  EXPECT_EQ(group_rank_errors({{0, "rank 0: " + t}, {1, "rank 1: " + t}, {3, "rank 3: " + t}}),
            Lines{"rank 0 (and ranks 1, 3, the same error): " + t});
  // Another rank's number at the start is part of the message.
  EXPECT_EQ(group_rank_errors({{0, "rank 2: x"}, {1, "rank 2: x"}}),
            Lines{"rank 0 (and rank 1, the same error): rank 2: x"});
}

// The launcher appends the ranks it stopped to the line of the rank that failed first.
TEST(LauncherReport, EachRanksLineIsFound) {
  const std::string a = "data.bin: token at position 5 has id 40, outside the vocabulary of 40";
  const std::vector<RankReport> reports{{2, "rank 2: b"}, {0, a}, {3, a}, {1, a}};
  EXPECT_EQ(rank_error_line(reports, 0), 0u);
  EXPECT_EQ(rank_error_line(reports, 3), 0u);
  EXPECT_EQ(rank_error_line(reports, 2), 1u);
  EXPECT_EQ(group_rank_errors(reports)[1], "rank 2: b");
  EXPECT_EQ(rank_error_line(reports, 4), reports.size());  // reported nothing
}

}  // namespace
}  // namespace pylon
