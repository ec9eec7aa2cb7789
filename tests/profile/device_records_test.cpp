// Device records (as CUPTI delivers them) in the trace, the table and the analysis, without a GPU:
// a track per stream, a flow from each launch to its record, device time attributed to the ranges
// around the launch, and flows kept apart when ranks merge.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "profile/analysis.h"
#include "profile/chrome_trace.h"
#include "profile/table.h"
#include "profile/trace_check.h"
#include "support/temp_dir.h"

namespace pylon::profile {
namespace {

RangeEvent range(const char* cat, const char* name, int64_t b, int64_t e, int64_t correlation = 0) {
  RangeEvent r{cat, name, b, e, {}};
  if (correlation) r.args.key = kCorrelationArg, r.args.values[0] = correlation;
  return r;
}

// A step that launches a GEMM (inside linear_forward inside block_forward), a copy, and a kernel
// whose launch was not recorded; times in ns.
Trace device_trace(int rank) {
  Trace t;
  t.pid = rank;
  t.process_name = "rank " + std::to_string(rank);
  ThreadTrace main{100 + rank, "main", {}, {}};
  main.ranges = {range("step", "train_step", 1000, 90000),
                 range("layer", "block_forward", 2000, 30000),
                 range("op", "linear_forward", 3000, 10000),
                 range("cuda_runtime", "cudaLaunchKernel", 4000, 6000, 11),
                 range("cuda_runtime", "cudaMemcpyAsync", 20000, 21000, 12)};
  t.threads.push_back(main);
  t.device = {{"nvjet_gemm", "kernel", 7000, 47000, 11, 0, 7, 0},
              {"Memcpy DtoH", "gpu_memcpy", 50000, 52000, 12, 0, 7, 4096},
              {"ncclDevKernel_AllGather", "kernel", 30000, 60000, 99, 0, 13, 0}};
  return t;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(DeviceRecords, TraceHasStreamTracksAndFlowsThatPassTheFormatCheck) {
  pylon::testing::TempDir tmp;
  write_chrome_trace(device_trace(0), tmp.file("t.json"));
  const auto doc = read_json(tmp.file("t.json"));
  EXPECT_EQ(pylon::testing::check_chrome_trace(doc), "");
  int starts = 0, ends = 0, kernels = 0;
  std::set<std::string> threads;
  for (const auto& e : doc["traceEvents"]) {
    starts += e["ph"] == "s", ends += e["ph"] == "f";
    if (e["ph"] == "X" && e["cat"] == "kernel") {
      ++kernels;
      EXPECT_GE(e["tid"].get<int64_t>(), kStreamTidBase);
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") threads.insert(e["args"]["name"].get<std::string>());
    if (e["name"] == "Memcpy DtoH") {
      EXPECT_EQ(e["args"]["bytes"], 4096);
    }
  }
  EXPECT_EQ(kernels, 2);
  EXPECT_EQ(starts, 2);  // the NCCL kernel's launch was not recorded: no flow
  EXPECT_EQ(ends, 2);
  EXPECT_TRUE(threads.count("cuda:0 stream 7") && threads.count("cuda:0 stream 13"));
}

TEST(DeviceRecords, FormatCheckCatchesBrokenFlows) {
  pylon::testing::TempDir tmp;
  write_chrome_trace(device_trace(0), tmp.file("t.json"));
  auto doc = read_json(tmp.file("t.json"));
  auto broken = doc;
  auto& events = broken["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i)
    if (events[i]["ph"] == "f") {
      events.erase(i);
      break;
    }
  EXPECT_NE(pylon::testing::check_chrome_trace(broken).find("has no end"), std::string::npos);
  broken = doc;
  for (auto& e : broken["traceEvents"])
    if (e["ph"] == "s") e["ts"] = 1e6;  // after its end, outside any slice
  EXPECT_NE(pylon::testing::check_chrome_trace(broken), "");
}

TEST(DeviceRecords, TableAttributesDeviceTimeToTheLaunchingRanges) {
  const auto stats = op_stats(device_trace(0));
  std::map<std::string, OpStats> by_name;
  for (const OpStats& s : stats) by_name[s.name] = s;
  EXPECT_DOUBLE_EQ(stats[0].total_device_us, 42);  // sorted by total device time
  EXPECT_DOUBLE_EQ(by_name["nvjet_gemm"].self_device_us, 40);
  EXPECT_TRUE(by_name["nvjet_gemm"].device_record);
  EXPECT_DOUBLE_EQ(by_name["linear_forward"].self_device_us, 40);
  EXPECT_DOUBLE_EQ(by_name["linear_forward"].total_device_us, 40);
  EXPECT_DOUBLE_EQ(by_name["block_forward"].self_device_us, 2);     // the copy launched directly in it
  EXPECT_DOUBLE_EQ(by_name["block_forward"].total_device_us, 42);
  EXPECT_DOUBLE_EQ(by_name["train_step"].total_device_us, 42);      // NCCL kernel: no known launch
  EXPECT_DOUBLE_EQ(by_name["cudaLaunchKernel"].total_device_us, 0);
  const std::string table = format_table(stats);
  EXPECT_NE(table.find("Self device time total: 72.000us"), std::string::npos) << table;
}

TEST(DeviceRecords, AnalysisOfTheWrittenTraceUsesTheDeviceRecords) {
  pylon::testing::TempDir tmp;
  write_chrome_trace(device_trace(0), tmp.file("t.json"));
  const TraceAnalysis a = analyze_trace(read_trace_slices(tmp.file("t.json")));
  ASSERT_TRUE(a.device);
  ASSERT_EQ(a.steps.size(), 1u);
  // Records in [7, 60) µs: compute [7,47) ∪ [50,52) = 42, NCCL [30,60) = 30 of which 17 + 2 under
  // compute; together they cover the whole span.
  EXPECT_DOUBLE_EQ(a.steps[0].step_us, 53);
  EXPECT_DOUBLE_EQ(a.steps[0].compute_us, 42);
  EXPECT_DOUBLE_EQ(a.steps[0].comm_us, 30);
  EXPECT_DOUBLE_EQ(a.steps[0].exposed_comm_us, 11);
  EXPECT_DOUBLE_EQ(a.steps[0].idle_us, 0);
}

TEST(DeviceRecords, MergedRanksKeepTheirFlowsApart) {
  pylon::testing::TempDir tmp;
  write_chrome_trace(device_trace(0), tmp.file("r0.json"));
  write_chrome_trace(device_trace(1), tmp.file("r1.json"));
  merge_chrome_traces(tmp.file("m.json"), {tmp.file("r0.json"), tmp.file("r1.json")});
  const auto doc = read_json(tmp.file("m.json"));
  EXPECT_EQ(pylon::testing::check_chrome_trace(doc), "");
  std::set<int64_t> ids;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "s") ids.insert(e["id"].get<int64_t>());
  EXPECT_EQ(ids.size(), 4u);  // same correlations in both ranks, distinct flows
}

}  // namespace
}  // namespace pylon::profile
