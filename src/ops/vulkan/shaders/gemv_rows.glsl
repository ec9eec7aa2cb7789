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
// GEMV_N rows per invocation (rows_dot, gemv_common.glsl), x's values for each word loaded once for
// all of them: llvmpipe gathers even a load that is the same for every lane, so x's fetches
// outnumbered the weights' two (f16) to eight (int4) times.
void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint sets = (pc.rows + GEMV_N - 1u) / GEMV_N, rounds = (sets + stride - 1u) / stride;
  for (uint k = 0u; k < rounds; ++k) {
    const uint q = gl_GlobalInvocationID.x + k * stride, r0 = min(q, sets - 1u) * GEMV_N;
    for (uint i = 0u; i < GEMV_N; ++i) g_rows[i] = min(r0 + i, pc.rows - 1u);
    sum_sq = 0.0;
    rows_dot(0u, 1u);
#ifndef NO_NORM
    const float rstd = pc.norm != 0u ? 1.0 / sqrt(sum_sq / float(pc.cols) + pc.norm_eps) : 1.0;
#else
    const float rstd = 1.0;
#endif
    if (q < sets)
      for (uint i = 0u; i < GEMV_N; ++i)
        if (r0 + i < pc.rows) store_y(0u, r0 + i, g_acc[i] * rstd);
  }
}
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
