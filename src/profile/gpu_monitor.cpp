// NVML is opened with dlopen and called through the C functions its API reference documents
// (nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2, nvmlDeviceGetPowerUsage in mW,
// nvmlDeviceGetTotalEnergyConsumption in mJ, nvmlDeviceGetClockInfo in MHz,
// nvmlDeviceGetTemperature in °C, nvmlDeviceGetCurrentClocksThrottleReasons as a bit mask): the
// header is not needed to build, and a build runs on machines without the driver.
#include "profile/gpu_monitor.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>

#include "profile/tracer.h"

namespace pylon::profile {
namespace {

// NVML's ABI: opaque device handles, int return codes (0 = success) and enums passed as int.
using Device = void*;
constexpr int kSuccess = 0;
constexpr int kClockSm = 1, kClockMem = 2;  // nvmlClockType_t
constexpr int kTemperatureGpu = 0;          // nvmlTemperatureSensors_t

struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*by_pci_bus_id)(const char*, Device*) = nullptr;
  int (*power_usage)(Device, unsigned*) = nullptr;
  int (*total_energy)(Device, unsigned long long*) = nullptr;
  int (*clock_info)(Device, int, unsigned*) = nullptr;
  int (*temperature)(Device, int, unsigned*) = nullptr;
  int (*reasons)(Device, unsigned long long*) = nullptr;
  bool initialised = false;
  Device device = nullptr;

  ~Nvml() {
    if (initialised) shutdown();
    if (lib) dlclose(lib);
  }
  template <typename F>
  bool find(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    return f != nullptr;
  }
};

}  // namespace

