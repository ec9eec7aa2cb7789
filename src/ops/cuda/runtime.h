// RAII owners for CUDA objects (move-only) and device queries.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "ops/cuda/check.h"

namespace pylon::cuda {

int device_count();  // 0 when there is no usable device or driver (never throws)

// Device memory. Owns `bytes` bytes from cudaMalloc.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) PYLON_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Stream {
 public:
  Stream() { PYLON_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (s_) cudaStreamDestroy(s_);
  }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void synchronize() const { PYLON_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

// The id of the stream capture `s` is recording into (cudaStreamGetCaptureInfo), 0 when none.
unsigned long long capture_id(cudaStream_t s);
// The id of the capture CudaGraph::begin_capture started and end_capture has not ended, 0 when none.
unsigned long long active_capture_id();

// A CUDA event. Inside a stream capture (CudaGraph), an event stands for the captured work it was
// recorded after, so it remembers which capture recorded it last. A wait within one capture, or
// outside any, is a wait; a stream outside the capture in progress that waits on an event of it
// joins the capture (a fork). A wait across a capture boundary (on an event recorded before the
// capture began or in an earlier one, or on an ended capture's event) is not enqueued: CUDA
// forbids it, and it is ordered already when the code that captures honours CudaGraph's contract
// (graphs and what lies between them run in order on one stream, and the host or that stream has
// waited for everything that came before).
class Event {
 public:
  explicit Event(bool timing = false) {
    PYLON_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() {
    if (e_) cudaEventDestroy(e_);
  }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)), capture_(o.capture_) {}
  Event& operator=(Event&& o) noexcept {
    std::swap(e_, o.e_);
    std::swap(capture_, o.capture_);
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s) const {
    capture_ = capture_id(s);
    PYLON_CUDA_CHECK(cudaEventRecord(e_, s));
  }
  void wait_on(cudaStream_t s) const {
    const unsigned long long here = capture_id(s);
    if (capture_ == here || (here == 0 && capture_ == active_capture_id()))  // else across a boundary
      PYLON_CUDA_CHECK(cudaStreamWaitEvent(s, e_, 0));
  }
  // Milliseconds from `start` to this event (both recorded with timing = true, outside captures).
  float elapsed_since(const Event& start) const {
    float ms = 0;
    PYLON_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
  mutable unsigned long long capture_ = 0;  // capture_id of the last record
};

// Page-locked host memory (cudaMallocHost) for n elements: copies to and from it run
// asynchronously, and a captured copy reads or writes it whenever the graph runs.
template <typename T>
class PinnedArray {
 public:
  PinnedArray() = default;
  explicit PinnedArray(size_t n) : n_(n) {
    if (n) PYLON_CUDA_CHECK(cudaMallocHost(&p_, n * sizeof(T)));
  }
  ~PinnedArray() {
    if (p_) cudaFreeHost(p_);
  }
  PinnedArray(PinnedArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedArray& operator=(PinnedArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  T* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// The work enqueued on one stream (and the streams it forks and joins back) between
// begin_capture and end_capture, instantiated once and launched any number of times. Contract for
// the code that captures (Event above): before begin_capture the host has waited for all earlier
// work of every stream the capture touches; a launch and any work after it go on the capture's
// stream or wait for the host to synchronise with it first.
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  // Thread-local mode: this thread may make no unsafe call (cudaMalloc, a synchronisation) meanwhile.
  static void begin_capture(cudaStream_t s);
  void end_capture(cudaStream_t s);  // and instantiate; a capture that failed is an Error
  void launch(cudaStream_t s) const;
  bool ready() const { return exec_ != nullptr; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace pylon::cuda
