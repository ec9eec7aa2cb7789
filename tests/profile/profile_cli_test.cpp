// pylon train --profile on a tiny model: a valid trace per rank with the op, layer, optimizer and
// data ranges, the ops CSV and the printed table; bad schedules are one error line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "profile/trace_check.h"
#include "support/golden.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon {
namespace {

using testing::kGolden;

std::string profiled_train(const std::string& dir, const std::string& extra) {
  return "train --preset seed --vocab 97 --dim 32 --layers 2 --heads 4 --batch 2 --seq 16 --steps 4 "
         "--lr-schedule constant --init-from " + kGolden + "/init.safetensors --data " + kGolden +
         "/tokens.bin --device cpu --profile " + dir + " " + extra;
}

TEST(ProfileCli, TrainWritesAValidTraceTableAndCsv) {
  testing::TempDir tmp;
  const auto r = testing::run_pylon(profiled_train(tmp.file("prof"), "--profile-wait 1 --profile-warmup 1 --profile-active 2 --save " + tmp.file("ckpt")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(tmp.file("prof/trace.rank0.json"));
  ASSERT_TRUE(in) << r.out;
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(testing::check_chrome_trace(doc), "");
  const auto names = testing::slice_names(doc);
  for (const char* n : {"linear_forward", "linear_backward", "attention_forward", "attention_backward",
                        "block_forward", "block_backward", "adamw", "data_load", "all_gather",
                        "all_reduce", "train_step", "checkpoint_save"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(names.count("reduce_scatter")) << "a world of one has no gradient to reduce";
  int steps = 0;
  std::set<std::string> counters;
  for (const auto& e : doc["traceEvents"]) {
    steps += e["name"] == "train_step";
    if (e["ph"] == "C") counters.insert(e["name"].get<std::string>());
  }
  EXPECT_EQ(steps, 2);  // the active steps only
  EXPECT_TRUE(counters.count("resident_bytes"));
  EXPECT_NE(r.out.find("Self CPU time total"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("linear_forward"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step time breakdown (CPU ranges)"), std::string::npos) << r.out;
  std::ifstream analysis_file(tmp.file("prof/analysis.json"));
  ASSERT_TRUE(analysis_file);
  const auto analysis = nlohmann::json::parse(analysis_file);
  EXPECT_EQ(analysis["steps"].size(), 2u);  // the active steps
  for (const auto& st : analysis["steps"]) {
    EXPECT_GT(st["compute_us"].get<double>(), 0.0);
    EXPECT_LE(st["compute_us"].get<double>() + st["exposed_comm_us"].get<double>() + st["idle_us"].get<double>(),
              st["step_us"].get<double>() * (1 + 1e-9));
  }
  std::ifstream csv(tmp.file("prof/ops.csv"));
  std::string header, row;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("name,input_shapes,calls,self_cpu_us,total_cpu_us", 0), 0u) << header;
  EXPECT_TRUE(std::getline(csv, row));
}

// Hardware counters replay each kernel; NCCL's kernels would wait for peers that do not replay.
TEST(ProfileCli, RooflineOfSeveralRanksIsOneErrorLine) {
  testing::TempDir tmp;
  std::string args = profiled_train(tmp.file("p"), "--nproc-per-node 2 --profile-roofline");
  args.replace(args.find("--device cpu"), 12, "--device cuda");
  const auto r = testing::run_pylon(args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("profile one rank"), std::string::npos) << r.err;
}

TEST(ProfileCli, ScheduleWithoutActiveStepsIsOneErrorLine) {
  testing::TempDir tmp;
  // wait + warmup of 2^63 wrapped to a negative first step (signed overflow), which passed the check.
  for (const char* flags : {"--profile-wait 3 --profile-warmup 1", "--profile-active 0",
                            "--profile-wait 9223372036854775807 --profile-warmup 1",
                            "--profile-wait 1 --profile-warmup 9223372036854775807"}) {
    const auto r = testing::run_pylon(profiled_train(tmp.file("p"), flags));  // 4 steps
    EXPECT_EQ(r.exit_code, 1) << flags << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("--profile"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace pylon
