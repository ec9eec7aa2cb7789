// Trace analyses on synthetic traces whose breakdown is worked out by hand (device records with
// correlations, and CPU ranges), kernel classes, and malformed trace files as one error line.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "profile/analysis.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon::profile {
namespace {

nlohmann::json slice(const char* name, const char* cat, int64_t tid, double ts, double dur, int64_t corr = 0) {
  nlohmann::json e = {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", 0}, {"tid", tid}, {"ts", ts}, {"dur", dur}};
  if (corr) e["args"] = {{"correlation", corr}};
  return e;
}

std::string write(const pylon::testing::TempDir& tmp, const nlohmann::json& events) {
  const std::string path = tmp.file("t.json");
  std::ofstream(path) << nlohmann::json{{"traceEvents", events}}.dump();
  return path;
}

// A CPU step [0, 100) launching five device records; the GEMM and the NCCL kernel overlap by 10.
nlohmann::json device_trace() {
  return {slice("train_step", "step", 1, 0, 100),
          slice("cudaLaunchKernel", "cuda_runtime", 1, 10, 2, 1),
          slice("cudaLaunchKernel", "cuda_runtime", 1, 20, 2, 2),
          slice("cudaMemcpyAsync", "cuda_runtime", 1, 30, 2, 3),
          slice("cudaLaunchKernel", "cuda_runtime", 1, 40, 2, 4),
          slice("cudaLaunchKernel", "cuda_runtime", 1, 150, 2, 5),  // after the step
          slice("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "kernel", 7, 50, 20, 1),
          slice("ncclDevKernel_AllGather_RING_LL", "kernel", 8, 60, 30, 2),
          slice("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 7, 95, 5, 3),
          slice("pylon::cuda::adamw_kernel", "kernel", 7, 110, 10, 4),
          slice("pylon::cuda::silu_forward_kernel", "kernel", 7, 160, 10, 5)};
}

TEST(TraceAnalysis, DeviceStepSplitsIntoComputeExposedCommunicationAndIdle) {
  pylon::testing::TempDir tmp;
  const TraceAnalysis a = analyze_trace(read_trace_slices(write(tmp, device_trace())));
  EXPECT_TRUE(a.device);
  ASSERT_EQ(a.steps.size(), 1u);
  const StepBreakdown& b = a.steps[0];
  EXPECT_DOUBLE_EQ(b.begin_us, 50);
  EXPECT_DOUBLE_EQ(b.step_us, 70);           // the records span [50, 120)
  EXPECT_DOUBLE_EQ(b.compute_us, 35);        // 20 + 5 + 10
  EXPECT_DOUBLE_EQ(b.comm_us, 30);
  EXPECT_DOUBLE_EQ(b.exposed_comm_us, 20);   // 10 of 30 under the GEMM
  EXPECT_DOUBLE_EQ(b.idle_us, 15);           // 70 - (35 + 30 - 10)
  std::map<std::string, double> classes;
  for (const ClassTotal& c : a.classes) classes[c.name] = c.total_us;
  EXPECT_EQ(classes, (std::map<std::string, double>{{"GEMM", 20}, {"NCCL", 30}, {"memcpy", 5}, {"optimizer", 10}}));
  EXPECT_EQ(a.classes[0].name, "NCCL");  // largest first
  const nlohmann::json j = analysis_json(a);
  EXPECT_EQ(j["source"], "device");
  EXPECT_NEAR(j["steps"][0]["hidden_comm_frac"].get<double>(), 1.0 / 3.0, 1e-12);
}

TEST(TraceAnalysis, CpuStepUsesInnermostRangesAndCollectives) {
  pylon::testing::TempDir tmp;
  const nlohmann::json events = {slice("train_step", "step", 1, 0, 100),
                                 slice("block_forward", "layer", 1, 0, 60),
                                 slice("linear_forward", "op", 1, 5, 20),
                                 slice("all_gather", "collective", 1, 30, 20),
                                 slice("adamw", "optimizer", 1, 70, 20),
                                 slice("data_load", "data", 2, 10, 10),
                                 slice("checkpoint_save", "checkpoint", 1, 200, 50)};  // outside
  const TraceAnalysis a = analyze_trace(read_trace_slices(write(tmp, events)));
  EXPECT_FALSE(a.device);
  ASSERT_EQ(a.steps.size(), 1u);
  const StepBreakdown& b = a.steps[0];
  EXPECT_DOUBLE_EQ(b.step_us, 100);
  EXPECT_DOUBLE_EQ(b.compute_us, 40);  // [5,25) ∪ [10,20) ∪ [70,90)
  EXPECT_DOUBLE_EQ(b.comm_us, 20);
  EXPECT_DOUBLE_EQ(b.exposed_comm_us, 20);  // a CPU collective blocks its thread
  EXPECT_DOUBLE_EQ(b.idle_us, 40);
  std::map<std::string, int64_t> counts;
  for (const ClassTotal& c : a.classes) counts[c.name] = c.count;
  EXPECT_EQ(counts, (std::map<std::string, int64_t>{{"GEMM", 1}, {"communication", 1}, {"data", 1}, {"optimizer", 1}}));
}

TEST(TraceAnalysis, StepsArePerProcessAndInTimeOrder) {
  pylon::testing::TempDir tmp;
  nlohmann::json events = nlohmann::json::array();
  for (int pid = 0; pid < 2; ++pid)
    for (int k = 0; k < 3; ++k) {
      auto step = slice("train_step", "step", 1, 100.0 * (2 - k), 100);  // written out of order
      auto op = slice("linear_forward", "op", 1, 100.0 * (2 - k) + 10, 10.0 * (k + 1));
      step["pid"] = op["pid"] = pid;
      events.push_back(step), events.push_back(op);
    }
  const TraceAnalysis a = analyze_trace(read_trace_slices(write(tmp, events)));
  ASSERT_EQ(a.steps.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(a.steps[i].pid, static_cast<int64_t>(i / 3));
    EXPECT_EQ(a.steps[i].index, static_cast<int64_t>(i % 3));
    EXPECT_DOUBLE_EQ(a.steps[i].compute_us, 10.0 * static_cast<double>(3 - i % 3));
  }
}

// A merged trace: both ranks number their API calls from 1, so a kernel belongs to the launch with
// its correlation id in its own process. Rank 1's launch is written first: looked up by correlation
// alone, rank 0's launch (at 10, outside rank 1's step) would claim rank 1's kernel.
TEST(TraceAnalysis, CorrelationIdsArePerProcess) {
  pylon::testing::TempDir tmp;
  nlohmann::json events = nlohmann::json::array();
  for (int pid : {1, 0}) {
    const double t0 = 200.0 * pid;
    for (auto e : {slice("train_step", "step", 1, t0, 100), slice("cudaLaunchKernel", "cuda_runtime", 1, t0 + 10, 2, 1),
                   slice("pylon::cuda::silu_forward_kernel", "kernel", 7, t0 + 20, 10.0 + pid, 1)}) {
      e["pid"] = pid;
      events.push_back(e);
    }
  }
  const TraceAnalysis a = analyze_trace(read_trace_slices(write(tmp, events)));
  ASSERT_EQ(a.steps.size(), 2u);
  for (int64_t pid = 0; pid < 2; ++pid) {
    EXPECT_EQ(a.steps[static_cast<size_t>(pid)].pid, pid);
    EXPECT_DOUBLE_EQ(a.steps[static_cast<size_t>(pid)].compute_us, 10.0 + static_cast<double>(pid));
  }
}

TEST(TraceAnalysis, KernelClassesFromNames) {
  auto cls = [](const char* name, const char* cat = "kernel") { return kernel_class({0, 0, name, cat, 0, 0, 0}); };
  EXPECT_EQ(cls("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"), "GEMM");
  EXPECT_EQ(cls("void pylon::cuda::attention_forward_wgmma<128, true>"), "attention");
  EXPECT_EQ(cls("pylon::cuda::residual_rmsnorm_forward_kernel"), "norm");
  EXPECT_EQ(cls("pylon::cuda::cross_entropy_kernel"), "loss");
  EXPECT_EQ(cls("pylon::cuda::embedding_backward_segments_kernel"), "embedding");
  EXPECT_EQ(cls("pylon::cuda::sum_partials_kernel"), "reduction");
  EXPECT_EQ(cls("pylon::cuda::rope_kernel"), "elementwise");
  EXPECT_EQ(cls("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"), "NCCL");
  EXPECT_EQ(cls("Memset (Device)", "gpu_memset"), "memset");
  EXPECT_EQ(cls("reduce_scatter", "collective"), "communication");
}

// The GPU monitor's gpu_power_capped samples, each held until the next: the device step [50, 120)
// is capped from 80 on (40 of 70 µs); a trace without samples has no figure.
TEST(TraceAnalysis, PowerCappedShareOfTheStepFromTheMonitorsSamples) {
  pylon::testing::TempDir tmp;
  nlohmann::json events = device_trace();
  for (auto [ts, v] : {std::pair{10.0, 0}, {80.0, 1}, {110.0, 1}})
    events.push_back({{"name", "gpu_power_capped"}, {"ph", "C"}, {"pid", 0}, {"tid", 9}, {"ts", ts},
                      {"args", {{"value", v}}}});
  const TraceAnalysis a = analyze_trace(read_trace_slices(write(tmp, events)));
  ASSERT_EQ(a.steps.size(), 1u);
  EXPECT_DOUBLE_EQ(a.steps[0].power_capped_frac, 40.0 / 70.0);
  EXPECT_DOUBLE_EQ(a.steps[0].compute_us, 35);  // the samples are not work
  EXPECT_NE(format_analysis(a).find("power-capped"), std::string::npos) << format_analysis(a);
  EXPECT_NE(format_analysis(a).find("57.1%"), std::string::npos) << format_analysis(a);
  EXPECT_NEAR(analysis_json(a)["steps"][0]["power_capped_frac"].get<double>(), 40.0 / 70.0, 1e-12);
  const TraceAnalysis none = analyze_trace(read_trace_slices(write(tmp, device_trace())));
  EXPECT_TRUE(analysis_json(none)["steps"][0]["power_capped_frac"].is_null());
  EXPECT_EQ(format_analysis(none).find("power-capped"), std::string::npos);
}

TEST(TraceAnalysis, CommandPrintsTheBreakdownAndJson) {
  pylon::testing::TempDir tmp;
  const std::string path = write(tmp, device_trace());
  auto r = pylon::testing::run_pylon("trace analyze " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("exposed comm"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NCCL"), std::string::npos) << r.out;
  r = pylon::testing::run_pylon("trace analyze --json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["steps"][0]["comm_us"], 30.0);
}

TEST(TraceAnalysis, MalformedTracesAreOneErrorLine) {
  pylon::testing::TempDir tmp;
  const std::string path = tmp.file("bad.json");
  for (const char* text : {"{\"traceEvents\": [", "{\"events\": []}", "[{\"name\": \"x\"}]",
                           "[{\"ph\": \"X\", \"name\": \"x\", \"ts\": 1}]", "[{\"ph\": \"M\", \"name\": \"x\"}]"}) {
    std::ofstream(path) << text;
    const auto r = pylon::testing::run_pylon("trace analyze " + path);
    EXPECT_EQ(r.exit_code, 1) << text << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const auto r = pylon::testing::run_pylon("trace analyze " + tmp.file("missing.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pylon::profile
