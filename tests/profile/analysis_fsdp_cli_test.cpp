// A profiled two-rank FSDP run on CPU ranks end to end: a trace per rank, their merge passes the
// format check with a process per rank, and the analysis of the merged file finds each rank's
// steps with their collectives: with the FSDP worker thread part of them overlaps compute; with
// --no-prefetch every collective blocks the compute thread, so all of it is exposed. Needs Gloo.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "profile/trace_check.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon {
namespace {

// The analysis (--json) of a profiled, merged two-rank run.
nlohmann::json analyze_two_ranks(const testing::TempDir& tmp, const std::string& extra) {
  const std::string golden = std::string(PYLON_GOLDEN_DIR) + "/seed_small";
  auto r = testing::run_pylon(
      "train --preset seed --vocab 97 --dim 32 --layers 2 --heads 4 --batch 2 --seq 16 --steps 4 "
      "--lr-schedule constant --init-from " + golden + "/init.safetensors --data " + golden +
      "/tokens.bin --device cpu --nproc-per-node 2 --profile " + tmp.file("prof") +
      " --profile-wait 1 --profile-warmup 1 --profile-active 2 " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = testing::run_pylon("trace merge " + tmp.file("all.json") + " " + tmp.file("prof/trace.rank0.json") + " " +
                         tmp.file("prof/trace.rank1.json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(tmp.file("all.json"));
  EXPECT_EQ(testing::check_chrome_trace(nlohmann::json::parse(in)), "");
  r = testing::run_pylon("trace analyze --json " + tmp.file("all.json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(ProfileAnalysisCli, TwoFsdpRanksMergeAndAnalyze) {
  for (const bool prefetch : {true, false}) {
    testing::TempDir tmp;
    const auto a = analyze_two_ranks(tmp, prefetch ? "" : "--no-prefetch");
    EXPECT_EQ(a["source"], "cpu");
    ASSERT_EQ(a["steps"].size(), 4u);  // 2 active steps x 2 ranks
    std::set<int64_t> ranks;
    for (const auto& s : a["steps"]) {
      ranks.insert(s["rank"].get<int64_t>());
      const double comm = s["comm_us"], exposed = s["exposed_comm_us"];
      EXPECT_GT(comm, 0.0);  // all_gather / reduce_scatter / all_reduce
      EXPECT_GT(exposed, 0.0);  // at least the step's closing all-reduce
      if (prefetch)
        EXPECT_LE(exposed, comm);
      else
        EXPECT_DOUBLE_EQ(exposed, comm);
      EXPECT_GT(s["compute_us"].get<double>(), 0.0);
    }
    EXPECT_EQ(ranks, (std::set<int64_t>{0, 1}));
    bool communication = false;
    for (const auto& c : a["classes"]) communication = communication || c["class"] == "communication";
    EXPECT_TRUE(communication);
  }
}

}  // namespace
}  // namespace pylon
