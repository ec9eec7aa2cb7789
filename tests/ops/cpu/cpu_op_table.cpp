// The CPU table of the op harness: the optimised CPU kernels (quantized GEMM / GEMV) at odd sizes
// against the plain reference. A row per line; the makers are in cpu_op_cases.cpp.
#include <tuple>
#include <vector>

#include "ops/cpu/cpu_op_cases.h"

namespace pylon::cpu::testing {

using ::pylon::testing::OpHarness;

namespace {

std::vector<OpCase> cpu_op_table() {
  std::vector<OpCase> t;
  for (const auto& [n, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{1, 37, 53}, {3, 65, 129}, {7, 1, 31}})
    t.push_back(gemm_int8(n, rows, cols));
  for (const int group : {32, 64})
    for (const auto& [n, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{1, 37, 53}, {3, 65, 129}, {5, 2, 7}})
      t.push_back(gemm_int4(group, n, rows, cols));
  return t;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Cpu, OpHarness, ::testing::ValuesIn(cpu_op_table()), ::pylon::testing::op_case_name);

}  // namespace pylon::cpu::testing
