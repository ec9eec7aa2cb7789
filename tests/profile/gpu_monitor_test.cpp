// The GPU monitor's per-step windows on a fake reader whose clock and energy counter the test sets
// (worked out by hand), the fallback that integrates power when the counter is absent, its counter
// tracks on the trace, and NVML opened for real where the driver is (else a reason).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>

#include "profile/gpu_monitor.h"
#include "profile/tracer.h"

namespace pylon::profile {
namespace {

// The reader's world: seconds on its clock, the counter (joules; < 0: not reported), the power.
struct FakeGpu {
  std::atomic<double> seconds{0}, energy{0}, power{300};
  std::atomic<uint64_t> reasons{kClockReasonSwPowerCap};
  GpuMonitor::Reader reader() {
    return [this] {
      GpuSample s;
      s.t_ns = static_cast<int64_t>(seconds.load() * 1e9);
      s.energy_j = energy.load();
      s.power_w = power.load();
      s.sm_mhz = 1500, s.mem_mhz = 3200, s.temp_c = 50;
      s.reasons = reasons.load();
      return s;
    };
  }
};

TEST(GpuMonitor, WindowsSpanTheStepsOfTheLastSecond) {
  FakeGpu gpu;
  GpuMonitor m(gpu.reader(), 1);
  auto step_at = [&](double seconds, double joules) {
    gpu.seconds = seconds, gpu.energy = joules;
    return m.mark_step();
  };
  // Windows under a second come from the power samples (300 W), longer ones from the counter.
  GpuWindow w = step_at(1.0, 300);  // the first step: since the monitor started at 0 s
  EXPECT_EQ(w.steps, 1);
  EXPECT_DOUBLE_EQ(w.energy_j, 300);
  EXPECT_DOUBLE_EQ(w.power_w, 300);
  w = step_at(1.5, 450);  // from the step at 1 s
  EXPECT_EQ(w.steps, 1);
  EXPECT_DOUBLE_EQ(w.energy_j, 150);
  w = step_at(2.0, 600);  // still from 1 s: 2 steps, 1 s
  EXPECT_EQ(w.steps, 2);
  EXPECT_DOUBLE_EQ(w.energy_j, 150);
  EXPECT_DOUBLE_EQ(w.power_w, 300);
  w = step_at(2.6, 810);  // the step at 1 s is older than needed: from 1.5 s, 2 steps over 1.1 s, the counter
  EXPECT_EQ(w.steps, 2);
  EXPECT_DOUBLE_EQ(w.energy_j, 180);
  EXPECT_NEAR(w.power_w, 360 / 1.1, 1e-9);
  EXPECT_DOUBLE_EQ(w.sm_mhz, 1500);
  EXPECT_DOUBLE_EQ(w.power_capped_frac, 1);
}

// The counter advances in steps: a window of short steps in which it did not move is not 0 J.
TEST(GpuMonitor, ACounterThatHasNotMovedGivesThePowerSamples) {
  FakeGpu gpu;
  gpu.energy = 5000, gpu.power = 250;
  GpuMonitor m(gpu.reader(), 1);
  for (int i = 1; i <= 3; ++i) {
    gpu.seconds = 0.001 * i;
    const GpuWindow w = m.mark_step();
    EXPECT_NEAR(w.power_w, 250, 1e-6);
    EXPECT_NEAR(w.energy_j, 0.25, 1e-9);  // 1 ms at 250 W per step
  }
  gpu.seconds = 1.5, gpu.energy = 5000;  // a second on and the counter still has not moved
  EXPECT_NEAR(m.mark_step().power_w, 250, 1e-6);
}

TEST(GpuMonitor, WithoutAnEnergyCounterPowerIsIntegrated) {
  FakeGpu gpu;
  gpu.energy = -1, gpu.power = 200, gpu.reasons = 0;
  GpuMonitor m(gpu.reader(), 1);
  for (double t : {0.25, 0.5, 0.75, 1.0}) {
    gpu.seconds = t;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // samples at this time, or none: same integral
  }
  GpuWindow w = m.mark_step();
  EXPECT_EQ(w.steps, 1);
  EXPECT_NEAR(w.energy_j, 200, 1e-9);
  EXPECT_NEAR(w.power_w, 200, 1e-9);
  EXPECT_DOUBLE_EQ(w.power_capped_frac, 0);
  gpu.seconds = 1.4;
  w = m.mark_step();
  EXPECT_NEAR(w.energy_j, 80, 1e-9);
}

TEST(GpuMonitor, SamplesBecomeCounterTracksWhileTracing) {
  clear();
  set_enabled(true);
  {
    FakeGpu gpu;  // capped when the monitor starts
    GpuMonitor m(gpu.reader(), 1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (m.samples().size() < 4 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    gpu.reasons = 0;
    const size_t seen = m.samples().size();
    while (m.samples().size() < seen + 4 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  set_enabled(false);
  std::set<std::string> names, instants;
  for (const ThreadTrace& t : snapshot(0, "test").threads) {
    for (const CounterSample& c : t.counters) names.insert(c.name);
    for (const RangeEvent& e : t.ranges)
      if (!std::strcmp(e.category, kInstantCategory)) instants.insert(e.name);
  }
  clear();
  EXPECT_EQ(instants, (std::set<std::string>{"power cap released"})) << "the cap was on at the start, then off";
  for (const char* n : {"gpu_power_w", "gpu_sm_clock_mhz", "gpu_mem_clock_mhz", "gpu_temp_c", "gpu_power_capped",
                        "gpu_thermal_slowdown"})
    EXPECT_TRUE(names.count(n)) << n;
}

// Without the driver, or for a bus id no GPU has, open_nvml gives a reason and no monitor (the CUDA
// training tests check real readings in their metrics rows).
TEST(GpuMonitor, NoDriverOrNoSuchDeviceGivesAReason) {
  std::string why;
  EXPECT_EQ(GpuMonitor::open_nvml("0000:FF:1F.7", 20, &why), nullptr);
  EXPECT_TRUE(why.find("libnvidia-ml") != std::string::npos || why.find("0000:FF:1F.7") != std::string::npos) << why;
}

}  // namespace
}  // namespace pylon::profile
