// The one element-wise check of the op tests (shared/STYLE.md practice 1): every element of an
// output against its reference, |out − ref| <= atol + rtol·|ref| (+ slack[i] where a case states
// one), the reference first rounded to the output's dtype. NaN or Inf in the output fails; a NaN
// reference is a broken test and fails too. A failure names the op, backend, dtype, shape and
// variant, the output, the first and the worst element's index, value and reference.
// Host only: no CUDA or Vulkan header (CUDA tests hand their bf16 outputs over as floats).
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/half.h"

namespace pylon::testing {

enum class DType { f64, f32, bf16, f16, int8, int4 };

inline const char* dtype_name(DType d) {
  switch (d) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::int8: return "int8";
    case DType::int4: return "int4";
  }
  return "?";
}

// |out − ref| <= atol + rtol·|ref|. Written with the names, Tolerance{.rtol = .., .atol = ..}, so
// that no call can swap them.
struct Tolerance {
  double rtol = 0, atol = 0;
};
inline constexpr Tolerance kExact{};

// torch.testing.assert_close's defaults for an output of dtype d; integer encodings compare exactly.
constexpr Tolerance torch_tolerance(DType d) {
  switch (d) {
    case DType::bf16: return {.rtol = 1.6e-2, .atol = 1e-5};
    case DType::f16: return {.rtol = 1e-3, .atol = 1e-5};
    case DType::f32: return {.rtol = 1.3e-6, .atol = 1e-5};
    case DType::f64: return {.rtol = 1e-7, .atol = 1e-7};
    case DType::int8:
    case DType::int4: return kExact;
  }
  return kExact;
}

// fp32 -> bf16 -> fp32, round to nearest even (what __float2bfloat16 does); NaN stays NaN.
inline float round_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return f;
  x += 0x7fffu + ((x >> 16) & 1u);
  return std::bit_cast<float>(x & 0xffff0000u);
}

// x rounded to dtype d (an output's dtype; integer encodings are never outputs and stay as they are).
inline double round_to(DType d, double x) {
  switch (d) {
    case DType::f32: return static_cast<float>(x);
    case DType::bf16: return round_to_bf16(static_cast<float>(x));
    case DType::f16: return half_to_float(float_to_half(static_cast<float>(x)));
    default: return x;
  }
}

// Which comparison this is, for its messages: "rmsnorm_backward dw [cuda bf16 N=7 C=2051 residual]".
struct CheckLabel {
  std::string op, backend, dtype, shape, variant, output;
  std::string str() const {
    std::string s = op + " " + output + " [" + backend + " " + dtype + " " + shape;
    if (!variant.empty()) s += " " + variant;
    return s + "]";
  }
};

// x in at most 9 significant digits: "0.25", "1e-05".
inline std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

// Every element of out within tol of ref rounded to out_dtype (+ slack[i] where slack is given).
// Prints the largest error and the worst err / allowed ratio for the record.
template <typename Out, typename Ref>
::testing::AssertionResult all_close(const CheckLabel& what, const std::vector<Out>& out, const std::vector<Ref>& ref,
                                     DType out_dtype, Tolerance tol, const std::vector<double>& slack = {}) {
  static_assert(std::is_floating_point_v<Out> && std::is_floating_point_v<Ref>, "compare values, not encodings");
  if (out.size() != ref.size())
    return ::testing::AssertionFailure() << what.str() << ": " << out.size() << " values, the reference has "
                                         << ref.size();
  if (!slack.empty() && slack.size() != ref.size())
    return ::testing::AssertionFailure() << what.str() << ": " << slack.size() << " slacks for " << ref.size()
                                         << " values (a broken test)";
  size_t bad = 0, first = 0, worst = 0;
  double worst_ratio = -1, max_err = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double r = round_to(out_dtype, static_cast<double>(ref[i]));
    if (std::isnan(r))
      return ::testing::AssertionFailure() << what.str() << ": the reference is NaN at index " << i
                                           << " (a broken test)";
    const double o = static_cast<double>(out[i]), err = std::fabs(o - r);
    const double allowed = tol.atol + tol.rtol * std::fabs(r) + (slack.empty() ? 0.0 : slack[i]);
    const bool ok = err <= allowed;  // false for NaN; Inf fails unless the reference is the same Inf
    const double ratio = !ok ? std::numeric_limits<double>::infinity() : allowed > 0 ? err / allowed : 0.0;
    if (!ok && bad++ == 0) first = i;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
    if (!(err <= max_err)) max_err = err;
  }
  std::printf("[ max err  ] %s: |err| %.3g, worst err/allowed %.3g at %zu, over %zu values\n", what.str().c_str(),
              max_err, worst_ratio, worst, out.size());
  if (bad == 0) return ::testing::AssertionSuccess();
  auto element = [&](size_t i) {
    const double r = round_to(out_dtype, static_cast<double>(ref[i]));
    return "index " + std::to_string(i) + ": got " + format_number(static_cast<double>(out[i])) + ", reference " +
           format_number(r) + " (|err| " + format_number(std::fabs(static_cast<double>(out[i]) - r)) + ", allowed " +
           format_number(tol.atol + tol.rtol * std::fabs(r) + (slack.empty() ? 0.0 : slack[i])) + ")";
  };
  ::testing::AssertionResult fail = ::testing::AssertionFailure();
  fail << what.str() << ": " << bad << " of " << out.size() << " elements outside atol " << format_number(tol.atol)
       << " + rtol " << format_number(tol.rtol) << "·|ref|" << (slack.empty() ? "" : " + slack") << " (reference rounded to "
       << dtype_name(out_dtype) << "); first at " << element(first);
  if (worst != first) fail << "; worst at " << element(worst);
  return fail;
}

// The same bytes element for element (determinism: a second run, another path that must agree bit
// for bit). T is any trivially copyable element (float, CUDA's bf16).
template <typename T>
::testing::AssertionResult bitwise_equal(const CheckLabel& what, const std::vector<T>& got, const std::vector<T>& want) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what.str() << ": " << got.size() << " values, expected " << want.size();
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && differ++ == 0) first = i;
  if (differ == 0) return ::testing::AssertionSuccess();
  auto bits = [](const T& v) {
    std::string s = "0x";
    unsigned char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    for (size_t k = sizeof(T); k-- > 0;) {
      char h[3];
      std::snprintf(h, sizeof h, "%02x", b[k]);
      s += h;
    }
    return s;
  };
  return ::testing::AssertionFailure() << what.str() << ": " << differ << " of " << got.size()
                                       << " elements differ bitwise; first at index " << first << ": got "
                                       << bits(got[first]) << ", expected " << bits(want[first]);
}

}  // namespace pylon::testing
