// trace diff: two synthetic traces whose per-step times are worked out by hand (A: one rank, two
// steps; B: a merged trace of two ranks, one step each), mixed kinds refused, and the command on
// two committed CPU traces (tests/profile/data: a 1-rank run and a merged 2-rank FSDP run).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profile/trace_diff.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon::profile {
namespace {

const std::string kData = std::string(PYLON_GOLDEN_DIR) + "/../profile/data";

nlohmann::json slice(const char* name, const char* cat, int64_t pid, int64_t tid, double ts, double dur,
                     int64_t corr = 0) {
  nlohmann::json e = {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", pid}, {"tid", tid}, {"ts", ts}, {"dur", dur}};
  if (corr) e["args"] = {{"correlation", corr}};
  return e;
}

std::string write(const pylon::testing::TempDir& tmp, const char* name, const nlohmann::json& events) {
  const std::string path = tmp.file(name);
  std::ofstream(path) << nlohmann::json{{"traceEvents", events}}.dump();
  return path;
}

// A step of `pid` at [t, t + 100) launching a GEMM of `gemm` µs and, when `silu` > 0, a SiLU kernel.
void add_step(nlohmann::json& events, int64_t pid, double t, int64_t corr, double gemm, double silu) {
  events.push_back(slice("train_step", "step", pid, 1, t, 100));
  events.push_back(slice("cudaLaunchKernel", "cuda_runtime", pid, 1, t + 1, 1, corr));
  events.push_back(slice("nvjet_gemm", "kernel", pid, 7, t + 10, gemm, corr));
  if (silu > 0) {
    events.push_back(slice("cudaLaunchKernel", "cuda_runtime", pid, 1, t + 2, 1, corr + 1));
    events.push_back(slice("silu_kernel", "kernel", pid, 7, t + 10 + gemm, silu, corr + 1));
  }
}

TraceAnalysis analysis_a(const pylon::testing::TempDir& tmp) {
  nlohmann::json events = nlohmann::json::array();
  add_step(events, 0, 0, 1, 20, 5);    // GEMM 20, SiLU 5: device step 25
  add_step(events, 0, 200, 3, 40, 5);  // GEMM 40, SiLU 5: device step 45
  return analyze_trace(read_trace_slices(write(tmp, "a.json", events)));
}

TraceAnalysis analysis_b(const pylon::testing::TempDir& tmp) {
  nlohmann::json events = nlohmann::json::array();
  add_step(events, 0, 0, 1, 45, 0);  // rank 0: GEMM 45
  add_step(events, 1, 0, 1, 15, 0);  // rank 1: GEMM 15, and a flash kernel new in B
  events.push_back(slice("cudaLaunchKernel", "cuda_runtime", 1, 1, 3, 1, 2));
  events.push_back(slice("flash_fwd_kernel", "kernel", 1, 7, 25, 10, 2));
  return analyze_trace(read_trace_slices(write(tmp, "b.json", events)));
}

const DiffRow& find(const std::vector<DiffRow>& rows, const std::string& name) {
  const auto it = std::find_if(rows.begin(), rows.end(), [&](const DiffRow& r) { return r.name == name; });
  EXPECT_NE(it, rows.end()) << name;
  static const DiffRow none;
  return it == rows.end() ? none : *it;
}

TEST(TraceDiff, TimesArePerStepOfOneRank) {
  pylon::testing::TempDir tmp;
  const TraceDiff d = diff_traces(analysis_a(tmp), analysis_b(tmp));
  EXPECT_TRUE(d.device);
  EXPECT_EQ(d.a_steps, 2);
  EXPECT_EQ(d.b_steps, 2);
  const DiffRow& step = find(d.breakdown, "step");
  EXPECT_DOUBLE_EQ(step.a_us, (25 + 45) / 2.0);
  EXPECT_DOUBLE_EQ(step.b_us, (45 + 25) / 2.0);  // rank 1's records span [10, 35)
  const DiffRow& gemm = find(d.classes, "GEMM");
  EXPECT_DOUBLE_EQ(gemm.a_us, 30);
  EXPECT_DOUBLE_EQ(gemm.b_us, 30);
  EXPECT_EQ(gemm.a_count, 2);
  const DiffRow& attention = find(d.classes, "attention");
  EXPECT_DOUBLE_EQ(attention.a_us, 0);
  EXPECT_DOUBLE_EQ(attention.b_us, 5);
  const DiffRow& silu = find(d.kernels, "silu_kernel");
  EXPECT_DOUBLE_EQ(silu.a_us, 5);
  EXPECT_EQ(silu.b_count, 0);
  EXPECT_EQ(silu.kernel_class, "elementwise");
  EXPECT_EQ(d.kernels.front().name, "nvjet_gemm");  // largest first

  const std::string text = format_diff(d, "a.json", "b.json");
  EXPECT_NE(text.find("A: a.json (2 steps)"), std::string::npos) << text;
  EXPECT_NE(text.find("kernels new in B (1):\n  flash_fwd_kernel"), std::string::npos) << text;
  EXPECT_NE(text.find("kernels vanished from A (1):\n  silu_kernel"), std::string::npos) << text;
  const nlohmann::json j = diff_json(d, "a.json", "b.json");
  EXPECT_EQ(j["new"], nlohmann::json::array({"flash_fwd_kernel"}));
  EXPECT_EQ(j["vanished"], nlohmann::json::array({"silu_kernel"}));
  for (const nlohmann::json& c : j["classes"]) {
    if (c["name"] == "attention") {
      EXPECT_TRUE(c["ratio"].is_null()) << c;
    }
  }
}

TEST(TraceDiff, DeviceAgainstCpuTraceIsRefused) {
  pylon::testing::TempDir tmp;
  nlohmann::json cpu = nlohmann::json::array({slice("train_step", "step", 0, 1, 0, 100),
                                               slice("linear_forward", "op", 0, 1, 10, 50)});
  const TraceAnalysis c = analyze_trace(read_trace_slices(write(tmp, "c.json", cpu)));
  EXPECT_THROW(diff_traces(analysis_a(tmp), c), Error);
}

TEST(TraceDiff, CommandComparesTwoCommittedTraces) {
  const std::string a = kData + "/trace_cpu_1rank.json", b = kData + "/trace_cpu_2ranks_merged.json";
  auto r = pylon::testing::run_pylon("trace diff " + a + " " + b + " --top 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(1 step)\nB: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(2 steps)\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ops that moved most (3 of "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ops new in B"), std::string::npos) << r.out;
  r = pylon::testing::run_pylon("trace diff --json " + a + " " + b);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["source"], "cpu");
  EXPECT_EQ(j["b"]["steps"], 2);
  std::vector<std::string> added = j["new"];
  EXPECT_NE(std::find(added.begin(), added.end(), "all_gather"), added.end()) << j["new"];
  EXPECT_NE(std::find(added.begin(), added.end(), "reduce_scatter"), added.end()) << j["new"];
  for (const nlohmann::json& row : j["breakdown"])
    EXPECT_DOUBLE_EQ(row["diff_us"].get<double>(), row["b_us"].get<double>() - row["a_us"].get<double>());
  // Swapped: what was new is vanished.
  r = pylon::testing::run_pylon("trace diff --json " + b + " " + a);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["vanished"], j["new"]);
}

// Two CUDA traces of one seed model (D 512, 2 layers, seq 256) on the H200, batch 4 against batch 8
// (bench/ncu_exports_device.sh): cuBLASLt picks other GEMM kernels at batch 8.
TEST(TraceDiff, CudaTracesOfTwoBatchSizes) {
  const auto r = pylon::testing::run_pylon("trace diff --json " + kData + "/trace_cuda_b4.json " + kData +
                                           "/trace_cuda_b8.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["source"], "device");
  EXPECT_EQ(j["a"]["steps"], 5);
  EXPECT_FALSE(j["new"].empty());
  EXPECT_FALSE(j["vanished"].empty());
  for (const nlohmann::json& name : j["new"]) EXPECT_EQ(name.get<std::string>().rfind("nvjet", 0), 0u) << name;
  for (const nlohmann::json& c : j["classes"]) {
    if (c["name"] == "GEMM") {
      EXPECT_GT(c["b_us"].get<double>(), c["a_us"].get<double>()) << c;
    }
  }
}

TEST(TraceDiff, BadArgumentsAreOneErrorLine) {
  const std::string a = kData + "/trace_cpu_1rank.json";
  pylon::testing::TempDir tmp;
  for (const std::string& args : std::vector<std::string>{"trace diff " + a, "trace diff " + a + " " + a + " " + a,
                                 "trace diff " + a + " " + a + " --top 0", "trace diff " + a + " " + a + " --top",
                                 "trace diff " + a + " " + a + " --top 3x", "trace diff " + a + " " + a + " --bogus",
                                 "trace diff " + a + " " + tmp.file("missing.json")}) {
    const auto r = pylon::testing::run_pylon(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
  }
}

}  // namespace
}  // namespace pylon::profile
