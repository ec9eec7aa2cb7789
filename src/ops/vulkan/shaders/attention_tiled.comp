// Attention of n queries over a key/value store (prefill; the seed preset's whole rows), QB
// queries a workgroup: workgroup (x, h) takes queries QB·x .. QB·x + QB - 1 of head h, so that each
// key and value row read serves QB queries (attention.comp, a workgroup per query, reads them once
// per query: 2 GB of K and V a layer for 512 tokens at the seed size). Same arguments and results
// as attention.comp up to summation order, for vec4 layouts and head dims <= 128 (Ops::attention
// takes attention.comp otherwise).
// Keys go in chunks of KC = 32 with an online softmax (running max m and sum l per query, the
// output rescaled by exp(m_old - m_new) when the max grows):
//   1. scores: thread t takes key t % KC of the chunk for queries 4·(t / KC) .. + 3 (q from shared
//      memory, the key row as vec4 loads), into S (masked keys: -FLT_MAX, weight 0);
//   2. per query (threads 0 .. QB - 1): the chunk's max, p = exp(s - m) into S, l and the rescale;
//   3. p·V: thread t takes vec4 column t % KC of the output for the same 4 queries, over the
//      chunk's value rows (one vec4 load each serves 4 queries).
// Where subgroups are KC wide, step 2 is subgroup reductions instead (below), with no workgroup
// barrier in the loop.
// Causal: query i sees keys 0 .. p + i, p = pos0 + position[0]; otherwise all `keys`.
#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128) in;
layout(push_constant) uniform Push {
  uint n, heads, hd, keys, pos0, causal;
  uint q_off, q_stride, k_off, k_stride, v_off, v_stride, o_stride, max_keys;
  float scale;
  uint kv_group;  // query heads per key/value head: query head h reads head h / kv_group
} pc;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K4 { vec4 k4[]; };
layout(std430, binding = 2) readonly buffer V4 { vec4 v4[]; };
// Binding 3: unused (attention.comp's scratch scores).
layout(std430, binding = 4) writeonly buffer O { float o[]; };
layout(std430, binding = 5) readonly buffer Position { uint position[]; };

const uint THREADS = 128u, QB = 16u, KC = 32u, QT = QB / (THREADS / KC), MAX_HD4 = 32u;
const float LOWEST = -3.402823e38;
shared vec4 qs[QB * MAX_HD4];  // the block's queries, scaled, (query, vec4 column)
shared float S[QB * KC];       // the chunk's scores, then weights, (query, key)
shared float m_s[QB], l_s[QB], alpha_s[QB];  // per query (the workgroup path)

// This invocation's part: key (and output vec4 column) `lane` of a chunk, queries q0 .. q0 + QT - 1
// of the block i0 .., head h.
uint h, i0, hd4, lane, q0, p0, last, keys;
float s[QT];    // the chunk's scores of key c0 + lane
vec4 acc[QT];   // p·V so far, unnormalised

// s: key c0 + lane's scores (0 past the keys).
void chunk_scores(uint c0) {
  const uint j = c0 + lane;
  [[unroll]] for (uint t = 0u; t < QT; ++t) s[t] = 0.0;
  if (j >= keys) return;
  const uint kb = (pc.k_off + j * pc.k_stride + (h / pc.kv_group) * pc.hd) / 4u;
  for (uint c = 0u; c < hd4; ++c) {
    const vec4 kv = k4[kb + c];
    [[unroll]] for (uint t = 0u; t < QT; ++t) s[t] += dot(qs[(q0 + t) * MAX_HD4 + c], kv);
  }
}

// Whether query q0 + t sees key j.
bool sees(uint t, uint j) { return j < keys && (pc.causal == 0u || j <= p0 + min(i0 + q0 + t, last)); }

// acc = acc · alpha + the chunk's weights in S times its value rows, output vec4 column `lane`.
void add_values(uint c0, vec4 alpha) {
  if (lane >= hd4) return;
  [[unroll]] for (uint t = 0u; t < QT; ++t) acc[t] *= alpha[t];
  const uint kend = min(KC, keys - c0);
  for (uint k = 0u; k < kend; ++k) {
    const vec4 vv = v4[(pc.v_off + (c0 + k) * pc.v_stride + (h / pc.kv_group) * pc.hd) / 4u + lane];
    [[unroll]] for (uint t = 0u; t < QT; ++t) acc[t] += S[(q0 + t) * KC + k] * vv;
  }
}

