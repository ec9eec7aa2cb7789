// Power, clocks, temperature and energy of one GPU, sampled on a low-priority thread at a fixed
// period, and summarised per training step. The readings come from NVML, the management library the
// NVIDIA driver ships (libnvidia-ml.so.1, opened at run time: a machine without the driver has no
// monitor, and nothing else changes). While the tracer records, each sample also becomes counter
// samples on the trace's timeline (gpu_power_w, gpu_sm_clock_mhz, gpu_mem_clock_mhz, gpu_temp_c,
// gpu_power_capped, gpu_thermal_slowdown), and a change of the power cap's or a slowdown's hold
// on the clocks an instant event.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pylon::profile {

// NVML's clock-event ("throttle") reason bits, as the driver reports them.
inline constexpr uint64_t kClockReasonIdle = 0x1;
inline constexpr uint64_t kClockReasonSwPowerCap = 0x4;
inline constexpr uint64_t kClockReasonHwSlowdown = 0x8;
inline constexpr uint64_t kClockReasonSwThermal = 0x20;
inline constexpr uint64_t kClockReasonHwThermal = 0x40;
inline constexpr uint64_t kClockReasonHwPowerBrake = 0x80;

struct GpuSample {
  int64_t t_ns = 0;        // the tracer's clock (profile::now_ns)
  double power_w = 0;      // board power draw
  double energy_j = -1;    // the driver's energy counter (joules since it loaded); < 0: not reported
  double sm_mhz = 0, mem_mhz = 0;
  double temp_c = 0;
  uint64_t reasons = 0;    // kClockReason* bits in force
};

// A training step's share of the readings: the mean over the steps marked in the last second (at
// least the latest one; the first mark covers the time since the monitor started). Energy comes from
// the driver's counter when the window spans a second or more and the counter moved in it (it
// advances in steps of tens of ms), else from the power samples integrated over the window.
struct GpuWindow {
  double energy_j = 0;           // per step
  double power_w = 0;            // mean board power over the window (energy / time)
  double sm_mhz = 0;             // mean SM clock of the window's samples
  double power_capped_frac = 0;  // share of the window's samples with the power cap in force
  int64_t steps = 0;             // steps the window spans
};

class GpuMonitor {
 public:
  using Reader = std::function<GpuSample()>;

  // The GPU with this PCI bus id ("0000:1A:00.0", as cudaDeviceGetPCIBusId writes it) through
  // NVML; nullptr, with the reason in *why, when the library or the device cannot be opened.
  static std::unique_ptr<GpuMonitor> open_nvml(const std::string& pci_bus_id, int period_ms, std::string* why);
  // Any reader (tests). Starts sampling every period_ms on its own thread.
  GpuMonitor(Reader read, int period_ms);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Marks the end of one more step (called once per step, in order) and summarises the window.
  GpuWindow mark_step();
  // The samples taken so far (at most the last minute's).
  std::vector<GpuSample> samples() const;

 private:
  struct Mark {
    int64_t t_ns;
    double counter_j;     // the driver's counter (< 0: not reported)
    double integrated_j;  // the power samples' integral since the monitor started
    int64_t step;
  };
  void run();
  double integrated_until(int64_t t_ns) const;

  Reader read_;
  int period_ms_;
  GpuSample first_;
  mutable std::mutex mu_;
  std::deque<GpuSample> samples_;
  std::deque<Mark> marks_;
  int64_t steps_ = 0;
  double integrated_j_ = 0;  // power integrated over the samples, up to the last one
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace pylon::profile
