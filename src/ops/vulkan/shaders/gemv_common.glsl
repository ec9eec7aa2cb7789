// Shared by the decode GEMVs (gemv_subgroup: a subgroup per GEMV_N rows; gemv_rows: an invocation
// per row or per GEMV_N rows), after matmul_common.glsl: x as vec4, the norm fused in front,
// whole-word decoding of f32 / f16 / int8 / int4, row_dot (the dot of x with a share of one row)
// and, where the includer defines GEMV_N_SPEC (gemv_subgroup: GEMV_N a specialization constant),
// rows_dot (the same for GEMV_N rows at once). gemv_rows keeps its own multi-row loop: llvmpipe ran
// this one's word arrays 3x slower (vulkan_notes.md).
// X seen as vec4 (x_off % 4 == 0) and W as 16-byte words: storage buffers, or with TEXEL_LOADS
// uniform texel buffers (RGBA32F, RGBA32UI), which llvmpipe reads far faster (vulkan_notes.md).
#ifdef TEXEL_LOADS
layout(binding = 0) uniform samplerBuffer X4;
layout(binding = 2) uniform usamplerBuffer W4;
#define LOAD_X4(i) texelFetch(X4, int(i))
#define LOAD_X(i) texelFetch(X4, int((i) >> 2))[(i) & 3u]
#define LOAD_W4(i) texelFetch(W4, int(i))
#else
layout(std430, binding = 0) readonly buffer X4Buf { vec4 X4[]; };
#define LOAD_X4(i) X4[i]
#define LOAD_X(i) X[i]
#define LOAD_W4(i) W4[i]
#endif
#include "words.glsl"

float sum_sq = 0.0;  // this invocation's Σx² (pc.norm != 0)

float norm_at(uint c) { return pc.norm == 2u ? half_at_words(NormW[c >> 1], c) : uintBitsToFloat(NormW[c]); }
vec4 norm4(uint c) {  // c a multiple of 4
  if (pc.norm == 2u) return f16x4(NormW[c >> 1], NormW[(c >> 1) + 1u]);
  return uintBitsToFloat(uvec4(NormW[c], NormW[c + 1u], NormW[c + 2u], NormW[c + 3u]));
}

// x[c .. c + 3] (c relative to x_off; both multiples of 4: row_dot checks), times the norm weights
// when fused. One load: llvmpipe ran both sides of a select between a vec4 load and four scalar
// ones, and the norm's loads behind a branch (the lanes masked off, the loads still looped over),
// so a shader that never fuses the norm defines NO_NORM (gemv_rows, bench/vulkan_notes.md).
vec4 x4(uint c) {
  const vec4 x = LOAD_X4((pc.x_off + c) >> 2);
#ifdef NO_NORM
  return x;
#else
  if (pc.norm == 0u) return x;
  sum_sq += dot(x, x);
  return x * norm4(c);
#endif
}
float x_at(uint c) {
  const float x = LOAD_X(pc.x_off + c);
  if (pc.norm == 0u) return x;
  sum_sq += x * x;
  return x * norm_at(c);
}

// x · (the columns of 16-byte word v of a row), per encoding: 4 f32, 8 f16, 16 int8, 32 int4
// (unscaled). XW<F>(j): x's j-th vec4 of word v's columns, loaded; XR(j): that vec4 already
// loaded into xw<j> (once for several rows).
#define XW(F, j) x4(v * (4u * F) + 4u * uint(j))
#define XR(j) xw##j
#define XW1(j) XW(1u, j)
#define XW2(j) XW(2u, j)
#define XW4(j) XW(4u, j)
#define XW8(j) XW(8u, j)
float dot_f32(uvec4 w, uint v) { return WORD_DOT_F32(w, XW1); }
float dot_f16(uvec4 w, uint v) { return WORD_DOT_F16(w, XW2); }
float dot_i8(uvec4 w, uint v) { return WORD_DOT_I8(w, XW4); }
float dot_i4(uvec4 w, uint v) { return WORD_DOT_I4(w, XW8); }

// This lane's share of a row of `per_row` words from word `base`: DOT(w, v) for its words. (Four
// loads issued before their use measured no faster on the H200 and 4x slower on llvmpipe.)
#define ROW_WORDS(DOT) \
  for (uint v = lane; v < per_row; v += S) acc += DOT(LOAD_W4(base + v), v);

uint row_bytes() {
  if (pc.wtype == WT_F32) return pc.cols * 4u;
  if (pc.wtype == WT_F16) return pc.cols * 2u;
  if (pc.wtype == WT_INT8) return pc.cols;
  return int4_row_bytes();
}

// Whether rows are read as whole 16-byte words against x as vec4: rows of whole words, an int4
// word's 32 columns in one scale group, x aligned to 4. Else element by element.
bool whole_words() {
  return row_bytes() % 16u == 0u && (pc.wtype != WT_INT4 || pc.group % 32u == 0u) && (pc.x_off & 3u) == 0u;
}

