// Decode attention, pass 2 of 2 (after attention_decode.comp): per head, the chunks' (m, l, o)
// combined exactly as one softmax: M = max m, out = Σ o·exp(m - M) / Σ l·exp(m - M).
#version 450
layout(local_size_x = 128) in;
layout(push_constant) uniform Push { uint hd, chunks; } pc;
layout(std430, binding = 0) readonly buffer Partials { float partials[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };

void main() {
  const uint h = gl_WorkGroupID.x, row = pc.hd + 2u, base = h * pc.chunks * row;
  float mx = -3.402823e38;
  for (uint c = 0u; c < pc.chunks; ++c) mx = max(mx, partials[base + c * row]);
  float l = 0.0;
  for (uint c = 0u; c < pc.chunks; ++c) l += partials[base + c * row + 1u] * exp(partials[base + c * row] - mx);
  const float inv = 1.0 / l;
  for (uint e = gl_LocalInvocationID.x; e < pc.hd; e += gl_WorkGroupSize.x) {
    float acc = 0.0;
    for (uint c = 0u; c < pc.chunks; ++c)
      acc += partials[base + c * row + 2u + e] * exp(partials[base + c * row] - mx);
    o[h * pc.hd + e] = acc * inv;
  }
}
