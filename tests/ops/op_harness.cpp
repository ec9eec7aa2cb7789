// The op harness's one test: run a row and require that it compared something.
#include "ops/op_harness.h"

#include <cctype>

namespace pylon::testing {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::cpu: return "cpu";
    case Backend::cuda: return "cuda";
    case Backend::vulkan: return "vulkan";
  }
  return "?";
}

CheckLabel OpRun::label(const std::string& output) const {
  return {case_.op, backend_name(case_.backend), dtype_name(case_.dtype), case_.shape, case_.variant, output};
}

std::string shape_of(std::initializer_list<std::pair<const char*, long long>> dims) {
  std::string s;
  for (const auto& [name, value] : dims) s += (s.empty() ? "" : " ") + std::string(name) + "=" + std::to_string(value);
  return s;
}

std::string op_case_name(const ::testing::TestParamInfo<OpCase>& info) {
  const OpCase& c = info.param;
  // "rmsnorm_forward bf16 N=7 C=2051 residual" -> rmsnorm_forward_bf16_N7_C2051_residual
  const std::string text = c.op + " " + dtype_name(c.dtype) + " " + c.shape + " " + c.variant;
  std::string name;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    const bool digit_next = i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (std::isalnum(static_cast<unsigned char>(ch))) name += ch;
    else if (ch == '-' && digit_next) name += "m";  // a negative value
    else if (ch == '.' && digit_next) name += "p";  // a decimal point
    else if (ch != '=' && !name.empty() && name.back() != '_') name += '_';
  }
  while (!name.empty() && name.back() == '_') name.pop_back();
  return name;
}

void PrintTo(const OpCase& c, std::ostream* os) {
  *os << c.op << " [" << backend_name(c.backend) << " " << dtype_name(c.dtype) << " " << c.shape
      << (c.variant.empty() ? "" : " ") << c.variant << "]";
}

TEST_P(OpHarness, MatchesReference) {
  const OpCase& c = GetParam();
  if (const std::string why = c.skip ? c.skip() : ""; !why.empty()) {
    GTEST_SKIP() << why;
  }
  const OpRun run(c);
  c.run(run);
  if (!IsSkipped() && !HasFatalFailure()) {
    EXPECT_GT(run.checks(), 0) << "the row compared no output";
  }
}

}  // namespace pylon::testing
