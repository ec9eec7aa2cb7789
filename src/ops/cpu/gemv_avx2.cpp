// The AVX2 GEMVs of gemv_avx2.h: x86 only (compiled for its instructions, used where the CPU has them).
#include "ops/cpu/gemv_avx2.h"

#include <algorithm>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/half.h"
#include "ops/cpu/quantized.h"

namespace pylon {

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

#define PYLON_GEMV_AVX2 __attribute__((target("avx2,fma,f16c")))

PYLON_GEMV_AVX2 float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
// 8 int8 weights (8 bytes at q) as floats.
PYLON_GEMV_AVX2 __m256 int8x8(const int8_t* q) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
}
// x as gemv_avx2's int4 rows want it. A run of 16 columns is 8 bytes, each a column's nibble in its
// low half and the next one's in its high half; read as q + 8 (sign bits flipped), the low nibbles meet
// x's even columns of the run and the high ones its odd columns. paired (cols): x's columns in that
// order, run by run (the runs that lie whole in a group); group_sums: Σ x over each group's runs,
// for the 8 · scale · Σx that the flipped reading adds. The storage is the calling thread's, one per
// slot (a token of a gemv_tokens_avx2 pass), kept between calls (no allocation a token once grown).
constexpr int kTokensPerPass = 4;  // gemv_tokens_avx2's tokens a pass over W
struct Int4Columns {
  const float* x = nullptr;
  const float* paired = nullptr;
  const float* group_sums = nullptr;
  Int4Columns() = default;
  Int4Columns(const float* x_, const WeightView& w, int slot = 0) : x(x_) {
    static thread_local std::vector<float> paired_stores[kTokensPerPass], sums_stores[kTokensPerPass];
    std::vector<float>& paired_store = paired_stores[slot];
    std::vector<float>& sums_store = sums_stores[slot];
    const int64_t groups = int4_groups(w.cols, w.group_size);
    paired_store.assign(x_, x_ + w.cols);
    sums_store.assign(static_cast<size_t>(groups), 0.0f);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * w.group_size, end = std::min(w.cols, begin + w.group_size);
      for (int64_t c = begin; c + 16 <= end; c += 16)
        for (int64_t j = 0; j < 8; ++j) {
          paired_store[c + j] = x[c + 2 * j], paired_store[c + 8 + j] = x[c + 2 * j + 1];
          sums_store[g] += x[c + 2 * j] + x[c + 2 * j + 1];
        }
    }
    paired = paired_store.data(), group_sums = sums_store.data();
  }
};

// Row r of int4 W times NT tokens' x (xc[t]), groups first .. of it, added to out[t]: each group's
// runs of 16 columns decoded once, their products summed in a vector a token, times the group's
// scale; the columns past the group's last whole run through the scalar decoding.
template <int NT>
PYLON_GEMV_AVX2 void int4_groups_dots(const WeightView& w, int64_t r, const Int4Columns* xc, int64_t first,
                                      float* out) {
  const int64_t cols = w.cols, groups = int4_groups(cols, w.group_size);
  const uint8_t* row = static_cast<const uint8_t*>(w.values) + r * int4_row_bytes(cols);
  const __m256i low = _mm256_set1_epi32(15), flip = _mm256_set1_epi32(0x88);
  __m256 acc[NT];
  float tail[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps(), tail[t] = 0;
  for (int64_t g = first; g < groups; ++g) {
    const int64_t begin = g * w.group_size, end = std::min(cols, begin + w.group_size);
    const int64_t at = r * groups + g;
    const float scale = w.scale_dtype == EdgeDType::f16 ? _cvtsh_ss(static_cast<const uint16_t*>(w.scales)[at])
                                                        : static_cast<const float*>(w.scales)[at];
    __m256 a[NT];
    for (int t = 0; t < NT; ++t) a[t] = _mm256_setzero_ps();
    int64_t c = begin;
    for (; c + 16 <= end; c += 16) {  // 8 bytes, each nibble's sign bit flipped (q + 8)
      const __m256i bytes = _mm256_xor_si256(
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 2))), flip);
      const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(bytes, low));
      const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4));
      for (int t = 0; t < NT; ++t) {
        a[t] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(xc[t].paired + c), a[t]);
        a[t] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(xc[t].paired + c + 8), a[t]);
      }
    }
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm256_fmadd_ps(a[t], _mm256_set1_ps(scale), acc[t]);
      tail[t] -= 8.0f * scale * xc[t].group_sums[g];  // the runs' nibbles were read as q + 8
    }
    for (; c < end; ++c) {
      const float v = static_cast<float>(int4_value(row, c)) * scale;
      for (int t = 0; t < NT; ++t) tail[t] += v * xc[t].x[c];
    }
  }
  for (int t = 0; t < NT; ++t) out[t] += sum8(acc[t]) + tail[t];
}

