// Counter-based random numbers: value i of stream s under seed k is a pure function of (k, s, i),
// so any shard of any parameter can be initialised alone, identically at every world size.
#pragma once

#include <cmath>
#include <cstdint>

namespace pylon {

// SplitMix64 finaliser: a bijective 64-bit mix with good avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// 64 random bits at (seed, stream, index).
constexpr uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

// Uniform in [0, 1) with 24 bits of resolution (exactly representable in float).
inline double random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<double>(random_bits(seed, stream, index) >> 40) * (1.0 / 16777216.0);
}

// Standard normal by Box-Muller over two independent uniforms of the same element.
inline double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t bits = random_bits(seed, stream, index);
  const double u1 = (static_cast<double>(bits >> 40) + 1.0) * (1.0 / 16777217.0);  // (0, 1)
  const double u2 = static_cast<double>(bits & 0xFFFFFFull) * (1.0 / 16777216.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// A small sequential generator for sampling (xorshift64*), seeded through mix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(mix64(seed) | 1) {}
  uint64_t next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1Dull;
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0,1)
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

}  // namespace pylon
