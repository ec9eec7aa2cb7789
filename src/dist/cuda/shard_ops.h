// Small kernels of the GPU FSDP runtime.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pylon::cuda {

// acc (n) += x (n): a micro-step's reduced gradient shard into the step's.
void accumulate_f32(float* acc, const float* x, int64_t n, cudaStream_t stream);

}  // namespace pylon::cuda
