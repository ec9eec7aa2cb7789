// CUPTI activity tracing: callbacks on the launch, copy, fill and synchronisation API calls record
// ranges on the calling thread (tracer buffers, no lock); activity buffers of kernels, copies and
// fills are parsed when CUPTI hands them back. CUPTI takes its timestamps from now_ns(), so device
// records and CPU ranges share one clock.
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "profile/cuda/cupti_check.h"
#include "profile/device_trace.h"
#include "profile/ncu_csv.h"

namespace pylon::profile {
namespace {

// The API calls that become ranges: names without CUPTI's version suffixes.
struct Traced {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
  const char* name;
};
constexpr Traced kTraced[] = {
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, "cudaLaunchKernelExC"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000, "cudaLaunchCooperativeKernel"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, "cudaGraphLaunch"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, "cudaMemcpy"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, "cudaMemcpyAsync"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020, "cudaMemcpy2DAsync"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020, "cudaMemset"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, "cudaMemsetAsync"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, "cudaStreamSynchronize"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020, "cudaEventSynchronize"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, "cudaDeviceSynchronize"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020, "cudaStreamWaitEvent"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, "cudaMalloc"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, "cudaFree"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, "cudaMallocAsync"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, "cudaFreeAsync"},
    // Libraries that launch through the driver (cuBLASLt, NCCL): recorded when no runtime call
    // encloses them.
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, "cuLaunchKernel"},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, "cuLaunchKernel"},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, "cuLaunchKernelEx"},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, "cuLaunchKernelEx"},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel"},
};

const char* traced_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  for (const Traced& t : kTraced)
    if (t.domain == domain && t.cbid == cbid) return t.name;
  return nullptr;
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};
constexpr size_t kBufferBytes = 8 << 20;

struct State {
  std::mutex mutex;
  std::vector<DeviceRecord> records;  // parsed from completed buffers
  int64_t keep_from_ns = 0;           // records that begin earlier are dropped
  CUpti_SubscriberHandle subscriber = nullptr;
  bool running = false;
};
State& state() {
  static State* s = new State;  // never destroyed: CUPTI may call back during exit
  return *s;
}

// The open traced call on this thread: its start and correlation (one level; the driver call
// inside a runtime call is not recorded twice).
struct OpenCall {
  int64_t begin_ns = 0;
  uint32_t correlation = 0;
  int depth = 0;
  bool recording = false;
};
thread_local OpenCall t_open;

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite == CUPTI_API_ENTER) {
    if (t_open.depth++ == 0) {
      t_open.recording = enabled();
      t_open.correlation = cb->correlationId;
      t_open.begin_ns = now_ns();
    }
    return;
  }
  if (--t_open.depth != 0 || !t_open.recording) return;
  const char* name = traced_name(domain, cbid);
  if (!name) return;
  RangeEvent e{"cuda_runtime", name, t_open.begin_ns, now_ns(), {}};
  e.args.key = kCorrelationArg;
  e.args.values[0] = t_open.correlation;
  record_range(std::move(e));
}

uint64_t CUPTIAPI timestamp() { return static_cast<uint64_t>(now_ns()); }

// Zeroed by calloc (fresh pages from the kernel, not written here): CUPTI is told so and does not
// clear the buffer itself (8 MB of fresh pages faulted and written on the launching thread).
void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::calloc(1, kBufferBytes));  // malloc's 16-byte alignment >= CUPTI's 8
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

const char* copy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "Memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "Memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "Memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "Memcpy PtoP";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "Memcpy HtoH";
    default: return "Memcpy";
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<DeviceRecord> parsed;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    DeviceRecord r;
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      r = {kernel_name_from_symbol(k->name ? k->name : "?"), "kernel", static_cast<int64_t>(k->start), static_cast<int64_t>(k->end),
           k->correlationId, static_cast<int>(k->deviceId), static_cast<int>(k->streamId), 0};
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      r = {copy_name(m->copyKind), "gpu_memcpy", static_cast<int64_t>(m->start), static_cast<int64_t>(m->end),
           m->runtimeCorrelationId ? m->runtimeCorrelationId : m->correlationId, static_cast<int>(m->deviceId),
           static_cast<int>(m->streamId), static_cast<int64_t>(m->bytes)};
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      r = {"Memset", "gpu_memset", static_cast<int64_t>(m->start), static_cast<int64_t>(m->end),
           m->correlationId, static_cast<int>(m->deviceId), static_cast<int>(m->streamId),
           static_cast<int64_t>(m->bytes)};
    } else {
      continue;
    }
    parsed.push_back(std::move(r));
  }
  std::free(buffer);
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  for (DeviceRecord& r : parsed)
    if (r.begin_ns >= s.keep_from_ns && r.end_ns >= r.begin_ns) s.records.push_back(std::move(r));
}

}  // namespace

bool device_tracing_available() { return true; }

void device_tracing_start() {
  State& s = state();
  PYLON_CHECK(!s.running, "device tracing is already running in this process");
  // One set of buffers for the process, not one per thread: NCCL's non-blocking communicators
  // launch each collective from a new thread, and a fresh per-thread buffer for each of them made
  // every NCCL launch take 0.5-8 ms on 2 GPUs (bench/profiler_notes.md). Both attributes must be
  // set before the callbacks are registered.
  uint8_t per_thread = 0, zeroed = 1;
  size_t one = sizeof(uint8_t);
  PYLON_CUPTI_CHECK(cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, &one, &per_thread));
  PYLON_CUPTI_CHECK(cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &one, &zeroed));
  PYLON_CUPTI_CHECK(cuptiActivityRegisterTimestampCallback(timestamp));
  PYLON_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  PYLON_CUPTI_CHECK(cuptiSubscribe(&s.subscriber, on_api, nullptr));
  for (const Traced& t : kTraced) PYLON_CUPTI_CHECK(cuptiEnableCallback(1, s.subscriber, t.domain, t.cbid));
  for (CUpti_ActivityKind k : kKinds) PYLON_CUPTI_CHECK(cuptiActivityEnable(k));
  {
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.records.clear();
    s.keep_from_ns = 0;
  }
  s.running = true;
}

void device_tracing_discard() {
  State& s = state();
  if (!s.running) return;
  const std::lock_guard<std::mutex> lock(s.mutex);
  s.records.clear();
  s.keep_from_ns = now_ns();
}

std::vector<DeviceRecord> device_tracing_stop() {
  State& s = state();
  if (!s.running) return {};
  s.running = false;
  cudaDeviceSynchronize();  // explicit: the last step's records are complete; errors show later
  PYLON_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  for (CUpti_ActivityKind k : kKinds) PYLON_CUPTI_CHECK(cuptiActivityDisable(k));
  PYLON_CUPTI_CHECK(cuptiUnsubscribe(s.subscriber));
  s.subscriber = nullptr;
  std::vector<DeviceRecord> out;
  {
    const std::lock_guard<std::mutex> lock(s.mutex);
    out.swap(s.records);
  }
  std::sort(out.begin(), out.end(), [](const DeviceRecord& a, const DeviceRecord& b) { return a.begin_ns < b.begin_ns; });
  return out;
}

double device_used_bytes() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return static_cast<double>(total - free);
}

}  // namespace pylon::profile
