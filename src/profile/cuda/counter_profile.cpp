// CUPTI's range profiler with automatic ranges (one per kernel) and kernel replay: the host side
// (libnvperf through CUPTI's profiler-host API) builds the config image for the metrics, the target
// side collects into a counter-data image, and each range is evaluated back to metric values.
// Kernel names: auto ranges are numbered in launch order, so launch callbacks supply the names.
// Cache state: as the previous kernel and the replay's memory restore left it (no flush; an L2
// flush before each kernel was tried and did not move DRAM % toward ncu's flushed figures, since
// the replay restores memory after it, pass by pass: bench/profiler_notes.md).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti.h>
#include <cupti_target.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "profile/cuda/cupti_check.h"
#include "profile/counter_profile.h"
#include "profile/ncu_csv.h"

namespace pylon::profile {
namespace {

// The metrics in the order KernelCounters reads them; the first three are required.
enum Metric { kDuration, kSm, kDram, kMemory, kBytes, kFadd, kFmul, kFfma, kTensor, kCount };
constexpr const char* kMetricNames[kCount] = {
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum",
    "sm__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "sm__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
};
constexpr size_t kMaxRanges = 4096;  // kernels per profiled region

struct Session {
  CUpti_SubscriberHandle subscriber = nullptr;  // the launch callbacks that name the ranges
  CUpti_Profiler_Host_Object* host = nullptr;
  CUpti_RangeProfiler_Object* profiler = nullptr;
  std::vector<uint8_t> config, counter_data;
  std::vector<const char*> metrics;  // the ones the chip accepted
  std::vector<int> slot;             // Metric -> index in metrics, or -1
  int passes = 0;                    // replays of each kernel for the metrics
};
std::unique_ptr<Session> g_session;

// Auto ranges are numbered in launch order ("0", "1", ...); the kernels' names come from the launch
// API calls, recorded in the same order (a driver launch inside a runtime launch counts once).
struct LaunchLog {
  std::mutex mutex;
  std::vector<std::string> names;
};
LaunchLog& launch_log() {
  static LaunchLog* l = new LaunchLog;  // never destroyed: CUPTI may call back during exit
  return *l;
}
thread_local int t_launch_depth = 0;
thread_local std::string t_symbol;
void CUPTIAPI on_launch(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite == CUPTI_API_ENTER) {
    if (t_launch_depth++ == 0) t_symbol.clear();
    if (t_symbol.empty() && cb->symbolName) t_symbol = cb->symbolName;
    return;
  }
  if (--t_launch_depth != 0) return;
  LaunchLog& l = launch_log();
  const std::lock_guard<std::mutex> lock(l.mutex);
  l.names.push_back(t_symbol.empty() ? "?" : t_symbol);
}

constexpr std::pair<CUpti_CallbackDomain, CUpti_CallbackId> kLaunches[] = {
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel},
};

// The name of auto range `index` called `range_name`, from the launch log.
std::string range_kernel(const char* range_name, size_t index, const std::vector<std::string>& launches,
                         size_t ranges) {
  char* end = nullptr;
  const unsigned long long n = range_name ? std::strtoull(range_name, &end, 10) : 0;
  const bool numbered = range_name && *range_name && end && *end == 0;
  if (!numbered) return kernel_name_from_symbol(range_name ? range_name : "?");  // a named range: use its name
  if (launches.size() != ranges || n >= launches.size())  // the log does not line up: say so
    return "kernel #" + std::to_string(numbered ? n : index);
  return kernel_name_from_symbol(launches[n]);
}

template <typename P>
P params(size_t size) {
  P p{};
  p.structSize = size;
  return p;
}

void release(Session& s) {
  if (s.subscriber) {
    cuptiUnsubscribe(s.subscriber);
    s.subscriber = nullptr;
  }
  if (s.profiler) {
    auto p = params<CUpti_RangeProfiler_Disable_Params>(CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE);
    p.pRangeProfilerObject = s.profiler;
    cuptiRangeProfilerDisable(&p);
    s.profiler = nullptr;
  }
  if (s.host) {
    auto p = params<CUpti_Profiler_Host_Deinitialize_Params>(CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE);
    p.pHostObject = s.host;
    cuptiProfilerHostDeinitialize(&p);
    s.host = nullptr;
  }
}

// Adds one metric to the host config; false when the chip does not have it.
bool add_metric(CUpti_Profiler_Host_Object* host, const char* name) {
  auto p = params<CUpti_Profiler_Host_ConfigAddMetrics_Params>(CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE);
  p.pHostObject = host;
  p.ppMetricNames = &name;
  p.numMetrics = 1;
  return cuptiProfilerHostConfigAddMetrics(&p) == CUPTI_SUCCESS;
}

}  // namespace

bool counter_profiling_available() { return true; }

std::string current_device_name() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  return prop.name;
}

