// Prefill GEMM on cooperative matrices (VK_KHR_cooperative_matrix, fp16 x fp16 -> fp32,
// 16x16x16): Y (n, ldy) [+]= X (n, cols) · W(chunk)ᵀ. A workgroup of 8 subgroups of 32 owns a
// TM x TN = 64 x 128 output tile (tokens m0.., weight rows n0..); subgroup s owns 32 tokens (s / 4)
// x 32 rows (s % 4): four accumulators, each a variable of its own (arrays of cooperative matrices
// went to local memory on the H200: 2^36 + 128..256 bytes in the pipeline statistics, and a
// register-only peak ran 20x faster than one with arrays).
// Each K step of TK = 32 columns is staged in shared memory as fp16, 8 halves to a uvec4:
// thread t converts 8 columns of token t / 4 (part t % 4; X rounded to fp16) and 16 of weight row
// t / 2 (half t % 2; f16 words copied as they are, int8 / int4 decoded and scaled, then rounded),
// each with whole-vector loads where the layout allows, else element by element. The shared tiles
// are double-buffered: a later step's words are loaded into registers before this step's products
// (the next step's; three steps ahead on the fast path, FAST) and the next step's stored into the
// other buffer after them, one barrier a step. The K steps' loads bound it: H200, 512 tokens, ffn.0's
// 8192 x 2048 GEMM with one / two / three steps in flight, µs: f16 363 / 240 / 242 (138 registers
// at three), int8 295 / 220 / 208, int4 315 / 253 / 240 (bench/vulkan_notes.md). The plain tiled GEMM
// is the oracle; fp16 rounding of both inputs sets the tolerance.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
#include "matmul_common.glsl"
#include "words.glsl"
layout(std430, binding = 0) readonly buffer X4Buf { vec4 X4[]; };  // X as vec4

// PARTS: the parts of a K step that run, bit 0 its global loads, bit 1 its shared-memory stores,
// bit 2 its products. Ops::matmul always specializes it to 7 (every part): the constant stays only
// because the NVIDIA driver compiles the int4 GEMM faster with it than with its tests removed
// (bench/vulkan_notes.md, "The restructuring of issue 34").
layout(constant_id = 0) const uint PARTS = 7u;
// FAST 1 + WT_* (Ops::matmul, where x_off % 4, cols % TK and int4's group % 16 are 0): every K
// step is whole vec4s of X and whole words of W of that type, with three steps' loads in flight
// (fast_load); 0: any layout and type, one step's.
layout(constant_id = 1) const uint FAST = 0u;
const uint TM = 64u, TN = 128u, TK = 32u;
const uint LDU = TK / 8u + 1u;      // a tile row's stride in uvec4s: TK halves + 8 (no bank conflicts)
const uint A_SIZE = TM * LDU, B_SIZE = TN * LDU;
shared uvec4 As[2u * A_SIZE];       // X tiles, (token, k) row-major, two buffers
shared uvec4 Bs[2u * B_SIZE];       // W tiles, (weight row, k) row-major = B (k, n) column-major
shared float Cs[8u * 256u];         // per subgroup: one 16x16 accumulator on its way to Y

#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>

// This thread's share of a K step, in registers between the loads and the shared-memory stores.
uint x_row, x_part, w_row, w_half;
vec4 xa0, xa1;   // X's 8 values
uvec4 wq0, wq1;  // W's raw words (f16: 2 words; int8: wq0; int4: wq0.xy); f32: decoded into wf*
vec4 wf0, wf1, wf2, wf3;  // W's 16 values where decoded at load time (f32, element by element)
float wscale;    // int8 / int4 scale of those words
bool x_vec, w_words, w_decoded;

