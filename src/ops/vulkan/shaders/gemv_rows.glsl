// The body of gemv_rows.comp and gemv_rows_norm.comp: y (ldy) [+]= x (cols) · W(chunk)ᵀ with one
// invocation per weight row, walking its row word by word (gemv_common.glsl decodes). All
// invocations of a subgroup read the same x at the same time, so a CPU device loads x once for the
// subgroup instead of gathering it per lane (llvmpipe turns lane-varying loads into per-lane scalar
// loads); only the weights are gathered. On a GPU this layout would not coalesce: gemv_subgroup is
// the GPU's. The row index is clamped rather than returned early so that every invocation stays in
// step.
layout(local_size_x = 64) in;
#include "matmul_common.glsl"
#include "gemv_common.glsl"

#ifdef GEMV_N
// GEMV_N rows per invocation, x's values for each word loaded once for all of them:
// llvmpipe gathers even a load that is the same for every lane, so x's fetches outnumbered the
// weights' two (f16) to eight (int4) times. The word path only (row_dot's condition); else one
// row_dot per row.
#define N GEMV_N
void rows_dot(uint r0, inout float acc[N]) {
  uint rs[N];
  for (uint i = 0u; i < N; ++i) rs[i] = min(r0 + i, pc.rows - 1u), acc[i] = 0.0;
  if (!whole_words()) {
    for (uint i = 0u; i < N; ++i) acc[i] = row_dot(rs[i], 0u, 1u);
    return;
  }
  const uint per_row = row_bytes() / 16u;
  if (pc.wtype == WT_F32) {
    for (uint v = 0u; v < per_row; ++v) {
      const vec4 xw0 = x4(v * 4u);
      for (uint i = 0u; i < N; ++i) {
        const uvec4 q = LOAD_W4(rs[i] * per_row + v);
        acc[i] += WORD_DOT_F32(q, XR);
      }
    }
  } else if (pc.wtype == WT_F16) {
    for (uint v = 0u; v < per_row; ++v) {
      const vec4 xw0 = x4(v * 8u), xw1 = x4(v * 8u + 4u);
      for (uint i = 0u; i < N; ++i) {
        const uvec4 q = LOAD_W4(rs[i] * per_row + v);
        acc[i] += WORD_DOT_F16(q, XR);
      }
    }
  } else if (pc.wtype == WT_INT8) {
    for (uint v = 0u; v < per_row; ++v) {
      const uint c = v * 16u;
      const vec4 xw0 = x4(c), xw1 = x4(c + 4u), xw2 = x4(c + 8u), xw3 = x4(c + 12u);
      for (uint i = 0u; i < N; ++i) {
        const uvec4 q = LOAD_W4(rs[i] * per_row + v);
        acc[i] += WORD_DOT_I8(q, XR);
      }
    }
    for (uint i = 0u; i < N; ++i) acc[i] *= scale_at(pc.row_base + rs[i]);
  } else {  // int4: a word's 32 columns lie in one group (group % 32 == 0)
    const uint groups = int4_groups(), words_per_group = pc.group / 32u, shift = uint(findLSB(words_per_group));
    const bool pow2 = (words_per_group & (words_per_group - 1u)) == 0u;
    for (uint v = 0u; v < per_row; ++v) {
      const uint c = v * 32u, g = pow2 ? v >> shift : v / words_per_group;
      const vec4 xw0 = x4(c), xw1 = x4(c + 4u), xw2 = x4(c + 8u), xw3 = x4(c + 12u);
      const vec4 xw4 = x4(c + 16u), xw5 = x4(c + 20u), xw6 = x4(c + 24u), xw7 = x4(c + 28u);
      for (uint i = 0u; i < N; ++i) {
        const uvec4 q = LOAD_W4(rs[i] * per_row + v);
        acc[i] += WORD_DOT_I4(q, XR) * scale_at((pc.row_base + rs[i]) * groups + g);
      }
    }
  }
}