int counter_profiling_start() {
  PYLON_CHECK(!g_session, "counter profiling is already running in this process");
  auto s = std::make_unique<Session>();
  PYLON_CHECK(cudaFree(nullptr) == cudaSuccess, "counter profiling: no usable CUDA device");  // a context
  // The driver's cuCtxGetCurrent through the runtime: linking libcuda would tie every binary to a
  // driver (CI has none).
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  PYLON_CHECK(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found) ==
                      cudaSuccess && found == cudaDriverEntryPointSuccess && fn,
              "counter profiling: the driver has no cuCtxGetCurrent");
  CUcontext ctx = nullptr;
  PYLON_CHECK(reinterpret_cast<CUresult (*)(CUcontext*)>(fn)(&ctx) == CUDA_SUCCESS && ctx,
              "counter profiling: no current CUDA context");
  int device = 0;
  PYLON_CHECK(cudaGetDevice(&device) == cudaSuccess, "counter profiling: no current device");
  try {
    auto init = params<CUpti_Profiler_Initialize_Params>(CUpti_Profiler_Initialize_Params_STRUCT_SIZE);
    PYLON_CUPTI_CHECK(cuptiProfilerInitialize(&init));
    auto chip = params<CUpti_Device_GetChipName_Params>(CUpti_Device_GetChipName_Params_STRUCT_SIZE);
    chip.deviceIndex = static_cast<size_t>(device);
    PYLON_CUPTI_CHECK(cuptiDeviceGetChipName(&chip));
    auto avail = params<CUpti_Profiler_GetCounterAvailability_Params>(CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE);
    avail.ctx = ctx;
    PYLON_CUPTI_CHECK(cuptiProfilerGetCounterAvailability(&avail));
    std::vector<uint8_t> availability(avail.counterAvailabilityImageSize);
    avail.pCounterAvailabilityImage = availability.data();
    PYLON_CUPTI_CHECK(cuptiProfilerGetCounterAvailability(&avail));

    auto host = params<CUpti_Profiler_Host_Initialize_Params>(CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE);
    host.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    host.pChipName = chip.pChipName;
    host.pCounterAvailabilityImage = availability.data();
    PYLON_CUPTI_CHECK(cuptiProfilerHostInitialize(&host));
    s->host = host.pHostObject;
    s->slot.assign(kCount, -1);
    for (int m = 0; m < kCount; ++m) {
      const bool added = add_metric(s->host, kMetricNames[m]);
      PYLON_CHECK(added || m > kDram, "counter profiling: chip ", chip.pChipName, " has no metric ", kMetricNames[m]);
      if (added) s->slot[m] = static_cast<int>(s->metrics.size()), s->metrics.push_back(kMetricNames[m]);
    }
    auto size = params<CUpti_Profiler_Host_GetConfigImageSize_Params>(CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE);
    size.pHostObject = s->host;
    PYLON_CUPTI_CHECK(cuptiProfilerHostGetConfigImageSize(&size));
    s->config.resize(size.configImageSize);
    auto image = params<CUpti_Profiler_Host_GetConfigImage_Params>(CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE);
    image.pHostObject = s->host;
    image.configImageSize = s->config.size();
    image.pConfigImage = s->config.data();
    PYLON_CUPTI_CHECK(cuptiProfilerHostGetConfigImage(&image));
    auto passes = params<CUpti_Profiler_Host_GetNumOfPasses_Params>(CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE);
    passes.configImageSize = s->config.size();
    passes.pConfigImage = s->config.data();
    PYLON_CUPTI_CHECK(cuptiProfilerHostGetNumOfPasses(&passes));
    s->passes = static_cast<int>(passes.numOfPasses);

    auto enable = params<CUpti_RangeProfiler_Enable_Params>(CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE);
    enable.ctx = ctx;
    PYLON_CUPTI_CHECK(cuptiRangeProfilerEnable(&enable));
    s->profiler = enable.pRangeProfilerObject;
    auto data_size = params<CUpti_RangeProfiler_GetCounterDataSize_Params>(CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE);
    data_size.pRangeProfilerObject = s->profiler;
    data_size.pMetricNames = s->metrics.data();
    data_size.numMetrics = s->metrics.size();
    data_size.maxNumOfRanges = kMaxRanges;
    data_size.maxNumRangeTreeNodes = kMaxRanges;
    PYLON_CUPTI_CHECK(cuptiRangeProfilerGetCounterDataSize(&data_size));
    s->counter_data.resize(data_size.counterDataSize);
    auto data_init = params<CUpti_RangeProfiler_CounterDataImage_Initialize_Params>(
        CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE);
    data_init.pRangeProfilerObject = s->profiler;
    data_init.counterDataSize = s->counter_data.size();
    data_init.pCounterData = s->counter_data.data();
    PYLON_CUPTI_CHECK(cuptiRangeProfilerCounterDataImageInitialize(&data_init));

    auto config = params<CUpti_RangeProfiler_SetConfig_Params>(CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE);
    config.pRangeProfilerObject = s->profiler;
    config.configSize = s->config.size();
    config.pConfig = s->config.data();
    config.counterDataImageSize = s->counter_data.size();
    config.pCounterDataImage = s->counter_data.data();
    config.range = CUPTI_AutoRange;
    config.replayMode = CUPTI_KernelReplay;
    config.maxRangesPerPass = kMaxRanges;
    config.numNestingLevels = 1;
    config.minNestingLevel = 1;
    config.passIndex = 0;
    config.targetNestingLevel = 1;
    PYLON_CUPTI_CHECK(cuptiRangeProfilerSetConfig(&config));
    {
      LaunchLog& l = launch_log();
      const std::lock_guard<std::mutex> lock(l.mutex);
      l.names.clear();
    }
    PYLON_CUPTI_CHECK(cuptiSubscribe(&s->subscriber, on_launch, nullptr));
    for (const auto& [domain, cbid] : kLaunches) PYLON_CUPTI_CHECK(cuptiEnableCallback(1, s->subscriber, domain, cbid));
    auto start = params<CUpti_RangeProfiler_Start_Params>(CUpti_RangeProfiler_Start_Params_STRUCT_SIZE);
    start.pRangeProfilerObject = s->profiler;
    PYLON_CUPTI_CHECK(cuptiRangeProfilerStart(&start));
  } catch (...) {
    release(*s);
    throw;
  }
  const int passes = s->passes;
  g_session = std::move(s);
  return passes;
}

