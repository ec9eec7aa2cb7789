// Decoding of packed 32-bit weight words, shared by the decode GEMVs (gemv_common.glsl,
// decode_layer.comp): f16 pairs, int8 bytes and int4 nibbles as vec4s.
vec4 f16x4(uint a, uint b) { return vec4(unpackHalf2x16(a), unpackHalf2x16(b)); }

// Signed bytes and nibbles of a word as floats without an int-to-float conversion (a quarter-rate
// instruction on NVIDIA GPUs): flipped to offset binary (q + 128, q + 8), OR'd into the mantissa of
// 2^23 (exact), and 2^23 + the offset subtracted (exact).
vec4 i8x4(uint w) {  // bytes 0..3
  const uint t = w ^ 0x80808080u;
  return uintBitsToFloat(((uvec4(t) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu) | 0x4B000000u) - 8388736.0;
}
vec4 i4lo(uint w) {  // nibbles 0..3
  return uintBitsToFloat(((uvec4(w ^ 0x88888888u) >> uvec4(0u, 4u, 8u, 12u)) & 0xFu) | 0x4B000000u) - 8388616.0;
}
vec4 i4hi(uint w) {  // nibbles 4..7
  return uintBitsToFloat(((uvec4(w ^ 0x88888888u) >> uvec4(16u, 20u, 24u, 28u)) & 0xFu) | 0x4B000000u) - 8388616.0;
}

// x · (the columns of the 16-byte weight word WD) per encoding (int8 / int4 unscaled). X(j) is x's
// j-th vec4 of the word's columns (j < 1, 2, 4, 8: f32, f16, int8, int4), the includer's macro: a load, a register
// or a shared-memory read; each is evaluated once, in order.
#define WORD_DOT_F32(WD, X) dot(uintBitsToFloat(WD), X(0))
#define WORD_DOT_F16(WD, X) (dot(f16x4((WD).x, (WD).y), X(0)) + dot(f16x4((WD).z, (WD).w), X(1)))
#define WORD_DOT_I8(WD, X) \
  (dot(i8x4((WD).x), X(0)) + dot(i8x4((WD).y), X(1)) + dot(i8x4((WD).z), X(2)) + dot(i8x4((WD).w), X(3)))
#define WORD_DOT_I4(WD, X)                                                                             \
  (dot(i4lo((WD).x), X(0)) + dot(i4hi((WD).x), X(1)) + dot(i4lo((WD).y), X(2)) + dot(i4hi((WD).y), X(3)) + \
   dot(i4lo((WD).z), X(4)) + dot(i4hi((WD).z), X(5)) + dot(i4lo((WD).w), X(6)) + dot(i4hi((WD).w), X(7)))
