// Size arithmetic that cannot wrap: products and sums of counts in int64, an error naming what
// overflowed instead of a wrapped (signed-overflow UB) or truncated value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "core/error.h"

namespace pylon {

// a * b, or pylon::Error "WHAT overflows a 64-bit integer".
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  PYLON_CHECK(!__builtin_mul_overflow(a, b, &r), what, " overflows a 64-bit integer (", a, " x ", b, ")");
  return r;
}
inline int64_t checked_mul(std::initializer_list<int64_t> factors, std::string_view what) {
  int64_t r = 1;
  for (int64_t f : factors) r = checked_mul(r, f, what);
  return r;
}
inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  PYLON_CHECK(!__builtin_add_overflow(a, b, &r), what, " overflows a 64-bit integer (", a, " + ", b, ")");
  return r;
}

}  // namespace pylon
