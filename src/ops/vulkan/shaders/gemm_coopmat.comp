// Prefill GEMM on cooperative matrices (VK_KHR_cooperative_matrix, fp16 x fp16 -> fp32,
// 16x16x16): Y (n, ldy) [+]= X (n, cols) · W(chunk)ᵀ. A workgroup of 4 subgroups of 32 owns a
// 64x64 output tile; subgroup s owns tokens 16s..16s+15 against all 64 weight rows (4 accumulators).
// Each K step of 32 stages X (rounded to fp16) and W (dequantized, rounded to fp16) in shared memory.
// The plain tiled GEMM is the oracle; fp16 rounding of both inputs sets the tolerance.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 128) in;
#include "matmul_common.glsl"

const uint TM = 64u, TN = 64u, TK = 32u, LDS = TK + 8u;  // +8 halves: fewer bank conflicts
shared float16_t As[TM * LDS];  // X tile, (token, k) row-major
shared float16_t Bs[TN * LDS];  // W tile, (weight row, k) row-major = B (k, n) column-major
shared float Cs[TM * TN];

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID;
  const uint n0 = gl_WorkGroupID.x * TN, m0 = gl_WorkGroupID.y * TM;
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[4];
  for (int j = 0; j < 4; ++j) acc[j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
  for (uint k0 = 0u; k0 < pc.cols; k0 += TK) {
    for (uint e = tid; e < TM * TK; e += 128u) {
      const uint row = e / TK, k = e % TK, c = k0 + k;
      As[row * LDS + k] = float16_t((m0 + row < pc.n && c < pc.cols) ? X[pc.x_off + (m0 + row) * pc.cols + c] : 0.0);
      Bs[row * LDS + k] = float16_t((n0 + row < pc.rows && c < pc.cols) ? w_at(n0 + row, c) : 0.0);
    }
    barrier();
    for (uint kk = 0u; kk < TK; kk += 16u) {
      coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a;
      coopMatLoad(a, As, sg * 16u * LDS + kk, LDS, gl_CooperativeMatrixLayoutRowMajor);
      for (uint j = 0u; j < 4u; ++j) {
        coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b;
        coopMatLoad(b, Bs, j * 16u * LDS + kk, LDS, gl_CooperativeMatrixLayoutColumnMajor);
        acc[j] = coopMatMulAdd(a, b, acc[j]);
      }
    }
    barrier();
  }
  for (uint j = 0u; j < 4u; ++j)
    coopMatStore(acc[j], Cs, sg * 16u * TN + j * 16u, TN, gl_CooperativeMatrixLayoutRowMajor);
  barrier();
  for (uint e = tid; e < TM * TN; e += 128u) {
    const uint m = m0 + e / TN, r = n0 + e % TN;
    if (m < pc.n && r < pc.rows) store_y(m, r, Cs[e]);
  }
}
