// Attention of n queries over a key/value store on cooperative matrices (VK_KHR_cooperative_matrix,
// fp16 x fp16 -> fp32, 16x16x16): the prefill's attention where the device has them (Ops::attention;
// attention_tiled.comp otherwise, and as the oracle). The operands are fp16 copies in the scratch
// (attention_halves.comp: Qh, the queries times the scale; Kh, Vh the key and value rows, rows past
// n and the keys zero). Workgroup (x, h): queries 64·x .. 64·x + 63 of head h, 16 a subgroup.
// One pass over the keys in chunks of KC = 32, with an online softmax:
//   the chunk's Kh and Vh rows staged in shared memory by the whole workgroup (one round of
//   loads, all in flight, issued during the chunk before's products; the subgroups' 16x16 tiles
//   are read from there);
//   S = Qh · Khᵀ (two 16x16 accumulators over hd / 16 products; Qh's tiles held in registers),
//   stored to shared memory; each row's running max m and sum l; where a row's max grew, O's
//   tiles rescaled by exp(m_old - m_new) through shared memory (an accumulator's rows are opaque
//   to the shader; after the first chunks the max rarely grows); P = exp(S - m) (0 where
//   masked) as fp16; O += P · Vh (hd / 16 accumulators, HD16 a specialization constant);
// then O / l to o. Tolerance against the fp32 kernels: fp16 rounding of q, k, v and P.
// H200, seed size, 512 tokens, causal, µs a layer: 200 attention_tiled; 144 with two passes (the
// max, then the rest) and each subgroup loading its tiles from the scratch; 86 in one pass, keys
// in chunks of 64; 48 with the chunks staged; 45 with each loaded a chunk ahead (bench/vulkan_notes.md).
// Causal: query i sees keys 0 .. p + i, p = pos0 + position[0]; otherwise all `keys`.
// Needs subgroups of 32, hd % 16 == 0, hd <= 128 (Ops::uses_coopmat_attention).
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint HD16 = 8u;  // hd / 16, 1 .. 8
layout(push_constant) uniform Push {
  uint n, heads, hd, keys, pos0, causal;
  uint q_off, q_stride, k_off, k_stride, v_off, v_stride, o_stride, max_keys;
  float scale;
  uint kv_group;  // query heads per key/value head: query head h reads head h / kv_group
} pc;
layout(std430, binding = 0) readonly buffer Halves { uvec4 hv[]; };  // Qh, Kh, Vh: 8 halves a uvec4
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(std430, binding = 2) readonly buffer Position { uint position[]; };

#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define ROW_MAJOR gl_CooperativeMatrixLayoutRowMajor
#define COL_MAJOR gl_CooperativeMatrixLayoutColumnMajor

const uint KC = 32u;                    // keys a chunk
const uint LK = 2u * HD16 + 1u;         // a staged key or value row's stride in uvec4s (hd + 8 halves)
const uint LS = KC / 4u + 1u;           // S's row stride in vec4s (padded: no bank conflicts)
const uint LP = KC / 8u;                // P's row stride in uvec4s
const uint U = (KC * 2u * HD16 + 127u) / 128u, MAX_U = 4u;  // an invocation's words of a chunk's rows
const float LOWEST = -3.402823e38;
shared uvec4 Ks[KC * 17u], Vs[KC * 17u];  // the chunk's key and value rows (KC, hd) as fp16
shared vec4 Ss[4u * 16u * LS];          // per subgroup: a chunk's scores (16 queries x KC), or an O tile
shared uvec4 Ps[4u * 16u * LP];         // per subgroup: a chunk's weights P as fp16

