// The op test harness (ggml's test-backend-ops is the model): one table per backend
// (ops/cpu/cpu_op_table.cpp, ops/cuda/cuda_op_table.cpp, ops/vulkan/vulkan_op_table.cpp) whose
// rows are op × dtype × shape × variant. Each row runs its op on its backend and hands every output
// with its reference (src/ops/cpu, the specification, or for a fused or faster path its unfused
// oracle) to the one checker, support/op_check.h. Runners fill outputs with NaN before the op
// (the backends' poison helpers), so an element the kernel never writes fails.
//
// Adding an op: its runner (inputs, the backend call, the reference, run.expect_close for each
// output) in the backend's *_cases.cpp, declared in its *_cases.h, and one row per backend in
// that backend's table.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "support/op_check.h"

namespace pylon::testing {

enum class Backend { cpu, cuda, vulkan };
const char* backend_name(Backend b);

class OpRun;

// One row of a backend's table.
struct OpCase {
  std::string op;       // as src/ops names it: "rmsnorm_backward", "matmul"
  Backend backend = Backend::cpu;
  DType dtype = DType::f32;  // what the row exercises: the activations' dtype (CUDA), the weights' (Vulkan)
  std::string shape;    // "N=7 C=2051"
  std::string variant;  // the path or option the row picks: "unaligned", "gemv_subgroup 3x1"; may be empty
  std::function<void(const OpRun&)> run;
  std::function<std::string()> skip;  // why this machine cannot run the row ("" or unset: it can)
};

// Handed to a row's run: compares its outputs under the row's label (CheckLabel).
class OpRun {
 public:
  explicit OpRun(const OpCase& c) : case_(c) {}

  // Every element of out against ref rounded to out_dtype, within tol (+ slack[i]).
  template <typename Out, typename Ref>
  void expect_close(const std::string& output, const std::vector<Out>& out, const std::vector<Ref>& ref,
                    DType out_dtype, Tolerance tol, const std::vector<double>& slack = {}) const {
    ++checks_;
    if (const ::testing::AssertionResult r = all_close(label(output), out, ref, out_dtype, tol, slack); !r)
      ADD_FAILURE() << r.message();
  }
  // As above at torch.testing's tolerance for out_dtype.
  template <typename Out, typename Ref>
  void expect_close(const std::string& output, const std::vector<Out>& out, const std::vector<Ref>& ref,
                    DType out_dtype) const {
    expect_close(output, out, ref, out_dtype, torch_tolerance(out_dtype));
  }
  // The same bits (determinism, or a path that must agree bit for bit).
  template <typename T>
  void expect_bitwise(const std::string& output, const std::vector<T>& got, const std::vector<T>& want) const {
    ++checks_;
    if (const ::testing::AssertionResult r = bitwise_equal(label(output), got, want); !r) ADD_FAILURE() << r.message();
  }
  CheckLabel label(const std::string& output) const;
  int checks() const { return checks_; }

 private:
  const OpCase& case_;
  mutable int checks_ = 0;
};

// "N=7 C=2051": the shape column from name/value pairs.
std::string shape_of(std::initializer_list<std::pair<const char*, long long>> dims);

// The gtest name of a row: op, dtype, shape and variant in letters, digits and underscores.
std::string op_case_name(const ::testing::TestParamInfo<OpCase>& info);
void PrintTo(const OpCase& c, std::ostream* os);

// The harness's one test, instantiated once per backend over its table:
//   INSTANTIATE_TEST_SUITE_P(Cuda, OpHarness, ::testing::ValuesIn(cuda_op_table()), op_case_name);
class OpHarness : public ::testing::TestWithParam<OpCase> {};

}  // namespace pylon::testing
