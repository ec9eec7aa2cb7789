// The L2 flush: a grid-stride read of a zeroed buffer twice the L2's size.
#include "profile/cuda/l2_flush.h"

namespace pylon::profile {
namespace {

// Reads in[0..n); the XOR is never 1 on a zeroed buffer, so sink is never written, but the
// compiler cannot drop the loads.
__global__ void l2_flush_kernel(const int4* __restrict__ in, size_t n, int* sink) {
  int acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int4 v = in[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 1) *sink = acc;
}

constexpr int kThreads = 256;

}  // namespace

L2Flush::L2Flush() {
  int device = 0, l2 = 0, sms = 0;
  PYLON_CUDA_CHECK(cudaGetDevice(&device));
  PYLON_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  PYLON_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  buffer_ = cuda::DeviceBuffer(2 * static_cast<size_t>(l2 > 0 ? l2 : 64 << 20));
  sink_ = cuda::DeviceBuffer(sizeof(int));
  PYLON_CUDA_CHECK(cudaMemsetAsync(buffer_.get(), 0, buffer_.bytes(), stream_.get()));
  stream_.synchronize();
  blocks_ = 4 * (sms > 0 ? sms : 1);
}

void L2Flush::run() const {
  l2_flush_kernel<<<blocks_, kThreads, 0, stream_.get()>>>(buffer_.as<int4>(), buffer_.bytes() / sizeof(int4),
                                                          sink_.as<int>());
  PYLON_CUDA_CHECK_LAUNCH();
  stream_.synchronize();
}

}  // namespace pylon::profile
