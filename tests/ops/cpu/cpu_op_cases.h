// The CPU op rows' makers (cpu_op_cases.cpp), listed with their shapes in cpu_op_table.cpp: the
// optimised CPU kernels against the plain reference they must equal.
#pragma once

#include <cstdint>

#include "ops/op_harness.h"

namespace pylon::cpu::testing {

using ::pylon::testing::OpCase;

// y (n, rows) = x (n, cols) · Wᵀ over int8 rows / int4 groups of `group`, against dequantizing
// then the fp32 loop; n == 1 also through the GEMV, which must equal the GEMM bit for bit.
OpCase gemm_int8(int64_t n, int64_t rows, int64_t cols);
OpCase gemm_int4(int group, int64_t n, int64_t rows, int64_t cols);

}  // namespace pylon::cpu::testing
