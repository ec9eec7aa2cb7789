// pylon train --profile over 2 CPU ranks: a valid trace per rank with its collectives, rank 0's
// table, and `pylon trace merge` of the two files giving one process per rank.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "profile/trace_check.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon {
namespace {

TEST(ProfileFsdpCli, EachRankWritesItsTraceAndTheyMerge) {
  testing::TempDir tmp;
  const std::string golden = std::string(PYLON_GOLDEN_DIR) + "/seed_small";
  const auto r = testing::run_pylon(
      "train --preset seed --vocab 97 --dim 32 --layers 2 --heads 4 --batch 2 --seq 16 --steps 3 "
      "--init-from " + golden + "/init.safetensors --data " + golden + "/tokens.bin --device cpu "
      "--nproc-per-node 2 --profile " + tmp.file("prof") + " --profile-wait 0 --profile-warmup 1 --profile-active 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Self CPU time total"), std::string::npos) << r.out;
  std::string inputs;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = tmp.file("prof/trace.rank" + std::to_string(rank) + ".json");
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    const auto doc = nlohmann::json::parse(in);
    EXPECT_EQ(testing::check_chrome_trace(doc), "") << path;
    const auto names = testing::slice_names(doc);
    for (const char* n : {"all_gather", "reduce_scatter", "all_reduce", "linear_forward", "adamw"})
      EXPECT_TRUE(names.count(n)) << path << ": " << n;
    // The collectives run on the FSDP worker thread, beside the compute thread's ranges.
    std::set<int64_t> compute_tids, collective_tids;
    bool gathered_counter = false;
    for (const auto& e : doc["traceEvents"]) {
      EXPECT_EQ(e["pid"], rank);
      if (e["ph"] == "C" && e["name"] == "fsdp_gathered_param_bytes") gathered_counter = true;
      if (e["ph"] != "X") continue;
      if (e["name"] == "linear_forward") compute_tids.insert(e["tid"].get<int64_t>());
      if (e["name"] == "reduce_scatter") collective_tids.insert(e["tid"].get<int64_t>());
    }
    EXPECT_TRUE(gathered_counter) << path;
    EXPECT_EQ(compute_tids.size(), 1u) << path;
    EXPECT_EQ(collective_tids.size(), 1u) << path;
    EXPECT_NE(compute_tids, collective_tids) << path << ": reduce-scatter ran on the compute thread";
    inputs += " " + path;
  }
  const auto m = testing::run_pylon("trace merge " + tmp.file("all.json") + inputs);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  std::ifstream in(tmp.file("all.json"));
  const auto merged = nlohmann::json::parse(in);
  EXPECT_EQ(testing::check_chrome_trace(merged), "");
  std::set<int64_t> pids;
  for (const auto& e : merged["traceEvents"]) pids.insert(e["pid"].get<int64_t>());
  EXPECT_EQ(pids, (std::set<int64_t>{0, 1}));
}

}  // namespace
}  // namespace pylon
