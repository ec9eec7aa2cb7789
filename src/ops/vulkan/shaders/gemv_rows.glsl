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