void main() {
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID, tid = gl_LocalInvocationIndex;
  const uint hh = gl_WorkGroupID.y, i0 = (gl_WorkGroupID.x * 4u + sg) * 16u;
  const uint D8 = pc.heads * pc.hd / 8u, hd8 = 2u * HD16, nq = (pc.n + 15u) & ~15u;
  const uint KR = (max(pc.max_keys, pc.keys) + 63u) & ~63u, head8 = hh * pc.hd / 8u;
  const uint q_at = i0 * D8 + head8, k_at = nq * D8 + head8, v_at = (nq + KR) * D8 + head8;
  const uint p = pc.pos0 + position[0];
  // Keys any query of the workgroup sees (the chunks it stages), of this subgroup's 16 (those it
  // multiplies; none where its queries are past n).
  const uint wg_last = min(gl_WorkGroupID.x * 64u + 64u, pc.n) - 1u, last = min(i0 + 16u, pc.n) - 1u;
  const uint wg_keys = pc.causal != 0u ? p + wg_last + 1u : pc.keys;
  const uint keys = i0 >= pc.n ? 0u : pc.causal != 0u ? p + last + 1u : pc.keys;
  // This lane's share of the softmax: row r (query i0 + r), keys KC/2·part .. of a chunk; of an O
  // tile, row r's columns 8·part .. 8·part + 7.
  const uint r = lane >> 1, part = lane & 1u, i = min(i0 + r, last);
  const uint sees = pc.causal != 0u ? min(p + i + 1u, keys) : keys;  // row r sees keys 0 .. sees - 1
  const uint s_base = sg * 16u * LS, s_row = s_base + r * LS;

  // Qh's tiles (16 queries x 16 of hd each), held.
  MAT_A q0, q1, q2, q3, q4, q5, q6, q7;
#define LOAD_Q(d, qd) \
  if (d < HD16 && keys > 0u) coopMatLoad(qd, hv, q_at + 2u * d, D8, ROW_MAJOR);
  LOAD_Q(0u, q0) LOAD_Q(1u, q1) LOAD_Q(2u, q2) LOAD_Q(3u, q3) LOAD_Q(4u, q4) LOAD_Q(5u, q5) LOAD_Q(6u, q6) LOAD_Q(7u, q7)

  float m = LOWEST, l = 0.0;
  ACC o0 = ACC(0.0), o1 = ACC(0.0), o2 = ACC(0.0), o3 = ACC(0.0), o4 = ACC(0.0), o5 = ACC(0.0),
      o6 = ACC(0.0), o7 = ACC(0.0);
  ACC s0, s1;
  MAT_B kb0, kb1;
  MAT_A pa0, pa1;
  // S += Qh tile d · (the chunk's keys, columns 16·d ..)ᵀ
#define SCORE(d, qd)                                                                               \
  if (d < HD16) {                                                                                  \
    coopMatLoad(kb0, Ks, 2u * d, LK, COL_MAJOR);                                                   \
    coopMatLoad(kb1, Ks, 16u * LK + 2u * d, LK, COL_MAJOR);                                        \
    s0 = coopMatMulAdd(qd, kb0, s0);                                                               \
    s1 = coopMatMulAdd(qd, kb1, s1);                                                               \
  }
  // O tile t's row r scaled by a through Ss (the lane's 8 columns of it).
#define RESCALE(t, ot, a)                                                                          \
  if (t < HD16) {                                                                                  \
    coopMatStore(ot, Ss, s_base, LS, ROW_MAJOR);                                                   \
    subgroupMemoryBarrierShared();                                                                 \
    subgroupBarrier();                                                                             \
    Ss[s_row + 2u * part] *= a;                                                                    \
    Ss[s_row + 2u * part + 1u] *= a;                                                               \
    subgroupMemoryBarrierShared();                                                                 \
    subgroupBarrier();                                                                             \
    coopMatLoad(ot, Ss, s_base, LS, ROW_MAJOR);                                                    \
    subgroupBarrier();                                                                             \
  }
  // O tile t += P · (the chunk's values, columns 16·t ..)
#define PV(t, ot)                                                                                  \
  if (t < HD16) {                                                                                  \
    coopMatLoad(kb0, Vs, 2u * t, LK, ROW_MAJOR);                                                   \
    coopMatLoad(kb1, Vs, 16u * LK + 2u * t, LK, ROW_MAJOR);                                        \
    ot = coopMatMulAdd(pa0, kb0, ot);                                                              \
    ot = coopMatMulAdd(pa1, kb1, ot);                                                              \
  }
  // This invocation's share of a chunk's rows: words tid + 128·u (u < U) of its KC x hd8 of Kh
  // and of Vh, loaded a chunk ahead (during the chunk before's products), stored when it starts.
  uvec4 kw[MAX_U], vw[MAX_U];
#define LOAD_CHUNK(c0)                                                                             \
  [[unroll]] for (uint u = 0u; u < U; ++u) {                                                       \
    const uint e = tid + 128u * u, key = e / hd8, c = e % hd8;                                     \
    if (e < KC * hd8) kw[u] = hv[k_at + ((c0) + key) * D8 + c], vw[u] = hv[v_at + ((c0) + key) * D8 + c]; \
  }
  LOAD_CHUNK(0u)
  for (uint c0 = 0u; c0 < wg_keys; c0 += KC) {
    barrier();  // the last chunk's rows are read
    [[unroll]] for (uint u = 0u; u < U; ++u) {
      const uint e = tid + 128u * u, key = e / hd8, c = e % hd8;
      if (e < KC * hd8) Ks[key * LK + c] = kw[u], Vs[key * LK + c] = vw[u];
    }
    barrier();
    if (c0 + KC < wg_keys) LOAD_CHUNK(c0 + KC)
    if (c0 >= keys) continue;  // this subgroup's queries see none of the chunk (uniform in it)
    s0 = ACC(0.0), s1 = ACC(0.0);
    SCORE(0u, q0) SCORE(1u, q1) SCORE(2u, q2) SCORE(3u, q3) SCORE(4u, q4) SCORE(5u, q5) SCORE(6u, q6) SCORE(7u, q7)
    coopMatStore(s0, Ss, s_base, LS, ROW_MAJOR);
    coopMatStore(s1, Ss, s_base + 4u, LS, ROW_MAJOR);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    // The lane's KC / 2 scores of row r; the row's new max over both lanes.
    vec4 s[KC / 8u];
    float mc = LOWEST;
    [[unroll]] for (uint t = 0u; t < KC / 8u; ++t) {
      s[t] = Ss[s_row + KC / 8u * part + t];
      [[unroll]] for (uint e = 0u; e < 4u; ++e) {
        const bool seen = c0 + KC / 2u * part + 4u * t + e < sees;
        s[t][e] = seen ? s[t][e] : LOWEST;
        mc = max(mc, s[t][e]);
      }
    }
    const float m_new = max(m, max(mc, subgroupShuffleXor(mc, 1u))), alpha = exp(m - m_new);
    subgroupBarrier();  // Ss is read: free for the rescale
    if (c0 != 0u && subgroupAny(m_new > m)) {
      RESCALE(0u, o0, alpha) RESCALE(1u, o1, alpha) RESCALE(2u, o2, alpha) RESCALE(3u, o3, alpha)
      RESCALE(4u, o4, alpha) RESCALE(5u, o5, alpha) RESCALE(6u, o6, alpha) RESCALE(7u, o7, alpha)
    }
    float sum = 0.0;
    [[unroll]] for (uint t = 0u; t < KC / 8u; t += 2u) {
      const vec4 a = exp(s[t] - m_new), b = exp(s[t + 1u] - m_new);  // masked: exp(LOWEST - m) = 0
      sum += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
      Ps[(sg * 16u + r) * LP + KC / 16u * part + t / 2u] =
          uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
    }
    l = l * alpha + sum + subgroupShuffleXor(sum, 1u);
    m = m_new;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    coopMatLoad(pa0, Ps, sg * 16u * LP, LP, ROW_MAJOR);
    coopMatLoad(pa1, Ps, sg * 16u * LP + 2u, LP, ROW_MAJOR);
    PV(0u, o0) PV(1u, o1) PV(2u, o2) PV(3u, o3) PV(4u, o4) PV(5u, o5) PV(6u, o6) PV(7u, o7)
    subgroupBarrier();  // Ss and Ps are rewritten by the next chunk
  }
  if (keys == 0u) return;  // queries past n: nothing to store (no workgroup barrier below)

  // O / l to o, a 16x16 tile at a time through Ss.
  const float inv = 1.0 / l;
  const bool store = i0 + r < pc.n;
  const uint ob = (i0 + r) * pc.o_stride + hh * pc.hd + 8u * part;
#define OUT(t, ot)                                                                                 \
  if (t < HD16) {                                                                                  \
    coopMatStore(ot, Ss, s_base, LS, ROW_MAJOR);                                                   \
    subgroupMemoryBarrierShared();                                                                 \
    subgroupBarrier();                                                                             \
    if (store) {                                                                                   \
      const vec4 a = Ss[s_row + 2u * part] * inv, b = Ss[s_row + 2u * part + 1u] * inv;            \
      const uint at = ob + 16u * t;                                                                \
      o[at] = a.x, o[at + 1u] = a.y, o[at + 2u] = a.z, o[at + 3u] = a.w;                           \
      o[at + 4u] = b.x, o[at + 5u] = b.y, o[at + 6u] = b.z, o[at + 7u] = b.w;                      \
    }                                                                                              \
    subgroupBarrier();                                                                             \
  }
  OUT(0u, o0) OUT(1u, o1) OUT(2u, o2) OUT(3u, o3) OUT(4u, o4) OUT(5u, o5) OUT(6u, o6) OUT(7u, o7)
}
