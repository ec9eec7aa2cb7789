#include "ops/cuda/check.h"

namespace pylon::cuda::detail {

void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw Error(pylon::detail::concat("CUDA error ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ") in ", call,
                     " at ", file, ":", line));
}

void throw_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  throw Error(pylon::detail::concat("cuBLASLt error ", cublasLtGetStatusName(s), " (", cublasLtGetStatusString(s),
                     ") in ", call, " at ", file, ":", line));
}

}  // namespace pylon::cuda::detail
