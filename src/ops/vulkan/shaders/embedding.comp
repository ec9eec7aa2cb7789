// Embedding lookup: x (n, D) = E[tokens[i], :] for the tokens whose id falls in this chunk of E
// (rows [row_base, row_base + rows)); E in f32 or f16, read as raw words.
#version 450
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint n, dim, row_base, rows, f16; } pc;
layout(std430, binding = 0) readonly buffer Tok { uint tokens[]; };
layout(std430, binding = 1) readonly buffer E { uint words[]; };
layout(std430, binding = 2) writeonly buffer Out { float x[]; };

void main() {
  const uint i = gl_WorkGroupID.y, t = tokens[i];
  if (t < pc.row_base || t >= pc.row_base + pc.rows) return;
  for (uint c = gl_LocalInvocationID.x; c < pc.dim; c += gl_WorkGroupSize.x) {
    const uint e = (t - pc.row_base) * pc.dim + c;
    x[i * pc.dim + c] = pc.f16 != 0u ? unpackHalf2x16(words[e >> 1])[e & 1u] : uintBitsToFloat(words[e]);
  }
}
