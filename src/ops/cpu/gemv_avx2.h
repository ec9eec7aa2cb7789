// One token (decode) or a few through weights in their stored encoding (f16, int8, int4 groups of
// 16k columns) on an x86 CPU with AVX2, FMA and F16C: a GEMV straight from the encoding, 8-16
// columns a step, rows over the OpenMP threads, each weight read once. cpu::linear (weight_view.h)
// takes it where gemv_avx2_serves.
#pragma once

#include <cstdint>

#include "ops/cpu/weight_view.h"

namespace pylon {

// Whether the GEMVs below serve W: this CPU has AVX2, FMA and F16C, and W is f16, int8, or int4 in
// groups of a multiple of 16 columns.
bool gemv_avx2_serves(const WeightView& w);
// y (W.rows) = x (W.cols) · Wᵀ, one token.
void gemv_avx2(float* y, const float* x, const WeightView& w);
// y (n, W.rows) = x (n, W.cols) · Wᵀ, up to 4 tokens a pass over W (each weight decoded once a pass).
void gemv_tokens_avx2(float* y, const float* x, int64_t n, const WeightView& w);

}  // namespace pylon
