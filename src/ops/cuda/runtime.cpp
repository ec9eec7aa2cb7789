#include "ops/cuda/runtime.h"

namespace pylon::cuda {
namespace {
unsigned long long active_capture = 0;  // CudaGraph's capture in progress (one at a time, one thread)
}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

unsigned long long capture_id(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  PYLON_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, &id));
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

unsigned long long active_capture_id() { return active_capture; }

CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

void CudaGraph::begin_capture(cudaStream_t s) {
  PYLON_ASSERT(active_capture == 0, "a CUDA graph capture is already in progress");
  PYLON_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  active_capture = capture_id(s);
}

void CudaGraph::end_capture(cudaStream_t s) {
  cudaGraph_t graph = nullptr;
  active_capture = 0;
  const cudaError_t e = cudaStreamEndCapture(s, &graph);
  if (e != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw Error(std::string("CUDA graph capture failed: ") + cudaGetErrorString(e) +
                " (some work in it cannot be captured, or a stream it forked was not joined)");
  }
  if (exec_) cudaGraphExecDestroy(exec_), exec_ = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec_, graph, 0);
  cudaGraphDestroy(graph);
  PYLON_CUDA_CHECK(ie);
}

void CudaGraph::launch(cudaStream_t s) const {
  PYLON_ASSERT(exec_, "launch of a CUDA graph that was never captured");
  PYLON_CUDA_CHECK(cudaGraphLaunch(exec_, s));
}

}  // namespace pylon::cuda