void store_output(vec4 l) {
  if (lane >= hd4) return;
  [[unroll]] for (uint t = 0u; t < QT; ++t) {
    const uint i = i0 + q0 + t;
    if (i >= pc.n) continue;
    const vec4 r = acc[t] / l[t];
    const uint ob = i * pc.o_stride + h * pc.hd + 4u * lane;
    o[ob] = r.x, o[ob + 1u] = r.y, o[ob + 2u] = r.z, o[ob + 3u] = r.w;
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  h = gl_WorkGroupID.y, i0 = gl_WorkGroupID.x * QB, hd4 = pc.hd / 4u, lane = tid % KC, q0 = (tid / KC) * QT;
  p0 = pc.pos0 + position[0];
  last = min(i0 + QB, pc.n) - 1u;                       // the block's last query
  keys = pc.causal != 0u ? p0 + last + 1u : pc.keys;    // keys any of its queries sees
  for (uint e = tid; e < QB * hd4; e += THREADS) {
    const uint qi = e / hd4, c = e % hd4, i = min(i0 + qi, last);  // past n: a copy of the last
    const uint at = pc.q_off + i * pc.q_stride + h * pc.hd + 4u * c;
    qs[qi * MAX_HD4 + c] = vec4(q[at], q[at + 1u], q[at + 2u], q[at + 3u]) * pc.scale;
  }
  if (tid < QB) m_s[tid] = LOWEST, l_s[tid] = 0.0;
  [[unroll]] for (uint t = 0u; t < QT; ++t) acc[t] = vec4(0.0);
  barrier();
  if (gl_SubgroupSize == KC && gl_NumSubgroups == THREADS / KC) {
    // Subgroups of KC (NVIDIA, Apple): subgroup s takes queries QT·s .. QT·s + QT - 1 and its
    // invocation i key i of each chunk (from the subgroup's own ids: Vulkan does not promise
    // which invocations make up a subgroup), so a subgroup holds its queries' scores of the whole
    // chunk, the softmax's max and sum are subgroup reductions, m and l stay in registers and S
    // is the subgroup's own: no workgroup barrier in the loop (H200, seed size, 512 tokens: 200 µs
    // a layer against 227 through shared memory).
    lane = gl_SubgroupInvocationID, q0 = gl_SubgroupID * QT;
    vec4 m = vec4(LOWEST), l = vec4(0.0);
    for (uint c0 = 0u; c0 < keys; c0 += KC) {
      chunk_scores(c0);
      vec4 alpha;
      [[unroll]] for (uint t = 0u; t < QT; ++t) {
        const bool seen = sees(t, c0 + lane);
        const float m_new = max(m[t], subgroupMax(seen ? s[t] : LOWEST));
        const float p = seen ? exp(s[t] - m_new) : 0.0;
        alpha[t] = exp(m[t] - m_new);
        l[t] = l[t] * alpha[t] + subgroupAdd(p), m[t] = m_new;
        S[(q0 + t) * KC + lane] = p;
      }
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      add_values(c0, alpha);
      subgroupMemoryBarrierShared();
      subgroupBarrier();  // S is rewritten by the next chunk
    }
    store_output(l);
    return;
  }
  for (uint c0 = 0u; c0 < keys; c0 += KC) {
    chunk_scores(c0);  // 1.
    [[unroll]] for (uint t = 0u; t < QT; ++t) S[(q0 + t) * KC + lane] = sees(t, c0 + lane) ? s[t] : LOWEST;
    barrier();
    if (tid < QB) {  // 2. the softmax's running max and sum, per query
      float mc = LOWEST;
      for (uint k = 0u; k < KC; ++k) mc = max(mc, S[tid * KC + k]);
      const float m_new = max(m_s[tid], mc), alpha = exp(m_s[tid] - m_new);
      float sum = 0.0;
      for (uint k = 0u; k < KC; ++k) {
        const float p = exp(S[tid * KC + k] - m_new);  // masked: 0
        S[tid * KC + k] = p;
        sum += p;
      }
      l_s[tid] = l_s[tid] * alpha + sum, m_s[tid] = m_new, alpha_s[tid] = alpha;
    }
    barrier();
    add_values(c0, vec4(alpha_s[q0], alpha_s[q0 + 1u], alpha_s[q0 + 2u], alpha_s[q0 + 3u]));  // 3.
    barrier();  // S is rewritten by the next chunk
  }
  store_output(vec4(l_s[q0], l_s[q0 + 1u], l_s[q0 + 2u], l_s[q0 + 3u]));
}
