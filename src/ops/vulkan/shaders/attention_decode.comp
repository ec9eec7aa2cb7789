// Decode attention (one query), the keys split into chunks of CHUNK so that heads x chunks
// workgroups share them (one workgroup per head alone leaves most of a GPU idle), and the chunks
// combined by the last of a head's workgroups to finish, in the same dispatch.
// Workgroup (chunk, h) scores its keys (each subgroup a key at a time, its lanes splitting the head
// dim, a subgroup sum), then writes to partials[(h * chunks + chunk) * (hd + 2) ..]: its max m, its
// sum l = Σ exp(s - m) and o = Σ exp(s - m)·v (hd floats). It then counts itself done on
// counters[h]; the workgroup that brings the count to the head's number of non-empty chunks
// combines them exactly as one softmax (M = max m, out = Σ o·exp(m - M) / Σ l·exp(m - M)) and sets
// the count back to zero for the next dispatch. Chunks past the last key do nothing. Layout and
// positions as in attention.comp (query 0 only; causal: keys 0 .. pos0 + position[0]).
#version 450
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
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer K4 { vec4 k4[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 2) readonly buffer V4 { vec4 v4[]; };
layout(std430, binding = 3) coherent buffer Partials { float partials[]; };  // read by another workgroup
layout(std430, binding = 4) readonly buffer Position { uint position[]; };
layout(std430, binding = 5) coherent buffer Counters { uint counters[]; };   // per head, zero between dispatches
layout(std430, binding = 6) writeonly buffer O { float o[]; };
const uint THREADS = 128u, CHUNK = 32u;
shared float qs[256];
shared float ps[CHUNK];   // scores, then exp(s - m)
shared vec4 pv[THREADS];  // p·V of each (vec4 column, key slice)
shared bool last;         // this workgroup combines the head
shared float red[THREADS];  // the combine's per-subgroup maxima and sums
shared float wts[THREADS];  // the combine's chunk weights exp(m - M)

void main() {
  const uint chunk = gl_WorkGroupID.x, h = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint keys = pc.causal != 0u ? pc.pos0 + position[0] + 1u : pc.keys;
  const uint first = chunk * CHUNK, row = pc.hd + 2u, dst = (h * gl_NumWorkGroups.x + chunk) * row;
  if (first >= keys) return;  // the whole workgroup: not one of the head's chunks
  const uint count = min(CHUNK, keys - first);
  const bool vec = pc.hd % 4u == 0u && pc.k_off % 4u == 0u && pc.k_stride % 4u == 0u &&
                   pc.v_off % 4u == 0u && pc.v_stride % 4u == 0u && pc.hd / 4u <= THREADS;
  for (uint c = tid; c < pc.hd; c += THREADS) qs[c] = q[pc.q_off + h * pc.hd + c];
  barrier();
  const uint lane = gl_SubgroupInvocationID, S = gl_SubgroupSize;
  if (vec && pc.hd <= 4u * S) {
    // A vec4 of each key per lane (head dim <= 4S), KEYS keys' loads issued before their sums.
    const uint KEYS = 8u, c = 4u * lane;
    for (uint j0 = gl_SubgroupID; j0 < count; j0 += gl_NumSubgroups * KEYS) {
      vec4 kv[KEYS];
      for (uint t = 0u; t < KEYS; ++t) {
        const uint j = j0 + t * gl_NumSubgroups;
        kv[t] = j < count && c < pc.hd ? k4[(pc.k_off + (first + j) * pc.k_stride + (h / pc.kv_group) * pc.hd + c) >> 2] : vec4(0.0);
      }
      const vec4 qv = c < pc.hd ? vec4(qs[c], qs[c + 1u], qs[c + 2u], qs[c + 3u]) : vec4(0.0);
      for (uint t = 0u; t < KEYS; ++t) {
        const uint j = j0 + t * gl_NumSubgroups;
        const float d = subgroupAdd(dot(qv, kv[t]));
        if (j < count && subgroupElect()) ps[j] = d * pc.scale;
      }
    }
  } else {
    for (uint j = gl_SubgroupID; j < count; j += gl_NumSubgroups) {
      const uint kb = pc.k_off + (first + j) * pc.k_stride + (h / pc.kv_group) * pc.hd;
      float d = 0.0;
      if (vec) {
        for (uint c = 4u * lane; c < pc.hd; c += 4u * S)
          d += dot(vec4(qs[c], qs[c + 1u], qs[c + 2u], qs[c + 3u]), k4[(kb + c) >> 2]);
      } else {
        for (uint c = lane; c < pc.hd; c += S) d += qs[c] * k[kb + c];
      }
      d = subgroupAdd(d);
      if (subgroupElect()) ps[j] = d * pc.scale;
    }
  }
  barrier();
  float m = ps[0];
  for (uint j = 1u; j < count; ++j) m = max(m, ps[j]);
  barrier();  // every thread has read the scores
  if (tid < count) ps[tid] = exp(ps[tid] - m);
  barrier();
  float l = 0.0;
  for (uint j = 0u; j < count; ++j) l += ps[j];
  if (tid == 0u) partials[dst] = m, partials[dst + 1u] = l;
  if (vec) {
    const uint cols = pc.hd / 4u, slices = THREADS / cols, g = tid % cols, slice = tid / cols;
    vec4 acc = vec4(0.0);
    if (slice < slices)
      for (uint j0 = slice; j0 < count; j0 += 8u * slices) {  // eight keys' loads in flight
        vec4 vv[8];
        for (uint t = 0u; t < 8u; ++t) {
          const uint j = j0 + t * slices;
          vv[t] = j < count ? v4[(pc.v_off + (first + j) * pc.v_stride + (h / pc.kv_group) * pc.hd) / 4u + g] : vec4(0.0);
        }
        for (uint t = 0u; t < 8u; ++t)
          if (j0 + t * slices < count) acc += ps[j0 + t * slices] * vv[t];
      }
    pv[tid] = acc;
    barrier();
    if (tid < cols) {
      vec4 t = vec4(0.0);
      for (uint sl = 0u; sl < slices; ++sl) t += pv[sl * cols + tid];
      const uint o = dst + 2u + 4u * tid;
      partials[o] = t.x, partials[o + 1u] = t.y, partials[o + 2u] = t.z, partials[o + 3u] = t.w;
    }
  } else {
    for (uint c = tid; c < pc.hd; c += THREADS) {
      float acc = 0.0;
      for (uint j = 0u; j < count; ++j) acc += ps[j] * v[pc.v_off + (first + j) * pc.v_stride + (h / pc.kv_group) * pc.hd + c];
      partials[dst + 2u + c] = acc;
    }
  }
  // Done: this workgroup's partials visible to the device, then counted.
  memoryBarrierBuffer();
  barrier();
  const uint chunks = (keys + CHUNK - 1u) / CHUNK;
  if (tid == 0u) last = atomicAdd(counters[h], 1u) == chunks - 1u;
  barrier();
  if (!last) return;
  memoryBarrierBuffer();  // the other workgroups' partials, seen after their counts
  // The chunks' maxima and sums, spread over the threads: M = max m, total = Σ l·exp(m - M).
  const uint base = h * gl_NumWorkGroups.x * row;
  float mx = -3.402823e38;
  for (uint c = tid; c < chunks; c += THREADS) mx = max(mx, partials[base + c * row]);
  mx = subgroupMax(mx);
  if (subgroupElect()) red[gl_SubgroupID] = mx;
  barrier();
  mx = red[0];
  for (uint i = 1u; i < gl_NumSubgroups; ++i) mx = max(mx, red[i]);
  barrier();
  float total = 0.0;
  for (uint c = tid; c < chunks; c += THREADS) total += partials[base + c * row + 1u] * exp(partials[base + c * row] - mx);
  total = subgroupAdd(total);
  if (subgroupElect()) red[gl_SubgroupID] = total;
  barrier();
  total = 0.0;
  for (uint i = 0u; i < gl_NumSubgroups; ++i) total += red[i];
  const float inv = 1.0 / total;
  // out = Σ o·exp(m - M) / total, the chunks' weights staged THREADS at a time.
  float acc[2] = float[2](0.0, 0.0);  // elements tid and tid + THREADS (head dim <= 256)
  for (uint c0 = 0u; c0 < chunks; c0 += THREADS) {
    barrier();
    if (c0 + tid < chunks) wts[tid] = exp(partials[base + (c0 + tid) * row] - mx);
    barrier();
    const uint n = min(THREADS, chunks - c0);
    for (uint i = 0u; i < 2u; ++i) {
      const uint e = tid + i * THREADS;
      if (e < pc.hd)
        for (uint c = 0u; c < n; ++c) acc[i] += partials[base + (c0 + c) * row + 2u + e] * wts[c];
    }
  }
  for (uint i = 0u; i < 2u; ++i)
    if (tid + i * THREADS < pc.hd) o[h * pc.hd + tid + i * THREADS] = acc[i] * inv;
  if (tid == 0u) counters[h] = 0u;
}