void load_step(uint k0) {
  if ((PARTS & 1u) == 0u) {
    w_decoded = true;
    return;
  }
  const uint m = gl_WorkGroupID.y * TM + x_row, cx = k0 + x_part * 8u;
  if (x_vec) {
    xa0 = m < pc.n && cx < pc.cols ? X4[(pc.x_off + m * pc.cols + cx) >> 2] : vec4(0.0);
    xa1 = m < pc.n && cx + 4u < pc.cols ? X4[(pc.x_off + m * pc.cols + cx + 4u) >> 2] : vec4(0.0);
  } else {
    float v[8];
    [[unroll]] for (uint j = 0u; j < 8u; ++j)
      v[j] = m < pc.n && cx + j < pc.cols ? X[pc.x_off + m * pc.cols + cx + j] : 0.0;
    xa0 = vec4(v[0], v[1], v[2], v[3]), xa1 = vec4(v[4], v[5], v[6], v[7]);
  }
  const uint r = gl_WorkGroupID.x * TN + w_row, c0 = k0 + w_half * 16u;
  w_decoded = !w_words || r >= pc.rows || c0 + 16u > pc.cols || pc.wtype == WT_F32;
  if (!w_decoded) {
    if (pc.wtype == WT_F16) {
      const uint at = (r * pc.cols + c0) / 8u;
      wq0 = W4[at], wq1 = W4[at + 1u];
    } else if (pc.wtype == WT_INT8) {
      wq0 = W4[(r * pc.cols + c0) / 16u];
      wscale = scale_at(pc.row_base + r);
    } else {
      const uint at = (r * int4_row_bytes() + c0 / 2u) / 4u;
      wq0.xy = uvec2(W[at], W[at + 1u]);
      wscale = scale_at((pc.row_base + r) * int4_groups() + c0 / pc.group);
    }
    return;
  }
  if (w_words && r < pc.rows && c0 + 16u <= pc.cols) {  // f32 words
    const uint at = (r * pc.cols + c0) / 4u;
    wf0 = uintBitsToFloat(W4[at]), wf1 = uintBitsToFloat(W4[at + 1u]);
    wf2 = uintBitsToFloat(W4[at + 2u]), wf3 = uintBitsToFloat(W4[at + 3u]);
    return;
  }
  float v[16];
  [[unroll]] for (uint j = 0u; j < 16u; ++j) v[j] = r < pc.rows && c0 + j < pc.cols ? w_at(r, c0 + j) : 0.0;
  wf0 = vec4(v[0], v[1], v[2], v[3]), wf1 = vec4(v[4], v[5], v[6], v[7]);
  wf2 = vec4(v[8], v[9], v[10], v[11]), wf3 = vec4(v[12], v[13], v[14], v[15]);
}

uvec4 halves(vec4 a, vec4 b) {  // 8 values rounded to fp16, packed in order
  return uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
}

// The registers of load_step into shared buffer `buf`.
void store_step(uint buf) {
  if ((PARTS & 2u) == 0u) return;
  As[buf * A_SIZE + x_row * LDU + x_part] = halves(xa0, xa1);
  const uint b = buf * B_SIZE + w_row * LDU + w_half * 2u;
  if (w_decoded) {
    Bs[b] = halves(wf0, wf1), Bs[b + 1u] = halves(wf2, wf3);
  } else if (pc.wtype == WT_F16) {
    Bs[b] = wq0, Bs[b + 1u] = wq1;
  } else if (pc.wtype == WT_INT8) {
    Bs[b] = halves(i8x4(wq0.x) * wscale, i8x4(wq0.y) * wscale);
    Bs[b + 1u] = halves(i8x4(wq0.z) * wscale, i8x4(wq0.w) * wscale);
  } else {
    Bs[b] = halves(i4lo(wq0.x) * wscale, i4hi(wq0.x) * wscale);
    Bs[b + 1u] = halves(i4lo(wq0.y) * wscale, i4hi(wq0.y) * wscale);
  }
}

// FAST: one step's registers. X's 8 values, W's words (f16 w0, w1; int8 w0; int4 w0.xy), the scale.
struct Regs {
  vec4 x0, x1;
  uvec4 w0, w1;
  float scale;
};

