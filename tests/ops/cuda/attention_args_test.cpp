// The attention entry points refuse, with pylon::Error, what no kernel can run (kv_heads not dividing
// heads, odd or too large head dims, grids past the limit, misaligned pointers) and take the head dims
// without tensor-core kernels (argument checks, not comparisons: the kernels' rows are in
// cuda_op_table.cpp).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/head_layout.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_fp32.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;

// A forward with qkv, out and lse in the first, second and third quarter of a buffer (of 1 MiB, or
// 256 KiB for fp32: room for the small shapes that run), out `offset` elements further.
void forward_bf16(const DeviceBuffer& buf, int B, int T, const HeadLayout& heads, size_t offset = 0) {
  const size_t quarter = buf.bytes() / 4;
  attention_forward(buf.as<bf16>() + quarter / sizeof(bf16) + offset, buf.as<float>() + 2 * quarter / sizeof(float),
                    buf.as<bf16>(), B, T, heads, false, nullptr);
}
void forward_f32(const DeviceArray<float>& buf, int B, int T, const HeadLayout& heads, size_t offset = 0) {
  const size_t quarter = buf.size() / 4;
  attention_forward(buf.get() + quarter + offset, buf.get() + 2 * quarter, buf.get(), B, T, heads, false, nullptr);
}

TEST(CudaAttentionArgs, RefusesWhatNoKernelRuns) {
  PYLON_SKIP_WITHOUT_CUDA();
  DeviceBuffer buf(1 << 20);
  EXPECT_THROW(forward_bf16(buf, 1, 4, HeadLayout{6, 4, 64}), pylon::Error);   // kv_heads does not divide heads
  EXPECT_THROW(forward_bf16(buf, 1, 4, HeadLayout{2, 2, 33}), pylon::Error);   // odd head dim
  EXPECT_THROW(forward_bf16(buf, 1, 4, HeadLayout{1, 1, 258}), pylon::Error);  // head dim over 256
  EXPECT_THROW(forward_bf16(buf, 1, 4, HeadLayout{0, 1, 64}), pylon::Error);
  EXPECT_THROW(forward_bf16(buf, 65536, 1, HeadLayout{1, 1, 64}), pylon::Error);  // B·heads over the grid's y
  EXPECT_THROW(forward_bf16(buf, 1, 4, HeadLayout{1, 1, 64}, 1), pylon::Error);   // out 2-byte aligned
  try {
    forward_bf16(buf, 1, 4, HeadLayout{6, 4, 64});
  } catch (const pylon::Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_heads=4 does not divide heads=6"), std::string::npos) << e.what();
  }
}

TEST(CudaAttentionArgs, RunsHeadDimsWithoutTensorCoreKernels) {
  PYLON_SKIP_WITHOUT_CUDA();
  DeviceBuffer buf(1 << 20);
  EXPECT_NO_THROW(forward_bf16(buf, 1, 4, HeadLayout{1, 1, 96}));
  EXPECT_NO_THROW(forward_bf16(buf, 1, 4, HeadLayout{4, 2, 10}));
  PYLON_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(CudaAttentionFp32Args, RefusesWhatNoKernelRuns) {
  PYLON_SKIP_WITHOUT_CUDA();
  DeviceArray<float> buf(1 << 16);
  EXPECT_THROW(forward_f32(buf, 1, 4, HeadLayout{3, 2, 64}), pylon::Error);
  EXPECT_THROW(forward_f32(buf, 1, 4, HeadLayout{1, 1, 300}), pylon::Error);
  EXPECT_THROW(forward_f32(buf, 1, 4, HeadLayout{1, 1, 7}), pylon::Error);
  EXPECT_THROW(forward_f32(buf, 1, 4, HeadLayout{1, 1, 64}, 1), pylon::Error);  // out 4-byte aligned
}

TEST(CudaAttentionFp32Args, RunsAnyEvenHeadDim) {
  PYLON_SKIP_WITHOUT_CUDA();
  DeviceArray<float> buf(1 << 16);
  EXPECT_NO_THROW(forward_f32(buf, 1, 4, HeadLayout{1, 1, 96}));
  EXPECT_NO_THROW(forward_f32(buf, 1, 4, HeadLayout{2, 1, 12}));
  PYLON_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace pylon::cuda
