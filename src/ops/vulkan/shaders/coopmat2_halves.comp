// gemm_coopmat2's activations as fp16: its tensor loads read a matrix's element type as stored.
// (Converting each element in a decode function instead needs buffer device addresses; the first
// version did, before its strides said their alignment: bench/vulkan_notes.md, 2026-12-02.)
// halves[i] = fp16(x[x_off + i]) for i < count, 8 an invocation (count a multiple of 8), read as
// two vec4s where x_off % 4 == 0 (so that a subgroup's loads are contiguous 16-byte words).
#version 450
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  uint count, x_off;
} pc;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) writeonly buffer Halves { uvec4 halves[]; };

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (8u * i >= pc.count) return;
  const uint at = pc.x_off + 8u * i;
  vec4 a, b;
  if (pc.x_off % 4u == 0u) {
    a = x4[at / 4u], b = x4[at / 4u + 1u];
  } else {
    a = vec4(x[at], x[at + 1u], x[at + 2u], x[at + 3u]);
    b = vec4(x[at + 4u], x[at + 5u], x[at + 6u], x[at + 7u]);
  }
  halves[i] = uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
}