Regs fast_load(uint k0) {
  const uint WT = FAST - 1u, m = gl_WorkGroupID.y * TM + x_row, cx = k0 + x_part * 8u;
  Regs g;
  if ((PARTS & 1u) == 0u) return g;
  const bool mx = m < pc.n;
  g.x0 = mx ? X4[(pc.x_off + m * pc.cols + cx) >> 2] : vec4(0.0);
  g.x1 = mx ? X4[(pc.x_off + m * pc.cols + cx + 4u) >> 2] : vec4(0.0);
  const uint r = gl_WorkGroupID.x * TN + w_row, c0 = k0 + w_half * 16u;
  const bool mr = r < pc.rows;
  g.w0 = g.w1 = uvec4(0u), g.scale = 0.0;
  if (WT == WT_F16) {
    const uint at = (r * pc.cols + c0) / 8u;
    if (mr) g.w0 = W4[at], g.w1 = W4[at + 1u];
  } else if (WT == WT_INT8) {
    if (mr) g.w0 = W4[(r * pc.cols + c0) / 16u], g.scale = scale_at(pc.row_base + r);
  } else {
    const uint at = (r * int4_row_bytes() + c0 / 2u) / 4u;
    if (mr) g.w0.xy = uvec2(W[at], W[at + 1u]), g.scale = scale_at((pc.row_base + r) * int4_groups() + c0 / pc.group);
  }
  return g;
}

void fast_store(uint buf, Regs g) {
  if ((PARTS & 2u) == 0u) return;
  const uint WT = FAST - 1u;
  As[buf * A_SIZE + x_row * LDU + x_part] = halves(g.x0, g.x1);
  const uint b = buf * B_SIZE + w_row * LDU + w_half * 2u;
  if (WT == WT_F16) {
    Bs[b] = g.w0, Bs[b + 1u] = g.w1;
  } else if (WT == WT_INT8) {
    Bs[b] = halves(i8x4(g.w0.x) * g.scale, i8x4(g.w0.y) * g.scale);
    Bs[b + 1u] = halves(i8x4(g.w0.z) * g.scale, i8x4(g.w0.w) * g.scale);
  } else {
    Bs[b] = halves(i4lo(g.w0.x) * g.scale, i4hi(g.w0.x) * g.scale);
    Bs[b + 1u] = halves(i4lo(g.w0.y) * g.scale, i4hi(g.w0.y) * g.scale);
  }
}

