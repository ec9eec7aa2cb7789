// The attention entry points refuse head dims they have no kernel for (argument checks, not
// comparisons: the kernels' rows are in cuda_op_table.cpp).
#include <gtest/gtest.h>

#include "core/error.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_fp32.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;

TEST(CudaAttentionArgs, RejectsUnsupportedHeadDim) {
  PYLON_SKIP_WITHOUT_CUDA();
  DeviceBuffer buf(1 << 20);
  EXPECT_THROW(attention_forward(buf.as<bf16>(), buf.as<float>(), buf.as<bf16>(), 1, 4, 96, 1, false, nullptr),
               pylon::Error);
}

TEST(CudaAttentionFp32Args, RejectsUnsupportedHeadDim) {
  PYLON_SKIP_WITHOUT_CUDA();
  DeviceArray<float> buf(1 << 16);
  EXPECT_THROW(attention_forward(buf.get(), buf.get(), buf.get(), 1, 4, 96, 1, false, nullptr), pylon::Error);
}

}  // namespace
}  // namespace pylon::cuda
