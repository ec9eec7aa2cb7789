// Prefill GEMM: Y (n, ldy) [+]= X (n, cols) · W(chunk)ᵀ. 64x64 output tiles, 256 threads each
// computing 4x4, K in steps of 16 through shared memory; weights dequantized to fp32 on load.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
#include "matmul_common.glsl"

const uint TM = 64u, TN = 64u, TK = 16u;
shared float As[TK][TM];  // X tile, k-major
shared float Bs[TK][TN];  // W tile, k-major

void main() {
  const uint tid = gl_LocalInvocationID.x, tx = tid % 16u, ty = tid / 16u;
  const uint n0 = gl_WorkGroupID.x * TN;  // weight rows (Y columns)
  const uint m0 = gl_WorkGroupID.y * TM;  // tokens
  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0;
  for (uint k0 = 0u; k0 < pc.cols; k0 += TK) {
    for (uint q = 0u; q < 4u; ++q) {
      const uint e = tid + 256u * q, row = e / TK, k = e % TK, c = k0 + k;
      As[k][row] = (m0 + row < pc.n && c < pc.cols) ? X[pc.x_off + (m0 + row) * pc.cols + c] : 0.0;
      Bs[k][row] = (n0 + row < pc.rows && c < pc.cols) ? w_at(n0 + row, c) : 0.0;
    }
    barrier();
    for (uint k = 0u; k < TK; ++k) {
      vec4 a = vec4(As[k][ty * 4u], As[k][ty * 4u + 1u], As[k][ty * 4u + 2u], As[k][ty * 4u + 3u]);
      vec4 b = vec4(Bs[k][tx * 4u], Bs[k][tx * 4u + 1u], Bs[k][tx * 4u + 2u], Bs[k][tx * 4u + 3u]);
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    barrier();
  }
  for (uint i = 0u; i < 4u; ++i)
    for (uint j = 0u; j < 4u; ++j) {
      const uint m = m0 + ty * 4u + i, r = n0 + tx * 4u + j;
      if (m < pc.n && r < pc.rows) store_y(m, r, acc[i][j]);
    }
}