#ifdef GEMM_T
// Prefill on CPU devices (gemm_rows_texel): the same walk for GEMM_T tokens at once, tokens
// GEMM_T·y .. of workgroup row y (clamped to the last; stored only below n), each weight word
// fetched and decoded once for all of them. Whole words only (Ops::matmul takes gemm_tiled else).
const uint T = GEMM_T;
// The weights' type (WT_*), a specialization constant: one decoding a pipeline, since llvmpipe's
// compile time grows with the code (all four took seconds each time a context built it).
layout(constant_id = 0) const uint GEMM_WTYPE = WT_F16;
void rows_dot_tokens(uint r0, uint m0, inout float acc[N * T]) {
  uint rs[N], xo[T];
  for (uint i = 0u; i < N; ++i) rs[i] = min(r0 + i, pc.rows - 1u);
  for (uint t = 0u; t < T; ++t) xo[t] = min(m0 + t, pc.n - 1u) * pc.cols;  // token t's x, from x_off
  for (uint k = 0u; k < N * T; ++k) acc[k] = 0.0;
  const uint per_row = row_bytes() / 16u;
  if (GEMM_WTYPE == WT_F32) {
    for (uint v = 0u; v < per_row; ++v) {
      vec4 xa[T];
      for (uint t = 0u; t < T; ++t) xa[t] = x4(xo[t] + v * 4u);
      for (uint i = 0u; i < N; ++i) {
        const vec4 w = uintBitsToFloat(LOAD_W4(rs[i] * per_row + v));
        for (uint t = 0u; t < T; ++t) acc[i * T + t] += dot(w, xa[t]);
      }
    }
  } else if (GEMM_WTYPE == WT_F16) {
    for (uint v = 0u; v < per_row; ++v) {
      vec4 xa[2u * T];
      for (uint t = 0u; t < T; ++t) xa[2u * t] = x4(xo[t] + v * 8u), xa[2u * t + 1u] = x4(xo[t] + v * 8u + 4u);
      for (uint i = 0u; i < N; ++i) {
        const uvec4 q = LOAD_W4(rs[i] * per_row + v);
        const vec4 w0 = f16x4(q.x, q.y), w1 = f16x4(q.z, q.w);
        for (uint t = 0u; t < T; ++t) acc[i * T + t] += dot(w0, xa[2u * t]) + dot(w1, xa[2u * t + 1u]);
      }
    }
  } else if (GEMM_WTYPE == WT_INT8) {
    for (uint v = 0u; v < per_row; ++v) {
      vec4 xa[4u * T];
      for (uint t = 0u; t < T; ++t)
        for (uint j = 0u; j < 4u; ++j) xa[4u * t + j] = x4(xo[t] + v * 16u + 4u * j);
      for (uint i = 0u; i < N; ++i) {
        const uvec4 q = LOAD_W4(rs[i] * per_row + v);
        const vec4 w0 = i8x4(q.x), w1 = i8x4(q.y), w2 = i8x4(q.z), w3 = i8x4(q.w);
        for (uint t = 0u; t < T; ++t)
          acc[i * T + t] += dot(w0, xa[4u * t]) + dot(w1, xa[4u * t + 1u]) + dot(w2, xa[4u * t + 2u]) +
                            dot(w3, xa[4u * t + 3u]);
      }
    }
    for (uint i = 0u; i < N; ++i) {
      const float sc = scale_at(pc.row_base + rs[i]);
      for (uint t = 0u; t < T; ++t) acc[i * T + t] *= sc;
    }
  } else {  // int4: a word's 32 columns lie in one group (group % 32 == 0)
    const uint groups = int4_groups(), words_per_group = pc.group / 32u;
    for (uint v = 0u; v < per_row; ++v) {
      vec4 xa[8u * T];
      for (uint t = 0u; t < T; ++t)
        for (uint j = 0u; j < 8u; ++j) xa[8u * t + j] = x4(xo[t] + v * 32u + 4u * j);
      for (uint i = 0u; i < N; ++i) {
        const uvec4 q = LOAD_W4(rs[i] * per_row + v);
        const float sc = scale_at((pc.row_base + rs[i]) * groups + v / words_per_group);
        const vec4 w0 = i4lo(q.x) * sc, w1 = i4hi(q.x) * sc, w2 = i4lo(q.y) * sc, w3 = i4hi(q.y) * sc;
        const vec4 w4 = i4lo(q.z) * sc, w5 = i4hi(q.z) * sc, w6 = i4lo(q.w) * sc, w7 = i4hi(q.w) * sc;
        for (uint t = 0u; t < T; ++t)
          acc[i * T + t] += dot(w0, xa[8u * t]) + dot(w1, xa[8u * t + 1u]) + dot(w2, xa[8u * t + 2u]) +
                            dot(w3, xa[8u * t + 3u]) + dot(w4, xa[8u * t + 4u]) + dot(w5, xa[8u * t + 5u]) +
                            dot(w6, xa[8u * t + 6u]) + dot(w7, xa[8u * t + 7u]);
      }
    }
  }
}

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x, m0 = gl_WorkGroupID.y * T;
  const uint sets = (pc.rows + N - 1u) / N, rounds = (sets + stride - 1u) / stride;
  for (uint k = 0u; k < rounds; ++k) {
    const uint q = gl_GlobalInvocationID.x + k * stride, r0 = min(q, sets - 1u) * N;
    float acc[N * T];
    rows_dot_tokens(r0, m0, acc);
    if (q < sets)
      for (uint i = 0u; i < N; ++i)
        for (uint t = 0u; t < T; ++t)
          if (r0 + i < pc.rows && m0 + t < pc.n) store_y(m0 + t, r0 + i, acc[i * T + t]);
  }
}
#else
void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint sets = (pc.rows + N - 1u) / N, rounds = (sets + stride - 1u) / stride;
  for (uint k = 0u; k < rounds; ++k) {
    const uint q = gl_GlobalInvocationID.x + k * stride, r0 = min(q, sets - 1u) * N;
    float acc[N];
    rows_dot(r0, acc);
    if (q < sets)
      for (uint i = 0u; i < N; ++i)
        if (r0 + i < pc.rows) store_y(0u, r0 + i, acc[i]);
  }
}
#endif
#else
void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint rounds = (pc.rows + stride - 1u) / stride;
  for (uint k = 0u; k < rounds; ++k) {
    const uint want = gl_GlobalInvocationID.x + k * stride, r = min(want, pc.rows - 1u);
    sum_sq = 0.0;
    float sum = row_dot(r, 0u, 1u);
#ifndef NO_NORM
    if (pc.norm != 0u) sum *= 1.0 / sqrt(sum_sq / float(pc.cols) + pc.norm_eps);
#endif
    if (want < pc.rows) store_y(0u, r, sum);
  }
}
#endif
