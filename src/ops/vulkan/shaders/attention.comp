// Attention of n queries over a key/value store, one workgroup per (query, head): scores into
// shared memory (a scratch row in a buffer beyond SHARED_KEYS keys), softmax (max and sum reduced
// over subgroups and shared memory), then p·V.
// Queries: Q[q_off + i * q_stride + h * hd + c]; keys and values likewise with their own offsets
// and strides (the packed qkv rows for the seed preset, the KV cache for the causal one).
// Causal: query i sees keys 0 .. p + i, p = pos0 + position[0] (read on the device, so that one
// recorded decode step serves every position); otherwise all `keys`.
// When hd, the offsets and the strides are multiples of 4, keys and values are read as vec4: a
// score is hd/4 vec4 loads, and p·V splits the keys into 128 / (hd/4) slices (one thread per vec4
// of the output and slice, a slice's threads reading whole value rows), summed through shared
// memory at the end; else one thread per key, then one per output element.
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
layout(std430, binding = 3) coherent buffer Scores { float s[]; };
layout(std430, binding = 4) writeonly buffer O { float o[]; };
layout(std430, binding = 5) readonly buffer Position { uint position[]; };
const uint THREADS = 128u;
const uint SHARED_KEYS = 3072u;  // 12 KiB: with the rest, under the 16 KiB every device has
shared float qs[256];
shared float partial[THREADS];
shared float ss[SHARED_KEYS];  // the scores when keys <= SHARED_KEYS: no round trip through memory
shared vec4 pv[THREADS];       // p·V of each (vec4 column, key slice)

bool scores_shared = false;
float score(uint srow, uint j) { return scores_shared ? ss[j] : s[srow + j]; }
void set_score(uint srow, uint j, float x) {
  if (scores_shared) ss[j] = x;
  else s[srow + j] = x;
}

float reduce_max(float x) {
  x = subgroupMax(x);
  barrier();
  if (subgroupElect()) partial[gl_SubgroupID] = x;
  barrier();
  float m = partial[0];
  for (uint i = 1u; i < gl_NumSubgroups; ++i) m = max(m, partial[i]);
  return m;
}

float reduce_sum(float x) {
  x = subgroupAdd(x);
  barrier();
  if (subgroupElect()) partial[gl_SubgroupID] = x;
  barrier();
  float t = 0.0;
  for (uint i = 0u; i < gl_NumSubgroups; ++i) t += partial[i];
  return t;
}

void main() {
  const uint i = gl_WorkGroupID.x, h = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint keys = pc.causal != 0u ? pc.pos0 + position[0] + i + 1u : pc.keys;
  const uint srow = (i * pc.heads + h) * pc.max_keys;
  const bool vec = pc.hd % 4u == 0u && pc.k_off % 4u == 0u && pc.k_stride % 4u == 0u &&
                   pc.v_off % 4u == 0u && pc.v_stride % 4u == 0u && pc.hd / 4u <= THREADS;
  scores_shared = keys <= SHARED_KEYS;
  for (uint c = tid; c < pc.hd; c += THREADS) qs[c] = q[pc.q_off + i * pc.q_stride + h * pc.hd + c];
  barrier();
  float mx = -3.402823e38;
  for (uint j = tid; j < keys; j += THREADS) {
    const uint kb = pc.k_off + j * pc.k_stride + (h / pc.kv_group) * pc.hd;
    float d = 0.0;
    if (vec) {
      for (uint c = 0u; c < pc.hd; c += 4u)
        d += dot(vec4(qs[c], qs[c + 1u], qs[c + 2u], qs[c + 3u]), k4[(kb + c) >> 2]);
    } else {
      for (uint c = 0u; c < pc.hd; ++c) d += qs[c] * k[kb + c];
    }
    d *= pc.scale;
    set_score(srow, j, d);
    mx = max(mx, d);
  }
  mx = reduce_max(mx);
  float sum = 0.0;
  for (uint j = tid; j < keys; j += THREADS) {
    const float e = exp(score(srow, j) - mx);
    set_score(srow, j, e);
    sum += e;
  }
  sum = reduce_sum(sum);
  memoryBarrierBuffer();
  memoryBarrierShared();
  barrier();
  const float inv = 1.0 / sum;
  const uint ob = i * pc.o_stride + h * pc.hd;
  if (vec) {
    const uint cols = pc.hd / 4u, slices = THREADS / cols, g = tid % cols, slice = tid / cols;
    vec4 acc = vec4(0.0);
    if (slice < slices)
      for (uint j = slice; j < keys; j += slices)
        acc += score(srow, j) * v4[(pc.v_off + j * pc.v_stride + (h / pc.kv_group) * pc.hd) / 4u + g];
    pv[tid] = acc;
    barrier();
    if (tid < cols) {
      vec4 t = vec4(0.0);
      for (uint sl = 0u; sl < slices; ++sl) t += pv[sl * cols + tid];
      t *= inv;
      o[ob + 4u * tid] = t.x, o[ob + 4u * tid + 1u] = t.y, o[ob + 4u * tid + 2u] = t.z, o[ob + 4u * tid + 3u] = t.w;
    }
  } else {
    for (uint c = tid; c < pc.hd; c += THREADS) {
      float acc = 0.0;
      for (uint j = 0u; j < keys; ++j) acc += score(srow, j) * v[pc.v_off + j * pc.v_stride + (h / pc.kv_group) * pc.hd + c];
      o[ob + c] = acc * inv;
    }
  }
}