// Row r of int4 W times x (Int4Columns). Groups of 32 (the edge file's default) eight at a time:
// their scales and their 8 · scale · Σx as vectors, each group one 16-byte load (fewer instructions
// a weight: this is bound by them, not by memory, on 2 SMT threads of one core); the rest, and other
// group sizes, through int4_groups_dots.
PYLON_GEMV_AVX2 float int4_row_dot_avx2(const WeightView& w, int64_t r, const Int4Columns& xc) {
  float rest = 0;
  if (w.group_size != 32) {
    int4_groups_dots<1>(w, r, &xc, 0, &rest);
    return rest;
  }
  const int64_t groups = int4_groups(w.cols, 32), whole = w.cols / 32;
  const uint8_t* row = static_cast<const uint8_t*>(w.values) + r * int4_row_bytes(w.cols);
  const __m256i low = _mm256_set1_epi32(15);
  const __m128i flip = _mm_set1_epi8(static_cast<char>(0x88));
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), corr = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= whole; g += 8) {
    const int64_t at = r * groups + g;
    const __m256 scales =
        w.scale_dtype == EdgeDType::f16
            ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w.scales) + at)))
            : _mm256_loadu_ps(static_cast<const float*>(w.scales) + at);
    corr = _mm256_fmadd_ps(scales, _mm256_loadu_ps(xc.group_sums + g), corr);
    alignas(32) float scale[8];
    _mm256_store_ps(scale, scales);
    for (int k = 0; k < 8; k += 2)  // two groups a step, into the two accumulators
      for (int j = 0; j < 2; ++j) {
        const int64_t c = (g + k + j) * 32;
        const __m128i b = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 2)), flip);
        const __m256i r0 = _mm256_cvtepu8_epi32(b), r1 = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(b, b));
        __m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(r0, low)), _mm256_loadu_ps(xc.paired + c));
        __m256 h = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(r1, low)), _mm256_loadu_ps(xc.paired + c + 16));
        a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(r0, 4)), _mm256_loadu_ps(xc.paired + c + 8), a);
        h = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(r1, 4)), _mm256_loadu_ps(xc.paired + c + 24), h);
        __m256& acc = j == 0 ? acc0 : acc1;
        acc = _mm256_fmadd_ps(_mm256_add_ps(a, h), _mm256_set1_ps(scale[k + j]), acc);
      }
  }
  if (g < groups) int4_groups_dots<1>(w, r, &xc, g, &rest);
  return sum8(_mm256_add_ps(acc0, acc1)) - 8.0f * sum8(corr) + rest;
}

// x (cols) · row r of W, read in its encoding, 8 or 16 columns at a time, the columns past the last
// run (and int4 groups' ends) through the scalar decoding. xc: x for int4 rows (else unused).
PYLON_GEMV_AVX2 float row_dot_avx2(const WeightView& w, int64_t r, const float* x, const Int4Columns& xc) {
  const int64_t cols = w.cols;
  switch (w.dtype) {
    case EdgeDType::f16: {
      const uint16_t* row = static_cast<const uint16_t*>(w.values) + r * cols;
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      int64_t c = 0;
      for (; c + 16 <= cols; c += 16) {
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c))),
                             _mm256_loadu_ps(x + c), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c + 8))),
                             _mm256_loadu_ps(x + c + 8), a1);
      }
      float s = sum8(_mm256_add_ps(a0, a1));
      for (; c < cols; ++c) s += half_to_float(row[c]) * x[c];
      return s;
    }
    case EdgeDType::int8: {
      const int8_t* row = static_cast<const int8_t*>(w.values) + r * cols;
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      int64_t c = 0;
      for (; c + 16 <= cols; c += 16) {
        a0 = _mm256_fmadd_ps(int8x8(row + c), _mm256_loadu_ps(x + c), a0);
        a1 = _mm256_fmadd_ps(int8x8(row + c + 8), _mm256_loadu_ps(x + c + 8), a1);
      }
      float s = sum8(_mm256_add_ps(a0, a1));
      for (; c < cols; ++c) s += static_cast<float>(row[c]) * x[c];
      return s * static_cast<const float*>(w.scales)[r];
    }
    default:
      return int4_row_dot_avx2(w, r, xc);
  }
}

