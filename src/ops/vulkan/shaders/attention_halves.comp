// The operands of attention_coopmat.comp as fp16 in its scratch (cooperative-matrix loads take no
// fp32 to fp16 conversion): Qh (nq, D) = q · scale, Kh and Vh (KR, D) the key and value rows (each
// query head's copy of its key/value head's), D = heads · hd, nq = n rounded up to 16, KR = max(max_keys, keys) rounded up to 64; Kh at nq·D, Vh at
// (nq + KR)·D halves. Rows n .. nq - 1 of Qh and keys .. (keys rounded up to 64) - 1 of Kh and Vh
// are zero, so that the products of masked rows stay finite (a weight of 0 times a value row of
// garbage could be NaN); later rows are not written. Same push constants as attention.comp.
// Workgroup (x, y): 8 columns each for 64 invocations of row y: Qh's rows first, then Kh's and
// Vh's together.
#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform Push {
  uint n, heads, hd, keys, pos0, causal;
  uint q_off, q_stride, k_off, k_stride, v_off, v_stride, o_stride, max_keys;
  float scale;
  uint kv_group;  // query heads per key/value head: query head h reads head h / kv_group
} pc;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) writeonly buffer Halves { uvec4 hv[]; };
layout(std430, binding = 4) readonly buffer Position { uint position[]; };

// Eight floats from `at` (times s) as fp16 pairs; zero where !live.
#define EIGHT(buf, at, s, live)                                                                  \
  (live ? uvec4(packHalf2x16(vec2(buf[at], buf[at + 1u]) * s), packHalf2x16(vec2(buf[at + 2u], buf[at + 3u]) * s), \
                packHalf2x16(vec2(buf[at + 4u], buf[at + 5u]) * s), packHalf2x16(vec2(buf[at + 6u], buf[at + 7u]) * s)) \
        : uvec4(0u))

void main() {
  const uint D = pc.heads * pc.hd, D8 = D / 8u, c8 = gl_GlobalInvocationID.x;
  if (c8 >= D8) return;
  const uint nq = (pc.n + 15u) & ~15u, KR = (max(pc.max_keys, pc.keys) + 63u) & ~63u, r = gl_WorkGroupID.y;
  const uint c = 8u * c8, hh = c / pc.hd, d = c % pc.hd;  // hd % 16 == 0: the eight share a head
  if (r < nq) {
    hv[r * D8 + c8] = EIGHT(q, pc.q_off + r * pc.q_stride + hh * pc.hd + d, pc.scale, r < pc.n);
    return;
  }
  // Keys any query sees: causal, query n - 1 sees 0 .. p + n - 1 (p = pos0 + position[0]).
  const uint keys = pc.causal != 0u ? pc.pos0 + position[0] + pc.n : pc.keys, j = r - nq;
  if (j >= ((keys + 63u) & ~63u)) return;
  hv[(nq + j) * D8 + c8] = EIGHT(k, pc.k_off + j * pc.k_stride + (hh / pc.kv_group) * pc.hd + d, 1.0, j < keys);
  hv[(nq + KR + j) * D8 + c8] = EIGHT(v, pc.v_off + j * pc.v_stride + (hh / pc.kv_group) * pc.hd + d, 1.0, j < keys);
}