// Accumulator `acc`, this subgroup's tokens tm + 16·i.., rows tn + 16·j.., through shared memory to Y.
void store_acc(ACC acc, uint tm, uint tn) {
  const uint sg = gl_SubgroupID;
  coopMatStore(acc, Cs, sg * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
  subgroupMemoryBarrierShared();
  subgroupBarrier();
  for (uint e = gl_SubgroupInvocationID; e < 256u; e += gl_SubgroupSize) {
    const uint m = gl_WorkGroupID.y * TM + tm + e / 16u, r = gl_WorkGroupID.x * TN + tn + e % 16u;
    if (m < pc.n && r < pc.rows) store_y(m, r, Cs[sg * 256u + e]);
  }
  subgroupBarrier();
}

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID;
  x_row = tid / 4u, x_part = tid % 4u, w_row = tid / 2u, w_half = tid % 2u;
  x_vec = pc.x_off % 4u == 0u && pc.cols % 4u == 0u;
  // Whole words: a word never straddles the end of a row or (int4) a scale group.
  w_words = pc.wtype == WT_F32 ? pc.cols % 4u == 0u
          : pc.wtype == WT_F16 ? pc.cols % 8u == 0u
          : pc.wtype == WT_INT8 ? pc.cols % 16u == 0u
                                : pc.cols % 16u == 0u && pc.group % 16u == 0u;
  ACC c00 = ACC(0.0), c01 = ACC(0.0), c10 = ACC(0.0), c11 = ACC(0.0);
  const uint tm = (sg / 4u) * 32u, tn = (sg % 4u) * 32u;
  // This step's products from shared buffer `buf`: 16 columns (2 uvec4s) at a time.
#define PRODUCTS(buf)                                                                   \
  {                                                                                      \
    const uint a0 = (buf) * A_SIZE + tm * LDU, b0 = (buf) * B_SIZE + tn * LDU;          \
    [[unroll]] for (uint kk = 0u; kk < TK / 8u; kk += 2u) {                              \
      if ((PARTS & 4u) == 0u) break;                                                     \
      MAT_A a0m, a1m;                                                                    \
      MAT_B b0m, b1m;                                                                    \
      coopMatLoad(a0m, As, a0 + kk, LDU, gl_CooperativeMatrixLayoutRowMajor);            \
      coopMatLoad(a1m, As, a0 + 16u * LDU + kk, LDU, gl_CooperativeMatrixLayoutRowMajor); \
      coopMatLoad(b0m, Bs, b0 + kk, LDU, gl_CooperativeMatrixLayoutColumnMajor);         \
      coopMatLoad(b1m, Bs, b0 + 16u * LDU + kk, LDU, gl_CooperativeMatrixLayoutColumnMajor); \
      c00 = coopMatMulAdd(a0m, b0m, c00);                                                \
      c01 = coopMatMulAdd(a0m, b1m, c01);                                                \
      c10 = coopMatMulAdd(a1m, b0m, c10);                                                \
      c11 = coopMatMulAdd(a1m, b1m, c11);                                                \
    }                                                                                    \
  }
  if (FAST != 0u) {
    // Three register sets and two shared buffers: step k's products come from buffer k % 2 while
    // set k % 3 is loaded with step k + 3 and set (k + 1) % 3, loaded two steps ago, is stored into
    // buffer (k + 1) % 2: three steps' loads in flight. The loop runs six steps a trip, so that
    // every set and buffer is named.
    Regs g0 = fast_load(0u), g1, g2;
    if (TK < pc.cols) g1 = fast_load(TK);
    if (2u * TK < pc.cols) g2 = fast_load(2u * TK);
    fast_store(0u, g0);
    barrier();
#define FAST_STEP(j, LOAD_SET, BUF, STORE_SET)                          \
    {                                                                   \
      const uint k = k0 + (j) * TK;                                     \
      if (k >= pc.cols) break;                                          \
      if (k + 3u * TK < pc.cols) LOAD_SET = fast_load(k + 3u * TK);     \
      PRODUCTS(BUF)                                                     \
      if (k + TK < pc.cols) fast_store(1u - (BUF), STORE_SET);          \
      barrier();                                                        \
    }
    for (uint k0 = 0u; k0 < pc.cols; k0 += 6u * TK) {
      FAST_STEP(0u, g0, 0u, g1)
      FAST_STEP(1u, g1, 1u, g2)
      FAST_STEP(2u, g2, 0u, g0)
      FAST_STEP(3u, g0, 1u, g1)
      FAST_STEP(4u, g1, 0u, g2)
      FAST_STEP(5u, g2, 1u, g0)
    }
    store_acc(c00, tm, tn);
    store_acc(c01, tm, tn + 16u);
    store_acc(c10, tm + 16u, tn);
    store_acc(c11, tm + 16u, tn + 16u);
    return;
  }
  load_step(0u);
  store_step(0u);
  barrier();
  for (uint k0 = 0u, buf = 0u; k0 < pc.cols; k0 += TK, buf ^= 1u) {
    const bool more = k0 + TK < pc.cols;
    if (more) load_step(k0 + TK);  // in flight while the products below run
    PRODUCTS(buf)
    if (more) store_step(buf ^ 1u);  // the other buffer: last read before the previous barrier
    barrier();
  }
  store_acc(c00, tm, tn);
  store_acc(c01, tm, tn + 16u);
  store_acc(c10, tm + 16u, tn);
  store_acc(c11, tm + 16u, tn + 16u);
}
