// pylon train --device cuda --profile on one GPU: the trace passes the format check and carries the
// device records, the GPU monitor's counter tracks (power, clocks, temperature, power cap) and the
// memory tracks by use, whose sum is what Pylon allocated and at most what the device has in use.
// Needs a CUDA device; skips otherwise.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/token_file.h"
#include "ops/cuda/runtime.h"
#include "profile/trace_check.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon {
namespace {

TEST(CudaProfileCli, TraceHasPowerClockAndMemoryTracks) {
  if (cuda::device_count() < 1) GTEST_SKIP() << "needs a CUDA device";
  testing::TempDir tmp;
  std::vector<uint32_t> ids(400000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * i + 7 * i) % 251);
  write_token_file(tmp.file("data.bin"), ids, TokenWidth::u16);
  const auto r = testing::run_pylon(
      "train --device cuda --preset seed --vocab 251 --dim 1024 --layers 4 --heads 8 --batch 8 --seq 512 "
      "--steps 40 --log-every 0 --data " + tmp.file("data.bin") + " --profile " + tmp.file("prof") +
      " --profile-wait 5 --profile-warmup 1 --profile-active 30");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(tmp.file("prof/trace.rank0.json"));
  ASSERT_TRUE(in);
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(testing::check_chrome_trace(doc), "");
  std::map<std::string, std::vector<double>> counters;
  int kernels = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "C") counters[e["name"].get<std::string>()].push_back(e["args"]["value"].get<double>());
    kernels += e["ph"] == "X" && e.value("cat", "") == "kernel";
  }
  EXPECT_GT(kernels, 0);
  for (const char* n : {"gpu_power_w", "gpu_sm_clock_mhz", "gpu_mem_clock_mhz", "gpu_temp_c", "gpu_power_capped",
                        "gpu_thermal_slowdown"}) {
    ASSERT_TRUE(counters.count(n)) << n;
    EXPECT_GE(counters[n].size(), 2u) << n << ": samples every 20 ms over 30 steps of several ms";
  }
  for (double w : counters["gpu_power_w"]) EXPECT_GT(w, 0) << "power draw";
  for (double mhz : counters["gpu_sm_clock_mhz"]) EXPECT_GT(mhz, 0) << "SM clock";
  double pylon_bytes = 0;
  for (const char* n : {"mem_weights_bytes", "mem_gradients_bytes", "mem_optimizer_bytes", "mem_activations_bytes",
                        "mem_workspace_bytes", "mem_communication_bytes"}) {
    ASSERT_TRUE(counters.count(n)) << n;
    EXPECT_EQ(counters[n].size(), 30u) << n << ": one sample per active step";
    pylon_bytes += counters[n].back();
  }
  EXPECT_GT(counters["mem_weights_bytes"].back(), 0);
  EXPECT_GT(counters["mem_optimizer_bytes"].back(), counters["mem_weights_bytes"].back()) << "m and v: twice the master";
  EXPECT_GT(counters["mem_activations_bytes"].back(), 0);
  ASSERT_TRUE(counters.count("device_used_bytes"));
  EXPECT_LE(pylon_bytes, counters["device_used_bytes"].back());
}

}  // namespace
}  // namespace pylon
