// Attention of n queries over a key/value store, one workgroup per (query, head): scores into
// shared memory (a scratch row in a buffer beyond SHARED_KEYS keys), softmax (max and sum reduced over subgroups and shared memory), then p·V.
// Queries: Q[q_off + i * q_stride + h * hd + c]; keys and values likewise with their own offsets
// and strides (the packed qkv rows for the seed preset, the KV cache for the causal one).
// Causal: query i sees keys 0 .. p + i, p = pos0 + position[0] (read on the device, so that one
// recorded decode step serves every position); otherwise all `keys`.
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
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) coherent buffer Scores { float s[]; };
layout(std430, binding = 4) writeonly buffer O { float o[]; };
layout(std430, binding = 5) readonly buffer Position { uint position[]; };
const uint SHARED_KEYS = 3072u;  // 12 KiB: with the rest, under the 16 KiB every device has
shared float qs[256];
shared float partial[128];
shared float ss[SHARED_KEYS];  // the scores when keys <= SHARED_KEYS: no round trip through memory

bool scores_shared = false;
float score(uint srow, uint j) { return scores_shared ? ss[j] : s[srow + j]; }
void set_score(uint srow, uint j, float v) {
  if (scores_shared) ss[j] = v;
  else s[srow + j] = v;
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
  const uint nt = gl_WorkGroupSize.x;
  const uint keys = pc.causal != 0u ? pc.pos0 + position[0] + i + 1u : pc.keys;
  const uint srow = (i * pc.heads + h) * pc.max_keys;
  scores_shared = keys <= SHARED_KEYS;
  for (uint c = tid; c < pc.hd; c += nt) qs[c] = q[pc.q_off + i * pc.q_stride + h * pc.hd + c];
  barrier();
  float mx = -3.402823e38;
  for (uint j = tid; j < keys; j += nt) {
    const uint kb = pc.k_off + j * pc.k_stride + h * pc.hd;
    float d = 0.0;
    for (uint c = 0u; c < pc.hd; ++c) d += qs[c] * k[kb + c];
    d *= pc.scale;
    set_score(srow, j, d);
    mx = max(mx, d);
  }
  mx = reduce_max(mx);
  float sum = 0.0;
  for (uint j = tid; j < keys; j += nt) {
    const float e = exp(score(srow, j) - mx);
    set_score(srow, j, e);
    sum += e;
  }
  sum = reduce_sum(sum);
  memoryBarrierBuffer();
  memoryBarrierShared();
  barrier();
  const float inv = 1.0 / sum;
  for (uint c = tid; c < pc.hd; c += nt) {
    float acc = 0.0;
    for (uint j = 0u; j < keys; ++j) acc += score(srow, j) * v[pc.v_off + j * pc.v_stride + h * pc.hd + c];
    o[i * pc.o_stride + h * pc.hd + c] = acc * inv;
  }
}