// Row r of W times NT tokens' x (token t at x + t·cols; int4: xc[t]) into out[t], each 16-column
// step of the row decoded once for all of them; the columns past the last whole step through the
// scalar decoding. (One token takes row_dot_avx2, whose two sums a row keep its FMAs independent.)
template <int NT>
PYLON_GEMV_AVX2 void row_dots_tokens_avx2(const WeightView& w, int64_t r, const float* x, const Int4Columns* xc,
                                          float* out) {
  if (w.dtype == EdgeDType::int4) {
    for (int t = 0; t < NT; ++t) out[t] = 0;
    int4_groups_dots<NT>(w, r, xc, 0, out);
    return;
  }
  const int64_t cols = w.cols;
  const bool f16 = w.dtype == EdgeDType::f16;  // else int8
  const uint16_t* h = static_cast<const uint16_t*>(w.values) + r * cols;
  const int8_t* q = static_cast<const int8_t*>(w.values) + r * cols;
  __m256 acc[NT];
  float tail[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps(), tail[t] = 0;
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m256 w0 = f16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + c))) : int8x8(q + c);
    const __m256 w1 =
        f16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + c + 8))) : int8x8(q + c + 8);
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * cols + c), acc[t]);
      acc[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * cols + c + 8), acc[t]);
    }
  }
  for (; c < cols; ++c) {
    const float v = f16 ? half_to_float(h[c]) : static_cast<float>(q[c]);
    for (int t = 0; t < NT; ++t) tail[t] += v * x[t * cols + c];
  }
  const float scale = f16 ? 1.0f : static_cast<const float*>(w.scales)[r];
  for (int t = 0; t < NT; ++t) out[t] = (sum8(acc[t]) + tail[t]) * scale;
}

}  // namespace

// One token: y (W.rows) = x (W.cols) · Wᵀ, each weight read once in its encoding (no fp32 tile),
// rows over the OpenMP threads. int4 needs groups of a multiple of 16 columns (whole runs).
PYLON_GEMV_AVX2 void gemv_avx2(float* y, const float* x, const WeightView& w) {
  const Int4Columns xc = w.dtype == EdgeDType::int4 ? Int4Columns(x, w) : Int4Columns{};
#pragma omp parallel for schedule(static) if (w.rows * w.cols >= (1 << 16))
  for (int64_t r = 0; r < w.rows; ++r) y[r] = row_dot_avx2(w, r, x, xc);
}

// A few tokens: y (n, W.rows) = x (n, W.cols) · Wᵀ, up to 4 tokens a pass over W (each weight
// decoded once a pass), rows over the OpenMP threads. Where gemv_avx2_serves(W).
PYLON_GEMV_AVX2 void gemv_tokens_avx2(float* y, const float* x, int64_t n, const WeightView& w) {
  for (int64_t t0 = 0; t0 < n; t0 += kTokensPerPass) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokensPerPass, n - t0));
    const float* xt = x + t0 * w.cols;
    Int4Columns xc[kTokensPerPass];
    if (w.dtype == EdgeDType::int4)
      for (int t = 0; t < nt; ++t) xc[t] = Int4Columns(xt + t * w.cols, w, t);
#pragma omp parallel for schedule(static) if (w.rows * w.cols >= (1 << 16))
    for (int64_t r = 0; r < w.rows; ++r) {
      float out[kTokensPerPass];
      switch (nt) {
        case 1: row_dots_tokens_avx2<1>(w, r, xt, xc, out); break;
        case 2: row_dots_tokens_avx2<2>(w, r, xt, xc, out); break;
        case 3: row_dots_tokens_avx2<3>(w, r, xt, xc, out); break;
        default: row_dots_tokens_avx2<4>(w, r, xt, xc, out); break;
      }
      for (int t = 0; t < nt; ++t) y[(t0 + t) * w.rows + r] = out[t];
    }
  }
}
#else
// Not x86: gemv_avx2_serves is false, so these are never called.
void gemv_avx2(float*, const float*, const WeightView&) { PYLON_ASSERT(false, "no AVX2 GEMV on this CPU"); }
void gemv_tokens_avx2(float*, const float*, int64_t, const WeightView&) {
  PYLON_ASSERT(false, "no AVX2 GEMV on this CPU");
}
#endif

// Whether gemv_avx2 serves W: an x86 CPU with AVX2, FMA and F16C; f16, int8, or int4 in groups of 16k.
bool gemv_avx2_serves(const WeightView& w) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return cpu && (w.dtype == EdgeDType::f16 || w.dtype == EdgeDType::int8 ||
                 (w.dtype == EdgeDType::int4 && w.group_size % 16 == 0));
#else
  (void)w;
  return false;
#endif
}

}  // namespace pylon