std::vector<KernelCounters> counter_profiling_stop() {
  if (!g_session) return {};
  const std::unique_ptr<Session> s = std::move(g_session);
  std::vector<KernelCounters> kernels;
  try {
    PYLON_CHECK(cudaDeviceSynchronize() == cudaSuccess, "counter profiling: the device failed");
    auto stop = params<CUpti_RangeProfiler_Stop_Params>(CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE);
    stop.pRangeProfilerObject = s->profiler;
    PYLON_CUPTI_CHECK(cuptiRangeProfilerStop(&stop));
    auto decode = params<CUpti_RangeProfiler_DecodeData_Params>(CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE);
    decode.pRangeProfilerObject = s->profiler;
    PYLON_CUPTI_CHECK(cuptiRangeProfilerDecodeData(&decode));
    PYLON_CHECK(decode.numOfRangeDropped == 0, "counter profiling: ", decode.numOfRangeDropped,
                " kernels did not fit (more than ", kMaxRanges, " launches; profile fewer steps)");
    auto info = params<CUpti_RangeProfiler_GetCounterDataInfo_Params>(CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE);
    info.pCounterDataImage = s->counter_data.data();
    info.counterDataImageSize = s->counter_data.size();
    PYLON_CUPTI_CHECK(cuptiRangeProfilerGetCounterDataInfo(&info));
    std::vector<std::string> launches;
    {
      LaunchLog& l = launch_log();
      const std::lock_guard<std::mutex> lock(l.mutex);
      launches.swap(l.names);
    }
    std::map<std::string, size_t> index_of;
    std::vector<double> values(s->metrics.size());
    for (size_t r = 0; r < info.numTotalRanges; ++r) {
      auto range = params<CUpti_RangeProfiler_CounterData_GetRangeInfo_Params>(
          CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE);
      range.pCounterDataImage = s->counter_data.data();
      range.counterDataImageSize = s->counter_data.size();
      range.rangeIndex = r;
      range.rangeDelimiter = "/";
      PYLON_CUPTI_CHECK(cuptiRangeProfilerCounterDataGetRangeInfo(&range));
      KernelCounters k;
      k.name = range_kernel(range.rangeName, r, launches, info.numTotalRanges);
      auto eval = params<CUpti_Profiler_Host_EvaluateToGpuValues_Params>(
          CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE);
      eval.pHostObject = s->host;
      eval.pCounterDataImage = s->counter_data.data();
      eval.counterDataImageSize = s->counter_data.size();
      eval.rangeIndex = r;
      eval.ppMetricNames = s->metrics.data();
      eval.numMetrics = s->metrics.size();
      eval.pMetricValues = values.data();
      PYLON_CUPTI_CHECK(cuptiProfilerHostEvaluateToGpuValues(&eval));
      auto value = [&](Metric m) { return s->slot[m] < 0 ? -1.0 : values[static_cast<size_t>(s->slot[m])]; };
      k.launches = 1;
      k.seconds = value(kDuration) * 1e-9;  // ns
      k.sm_pct = value(kSm), k.dram_pct = value(kDram), k.memory_pct = value(kMemory);
      k.dram_bytes = value(kBytes);
      if (value(kFadd) >= 0 && value(kFmul) >= 0 && value(kFfma) >= 0)
        k.fp32_flop = value(kFadd) + value(kFmul) + 2 * value(kFfma);
      k.tensor_flop = value(kTensor);
      const auto [it, fresh] = index_of.try_emplace(k.name, kernels.size());
      if (fresh)
        kernels.push_back(k);
      else
        accumulate(kernels[it->second], k);
    }
  } catch (...) {
    release(*s);
    throw;
  }
  release(*s);
  return kernels;
}

}  // namespace pylon::profile
