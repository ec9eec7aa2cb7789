// Checks for every CUDA runtime, cuBLASLt and kernel-launch call, with the call's text, file and
// line. A failing call throws pylon::Error (a missing or broken device is the user's to fix).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace pylon::cuda::detail {
[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* call, const char* file, int line);
}  // namespace pylon::cuda::detail

#define PYLON_CUDA_CHECK(call)                                                         \
  do {                                                                                 \
    const cudaError_t pylon_err_ = (call);                                             \
    if (pylon_err_ != cudaSuccess)                                                     \
      ::pylon::cuda::detail::throw_cuda(pylon_err_, #call, __FILE__, __LINE__);        \
  } while (0)

#define PYLON_CUBLAS_CHECK(call)                                                       \
  do {                                                                                 \
    const cublasStatus_t pylon_st_ = (call);                                           \
    if (pylon_st_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::pylon::cuda::detail::throw_cublas(pylon_st_, #call, __FILE__, __LINE__);       \
  } while (0)

// After every kernel launch: catches bad launch configurations at the launch site.
#define PYLON_CUDA_CHECK_LAUNCH() PYLON_CUDA_CHECK(cudaGetLastError())