// This invocation's share of row r: columns (or 16-byte words) lane, lane + S, lane + 2S, ...
float row_dot(uint r, uint lane, uint S) {
  float acc = 0.0;
  if (!whole_words()) {
    for (uint c = lane; c < pc.cols; c += S) acc += x_at(c) * w_at(r, c);
    return acc;
  }
  const uint per_row = row_bytes() / 16u, base = r * per_row;
  if (pc.wtype == WT_F32) {
    ROW_WORDS(dot_f32)
  } else if (pc.wtype == WT_F16) {
    ROW_WORDS(dot_f16)
  } else if (pc.wtype == WT_INT8) {
    ROW_WORDS(dot_i8)
    acc *= scale_at(pc.row_base + r);
  } else {
    // A word's 32 columns lie in one group (group % 32 == 0).
    // Word v's group: a shift where words per group is a power of two (group 32, 64, 128, ...).
    const uint srow = (pc.row_base + r) * int4_groups(), words_per_group = pc.group / 32u;
    const bool pow2 = (words_per_group & (words_per_group - 1u)) == 0u;
    const uint shift = uint(findLSB(words_per_group));
#define DOT_I4_SCALED(w, v) \
  (dot_i4(w, v) * scale_at(srow + (pow2 ? (v) >> shift : (v) / words_per_group)))
    ROW_WORDS(DOT_I4_SCALED)
#undef DOT_I4_SCALED
  }
  return acc;
}

#ifdef GEMV_N_SPEC
// rows_dot's rows (in) and sums (out): globals, as arrays sized by a specialization constant.
uint g_rows[GEMV_N];
float g_acc[GEMV_N];

uvec4 g_q[GEMV_N];  // the current word of row i

// g_acc[i] += x · word v (loaded as g_q[i]) of row i, for each of the rows: x's vec4s of the word
// loaded once (xw0 ..) for all the rows.
void acc_f32(uint v) {
  const vec4 xw0 = XW1(0);
  for (uint i = 0u; i < GEMV_N; ++i) {
    const uvec4 w = g_q[i];
    g_acc[i] += WORD_DOT_F32(w, XR);
  }
}
void acc_f16(uint v) {
  const vec4 xw0 = XW2(0), xw1 = XW2(1);
  for (uint i = 0u; i < GEMV_N; ++i) {
    const uvec4 w = g_q[i];
    g_acc[i] += WORD_DOT_F16(w, XR);
  }
}
void acc_i8(uint v) {  // unscaled
  const vec4 xw0 = XW4(0), xw1 = XW4(1), xw2 = XW4(2), xw3 = XW4(3);
  for (uint i = 0u; i < GEMV_N; ++i) {
    const uvec4 w = g_q[i];
    g_acc[i] += WORD_DOT_I8(w, XR);
  }
}
void acc_i4(uint v) {  // the word's group scale applied
  const uint groups = int4_groups(), words_per_group = pc.group / 32u;
  const uint g = (words_per_group & (words_per_group - 1u)) == 0u ? v >> uint(findLSB(words_per_group))
                                                                  : v / words_per_group;
  const vec4 xw0 = XW8(0), xw1 = XW8(1), xw2 = XW8(2), xw3 = XW8(3);
  const vec4 xw4 = XW8(4), xw5 = XW8(5), xw6 = XW8(6), xw7 = XW8(7);
  for (uint i = 0u; i < GEMV_N; ++i) {
    const uvec4 w = g_q[i];
    g_acc[i] += WORD_DOT_I4(w, XR) * scale_at((pc.row_base + g_rows[i]) * groups + g);
  }
}

// g_acc[i] = this invocation's share (16-byte words lane, lane + S, ...) of the dot of x with row
// g_rows[i], for GEMV_N rows at once: x's values for each word are loaded (with the norm fused:
// squared into sum_sq and scaled by g) once for all the rows, and the rows' words are independent
// loads in flight together. Rows that are not whole words take row_dot, one at a time.
void rows_dot(uint lane, uint S) {
  for (uint i = 0u; i < GEMV_N; ++i) g_acc[i] = 0.0;
  if (!whole_words()) {
    for (uint i = 0u; i < GEMV_N; ++i) {
      const float first = sum_sq;  // Σx² over this invocation's columns: counted for one row only
      g_acc[i] = row_dot(g_rows[i], lane, S);
      if (i > 0u) sum_sq = first;
    }
    return;
  }
  const uint per_row = row_bytes() / 16u;
  for (uint v = lane; v < per_row; v += S) {  // one word of every row at a time, used as it arrives
    for (uint i = 0u; i < GEMV_N; ++i) g_q[i] = LOAD_W4(g_rows[i] * per_row + v);
    if (pc.wtype == WT_F32) acc_f32(v);
    else if (pc.wtype == WT_F16) acc_f16(v);
    else if (pc.wtype == WT_INT8) acc_i8(v);
    else acc_i4(v);  // int4: a word's 32 columns lie in one group (group % 32 == 0)
  }
  if (pc.wtype == WT_INT8)
    for (uint i = 0u; i < GEMV_N; ++i) g_acc[i] *= scale_at(pc.row_base + g_rows[i]);  // the row scale
}
#endif
