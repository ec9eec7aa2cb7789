// Helpers for the CUDA op tests: typed device arrays (upload, download, NaN poisoning), bf16
// rounding on the host and fresh random inputs. Outputs are compared by support/op_check.h.
#pragma once

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "ops/cuda/runtime.h"

namespace pylon::cuda::testing {

using bf16 = __nv_bfloat16;

#define PYLON_SKIP_WITHOUT_CUDA() \
  if (::pylon::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

inline float round_bf16(float f) { return __bfloat162float(__float2bfloat16(f)); }

inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}

inline std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}

// n values of scale·N(0, 1), rounded to bf16 (exact in fp32 too), from stream `seed`.
inline std::vector<float> random_bf16_values(size_t n, uint64_t seed, float scale = 1.f) {
  std::vector<float> v(n);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) v[i] = round_bf16(scale * static_cast<float>(random_normal(seed, 7, i)));
  return v;
}

// n values of scale·N(0, 1) in fp32.
inline std::vector<float> random_f32_values(size_t n, uint64_t seed, float scale = 1.f) {
  std::vector<float> v(n);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(random_normal(seed, 11, i));
  return v;
}

// n integers uniform in [0, bound).
inline std::vector<int32_t> random_ids(size_t n, int bound, uint64_t seed) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(random_bits(seed, 13, i) % static_cast<uint64_t>(bound));
  return v;
}

// A typed device array of n elements.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n), buf_(n * sizeof(T)) {}
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  void upload(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), n_);
    PYLON_CUDA_CHECK(cudaMemcpy(buf_.get(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    PYLON_CUDA_CHECK(cudaDeviceSynchronize());
    PYLON_CUDA_CHECK(cudaMemcpy(host.data(), buf_.get(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // All bytes 0xFF: NaN in fp32 and bf16, -1 in integers; an element the kernel skips shows.
  void poison() { PYLON_CUDA_CHECK(cudaMemset(buf_.get(), 0xFF, n_ * sizeof(T))); }
  T* get() const { return buf_.as<T>(); }
  size_t size() const { return n_; }

 private:
  size_t n_;
  DeviceBuffer buf_;
};

inline double as_double(bf16 x) { return __bfloat162float(x); }

}  // namespace pylon::cuda::testing
