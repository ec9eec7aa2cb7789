// Shared by the GEMV and GEMMs: Y (n, ldy) [+]= act(X (n, cols) · W(chunk)ᵀ [+ bias]), W an
// edge-file weight chunk of `rows` rows read as raw 32-bit words and decoded here:
// f32, f16, int8 (row scales, f32) or int4 (two's-complement nibbles, low nibble first; group
// scales (rows, groups) in f16 or f32). Layouts: src/ops/cpu/quantized.h.
#define WT_F32 0u
#define WT_F16 1u
#define WT_INT8 2u
#define WT_INT4 3u

layout(push_constant) uniform Push {
  uint n;           // tokens: rows of X and Y
  uint rows;        // weight rows in this chunk
  uint cols;        // the reduction dim
  uint row_base;    // global index of the chunk's first row (into scales, bias and Y's columns)
  uint ldy;         // Y's row stride
  uint x_off;       // first X element
  uint wtype;       // WT_*
  uint group;       // int4 columns per scale
  uint scale_f16;   // int4 scales stored as f16
  uint bias;        // 0 none, 1 f32, 2 f16
  uint accumulate;  // 1: Y += result (a fused residual add)
  uint silu;        // 1: act = SiLU (a fused activation), else none
  uint norm;        // GEMV only: 0, or X is RMSNorm'd with weights NormW, 1: f32, 2: f16
  float norm_eps;
  uint rope_heads;  // gemv_subgroup only: 0, or W is a qkv projection of this many heads, its output
                    // rotated (RoPE) and its k and v appended to the KV cache (gemv_subgroup.comp)
} pc;

#ifndef TEXEL_LOADS  // else gemv_common.glsl binds X and W4 as texel buffers
layout(std430, binding = 0) readonly buffer XBuf { float X[]; };
#endif
layout(std430, binding = 1) readonly buffer WBuf { uint W[]; };
#ifndef TEXEL_LOADS
layout(std430, binding = 2) readonly buffer W4Buf { uvec4 W4[]; };
#endif
#ifdef TEXEL_LOADS  // the scales' 32-bit words as R32 texels (llvmpipe: gathers, not per-lane loads)
layout(binding = 3) uniform usamplerBuffer S1;
#define LOAD_S(i) texelFetch(S1, int(i)).x
#else
layout(std430, binding = 3) readonly buffer SBuf { uint S[]; };
#define LOAD_S(i) S[i]
#endif
layout(std430, binding = 4) readonly buffer BBuf { uint Bias[]; };
layout(std430, binding = 5) buffer YBuf { float Y[]; };
layout(std430, binding = 6) readonly buffer NormBuf { uint NormW[]; };

float half_at_words(uint word, uint i) { return unpackHalf2x16(word)[i & 1u]; }

uint int4_row_bytes() { return (pc.cols + 1u) / 2u; }
uint int4_groups() { return (pc.cols + pc.group - 1u) / pc.group; }

float scale_at(uint i) {
  if (pc.wtype == WT_INT4 && pc.scale_f16 != 0u) return half_at_words(LOAD_S(i >> 1), i);
  return uintBitsToFloat(LOAD_S(i));
}

// Dequantized W[r, c] of the chunk (r local to the chunk).
float w_at(uint r, uint c) {
  if (pc.wtype == WT_F32) return uintBitsToFloat(W[r * pc.cols + c]);
  if (pc.wtype == WT_F16) {
    const uint i = r * pc.cols + c;
    return half_at_words(W[i >> 1], i);
  }
  if (pc.wtype == WT_INT8) {
    const uint i = r * pc.cols + c;
    const int q = bitfieldExtract(int(W[i >> 2]), int((i & 3u) * 8u), 8);
    return float(q) * scale_at(pc.row_base + r);
  }
  const uint i = r * int4_row_bytes() + (c >> 1);
  const int q = bitfieldExtract(int(W[i >> 2]), int((i & 3u) * 8u + (c & 1u) * 4u), 4);
  return float(q) * scale_at((pc.row_base + r) * int4_groups() + c / pc.group);
}

float bias_at(uint j) {
  if (pc.bias == 1u) return uintBitsToFloat(Bias[j]);
  if (pc.bias == 2u) return half_at_words(Bias[j >> 1], j);
  return 0.0;
}

void store_y(uint i, uint r, float v) {
  const uint j = pc.row_base + r;
  const uint at = i * pc.ldy + j;
  v += bias_at(j);
  if (pc.silu != 0u) v = v / (1.0 + exp(-v));
  Y[at] = pc.accumulate != 0u ? Y[at] + v : v;
}
