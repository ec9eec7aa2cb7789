// gemm_coopmat2's split K, second half: Y (n, ldy) [+]= act(Σ_z P[z] [+ bias]), P the SPLITS
// workgroup layers' raw sums, (SPLITS, n, rows) fp32 in the X binding; bias, SiLU and the
// residual add as every matmul does them (matmul_common.glsl's store_y). An invocation an element.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint SPLITS = 2u;
#include "matmul_common.glsl"

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint count = pc.n * pc.rows;
  if (i >= count) return;
  float v = 0.0;
  for (uint z = 0u; z < SPLITS; ++z) v += X[z * count + i];
  store_y(i / pc.rows, i % pc.rows, v);
}
