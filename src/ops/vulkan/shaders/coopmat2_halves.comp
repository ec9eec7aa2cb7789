// gemm_coopmat2's activations as fp16: its tensor loads read a matrix's element type as stored.
// (Converting each element in a decode function instead needs buffer device addresses; the first
// version did, before its strides said their alignment: bench/vulkan_notes.md, 2026-12-02.)
// halves[i] = fp16(x[x_off + i]) for i < count, 8 an invocation (count a multiple of 8).
#version 450
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  uint count, x_off;
} pc;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Halves { uvec4 halves[]; };

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (8u * i >= pc.count) return;
  const uint at = pc.x_off + 8u * i;
  uvec4 h;
  for (uint j = 0u; j < 4u; ++j) h[j] = packHalf2x16(vec2(x[at + 2u * j], x[at + 2u * j + 1u]));
  halves[i] = h;
}
