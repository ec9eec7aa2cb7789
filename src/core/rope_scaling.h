// Rotary embeddings' frequency scaling, one definition for every backend: none, or Llama 3's
// (Hugging Face's rope_type "llama3"). With wavelength λ = 2π / inv_freq and L =
// original_max_positions: λ < L / high_freq_factor keeps inv_freq; λ > L / low_freq_factor divides it
// by factor; between, s = (L / λ − low_freq_factor) / (high_freq_factor − low_freq_factor) blends
// the two: (1 − s)·inv_freq / factor + s·inv_freq.
#pragma once

#if defined(__CUDACC__)
#define PYLON_HOST_DEVICE __host__ __device__
#else
#define PYLON_HOST_DEVICE
#endif

namespace pylon {

struct RopeScaling {
  float factor = 0;  // 0: none; else > 1
  float low_freq_factor = 1, high_freq_factor = 4;
  int original_max_positions = 8192;
  PYLON_HOST_DEVICE bool on() const { return factor > 0; }
};

// inv_freq = theta^(−2i/hd) after the scaling, in T's arithmetic (float or double).
template <typename T>
PYLON_HOST_DEVICE T scaled_inv_freq(T inv_freq, const RopeScaling& s) {
  if (!s.on()) return inv_freq;
  const T two_pi = T(6.283185307179586476925286766559);
  const T wavelength = two_pi / inv_freq, L = T(s.original_max_positions);
  if (wavelength < L / T(s.high_freq_factor)) return inv_freq;
  if (wavelength > L / T(s.low_freq_factor)) return inv_freq / T(s.factor);
  const T smooth = (L / wavelength - T(s.low_freq_factor)) / (T(s.high_freq_factor) - T(s.low_freq_factor));
  return (T(1) - smooth) * inv_freq / T(s.factor) + smooth * inv_freq;
}

}  // namespace pylon
