// Decode attention (one query), pass 1 of 2: the keys are split into chunks of CHUNK so that
// heads x chunks workgroups share them (one workgroup per head alone leaves most of a GPU idle).
// Workgroup (chunk, h) scores its keys (each subgroup a key at a time, its lanes splitting the head
// dim, a subgroup sum), then writes to partials[(h * chunks + chunk) * (hd + 2) ..]: its max m, its
// sum l = Σ exp(s - m) and o = Σ exp(s - m)·v (hd floats). A chunk past the last key writes
// m = -FLT_MAX, l = 0, o = 0. attention_combine.comp is pass 2. Layout and positions as in
// attention.comp (query 0 only; causal: keys 0 .. pos0 + position[0]).
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128) in;
layout(push_constant) uniform Push {
  uint n, heads, hd, keys, pos0, causal;
  uint q_off, q_stride, k_off, k_stride, v_off, v_stride, o_stride, max_keys;
  float scale;
} pc;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer K4 { vec4 k4[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 2) readonly buffer V4 { vec4 v4[]; };
layout(std430, binding = 3) writeonly buffer Partials { float partials[]; };
layout(std430, binding = 4) readonly buffer Position { uint position[]; };
const uint THREADS = 128u, CHUNK = 32u;
shared float qs[256];
shared float ps[CHUNK];   // scores, then exp(s - m)
shared vec4 pv[THREADS];  // p·V of each (vec4 column, key slice)

void main() {
  const uint chunk = gl_WorkGroupID.x, h = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint keys = pc.causal != 0u ? pc.pos0 + position[0] + 1u : pc.keys;
  const uint first = chunk * CHUNK, dst = (h * gl_NumWorkGroups.x + chunk) * (pc.hd + 2u);
  if (first >= keys) {  // the whole workgroup: nothing here
    for (uint c = tid; c < pc.hd + 2u; c += THREADS) partials[dst + c] = c == 0u ? -3.402823e38 : 0.0;
    return;
  }
  const uint count = min(CHUNK, keys - first);
  const bool vec = pc.hd % 4u == 0u && pc.k_off % 4u == 0u && pc.k_stride % 4u == 0u &&
                   pc.v_off % 4u == 0u && pc.v_stride % 4u == 0u && pc.hd / 4u <= THREADS;
  for (uint c = tid; c < pc.hd; c += THREADS) qs[c] = q[pc.q_off + h * pc.hd + c];
  barrier();
  const uint lane = gl_SubgroupInvocationID, S = gl_SubgroupSize;
  for (uint j = gl_SubgroupID; j < count; j += gl_NumSubgroups) {
    const uint kb = pc.k_off + (first + j) * pc.k_stride + h * pc.hd;
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
      for (uint j = slice; j < count; j += slices)
        acc += ps[j] * v4[(pc.v_off + (first + j) * pc.v_stride + h * pc.hd) / 4u + g];
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
      for (uint j = 0u; j < count; ++j) acc += ps[j] * v[pc.v_off + (first + j) * pc.v_stride + h * pc.hd + c];
      partials[dst + 2u + c] = acc;
    }
  }
}
