// IEEE fp16 <-> fp32 conversion on the CPU (round to nearest even), for weights stored as f16.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace pylon {

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, nan
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  const float mag = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal, exact
  return sign ? -mag : mag;
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // inf, nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
  if (abs < 0x38800000u) {  // below 2^-14: subnormal f16, value = m * 2^-24
    const float m = std::nearbyint(std::bit_cast<float>(abs) * 16777216.0f);  // ties to even
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(m));
  }
  // Normal: drop 13 mantissa bits with round to nearest even (a carry may bump the exponent).
  const uint32_t rebased = abs - (112u << 23);
  const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

}  // namespace pylon