std::unique_ptr<GpuMonitor> GpuMonitor::open_nvml(const std::string& pci_bus_id, int period_ms, std::string* why) {
  auto nvml = std::make_shared<Nvml>();
  nvml->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nvml->lib) {
    *why = "libnvidia-ml.so.1 (the NVIDIA driver's NVML) not found";
    return nullptr;
  }
  if (!nvml->find(nvml->init, "nvmlInit_v2") || !nvml->find(nvml->shutdown, "nvmlShutdown") ||
      !nvml->find(nvml->error_string, "nvmlErrorString") ||
      !nvml->find(nvml->by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") ||
      !nvml->find(nvml->power_usage, "nvmlDeviceGetPowerUsage") ||
      !nvml->find(nvml->clock_info, "nvmlDeviceGetClockInfo") ||
      !nvml->find(nvml->temperature, "nvmlDeviceGetTemperature")) {
    *why = "libnvidia-ml.so.1 lacks a function Pylon reads (driver too old?)";
    return nullptr;
  }
  nvml->find(nvml->total_energy, "nvmlDeviceGetTotalEnergyConsumption");  // Volta and later
  if (!nvml->find(nvml->reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
    nvml->find(nvml->reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");  // its older name
  int rc = nvml->init();
  if (rc != kSuccess) {
    *why = std::string("nvmlInit: ") + nvml->error_string(rc);
    return nullptr;
  }
  nvml->initialised = true;
  rc = nvml->by_pci_bus_id(pci_bus_id.c_str(), &nvml->device);
  if (rc != kSuccess) {
    *why = "NVML has no device at PCI bus id " + pci_bus_id + ": " + nvml->error_string(rc);
    return nullptr;
  }
  Reader read = [nvml] {
    GpuSample s;
    s.t_ns = now_ns();
    unsigned v = 0;
    if (nvml->power_usage(nvml->device, &v) == kSuccess) s.power_w = v / 1e3;
    unsigned long long mj = 0;
    if (nvml->total_energy && nvml->total_energy(nvml->device, &mj) == kSuccess) s.energy_j = static_cast<double>(mj) / 1e3;
    if (nvml->clock_info(nvml->device, kClockSm, &v) == kSuccess) s.sm_mhz = v;
    if (nvml->clock_info(nvml->device, kClockMem, &v) == kSuccess) s.mem_mhz = v;
    if (nvml->temperature(nvml->device, kTemperatureGpu, &v) == kSuccess) s.temp_c = v;
    unsigned long long bits = 0;
    if (nvml->reasons && nvml->reasons(nvml->device, &bits) == kSuccess) s.reasons = bits;
    return s;
  };
  return std::make_unique<GpuMonitor>(std::move(read), period_ms);
}

namespace {
std::condition_variable g_wake;  // wakes sleeping samplers when one is stopped
std::mutex g_wake_mu;
}  // namespace

GpuMonitor::GpuMonitor(Reader read, int period_ms) : read_(std::move(read)), period_ms_(period_ms) {
  first_ = read_();
  samples_.push_back(first_);
  thread_ = std::thread([this] { run(); });
}

GpuMonitor::~GpuMonitor() {
  {
    std::lock_guard<std::mutex> lock(g_wake_mu);
    stop_ = true;
  }
  g_wake.notify_all();
  thread_.join();
}

void GpuMonitor::run() {
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);  // below the training threads
  set_thread_name("gpu monitor");
  const auto period = std::chrono::milliseconds(period_ms_);
  auto next = std::chrono::steady_clock::now();
  uint64_t last_reasons = first_.reasons;
  for (;;) {
    next += period;
    {
      std::unique_lock<std::mutex> lock(g_wake_mu);
      if (g_wake.wait_until(lock, next, [this] { return stop_.load(); })) return;
    }
    const GpuSample s = read_();
    {
      std::lock_guard<std::mutex> lock(mu_);
      const GpuSample& prev = samples_.back();
      integrated_j_ += 0.5 * (prev.power_w + s.power_w) * static_cast<double>(s.t_ns - prev.t_ns) / 1e9;
      samples_.push_back(s);
      while (samples_.size() > 1 && samples_.front().t_ns < s.t_ns - 60'000'000'000) samples_.pop_front();
    }
    if (enabled()) {
      // The moments the power cap or a slowdown starts or stops holding the clocks.
      const uint64_t slow = kClockReasonSwThermal | kClockReasonHwThermal | kClockReasonHwSlowdown | kClockReasonHwPowerBrake;
      const uint64_t changed = s.reasons ^ last_reasons;
      if (changed & kClockReasonSwPowerCap)
        record_instant((s.reasons & kClockReasonSwPowerCap) ? "power cap holds the clocks" : "power cap released");
      if (changed & slow) record_instant((s.reasons & slow) ? "thermal or hardware slowdown" : "slowdown over");
      last_reasons = s.reasons;
      record_counter("gpu_power_w", s.power_w);
      record_counter("gpu_sm_clock_mhz", s.sm_mhz);
      record_counter("gpu_mem_clock_mhz", s.mem_mhz);
      record_counter("gpu_temp_c", s.temp_c);
      record_counter("gpu_power_capped", (s.reasons & kClockReasonSwPowerCap) ? 1 : 0);
      record_counter("gpu_thermal_slowdown",
                     (s.reasons & (kClockReasonSwThermal | kClockReasonHwThermal | kClockReasonHwSlowdown |
                                   kClockReasonHwPowerBrake))
                         ? 1
                         : 0);
    }
  }
}

double GpuMonitor::integrated_until(int64_t t_ns) const {
  const GpuSample& last = samples_.back();  // carried on at the last power reading
  return integrated_j_ + last.power_w * static_cast<double>(std::max<int64_t>(0, t_ns - last.t_ns)) / 1e9;
}

GpuWindow GpuMonitor::mark_step() {
  const GpuSample now = read_();
  std::lock_guard<std::mutex> lock(mu_);
  marks_.push_back({now.t_ns, now.energy_j, integrated_until(now.t_ns), ++steps_});
  while (marks_.size() > 2 && marks_[1].t_ns <= now.t_ns - 1'000'000'000) marks_.pop_front();
  const Mark base = marks_.size() >= 2 ? marks_.front() : Mark{first_.t_ns, first_.energy_j, 0, 0};
  const Mark& end = marks_.back();
  GpuWindow w;
  w.steps = steps_ - base.step;
  const int64_t span_ns = end.t_ns - base.t_ns;
  const bool counter = base.counter_j >= 0 && end.counter_j > base.counter_j && span_ns >= 1'000'000'000;
  const double joules = counter ? end.counter_j - base.counter_j : end.integrated_j - base.integrated_j;
  w.energy_j = joules / static_cast<double>(w.steps);
  w.power_w = span_ns > 0 ? joules / (static_cast<double>(span_ns) / 1e9) : now.power_w;
  double clock = now.sm_mhz;
  int64_t n = 1, capped = (now.reasons & kClockReasonSwPowerCap) ? 1 : 0;
  for (const GpuSample& s : samples_) {
    if (s.t_ns <= base.t_ns || s.t_ns > now.t_ns) continue;
    clock += s.sm_mhz;
    capped += (s.reasons & kClockReasonSwPowerCap) ? 1 : 0;
    ++n;
  }
  w.sm_mhz = clock / static_cast<double>(n);
  w.power_capped_frac = static_cast<double>(capped) / static_cast<double>(n);
  return w;
}

std::vector<GpuSample> GpuMonitor::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {samples_.begin(), samples_.end()};
}

}  // namespace pylon::profile
