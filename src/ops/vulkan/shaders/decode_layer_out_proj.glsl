// decode_layer.comp's out_proj phase, h += att·Woᵀ + bo, with no grid barrier after the attention:
// tiles of Wo (a slice of SL columns, R rows) over the workgroups, each waiting for its SL values
// of att (tagged pairs, as the attention waits for q and k), so that it starts as soon as the heads
// it needs are done, and adding its rows' products into h with float atomics. Included by
// decode_layer.comp after decode_layer_gemv.glsl.
// The FFN's W2 (decode_layer_ffn.glsl) is added by the same method, written out there: through
// these functions its f16 pipeline ran W2 at half speed on the H200 (16.4 against 8.0 µs a block,
// the same source otherwise: a code generation effect, bench/vulkan_notes.md).

// A tile's layout: a row's SL columns are WS 16-byte words (128 bytes in f16), read by WS adjacent
// invocations, so that a load of the workgroup covers RPR rows and a chunk of LOADS loads CR rows.
const uint WS = SL / (4u * F), RPR = THREADS / WS, CR = RPR * LOADS;

// Load k of slice s of Wo, in the chunk of rows c0 .. (rows >= end read as zeros): invocation t
// reads word t % WS of row c0 + k·RPR + t / WS (out_word), and the word's scale (out_scale; int8:
// the row's, int4: its group's).
uvec4 out_word(uint s, uint c0, uint end, uint k) {
  const uint per_row = row_words(Q_DIM), r = c0 + k * RPR + tid / WS, v = s * WS + tid % WS;
#ifdef LLAMA
  return r < end && v < per_row ? row_word(1u, r, v) : uvec4(0u);
#else
  return r < end && v < per_row ? w_o[o_w.y + r * per_row + v] : uvec4(0u);
#endif
}
float out_scale(uint s, uint c0, uint end, uint k) {
  const uint per_row = row_words(Q_DIM), groups = (Q_DIM + pc.group - 1u) / pc.group;
  const uint r = c0 + k * RPR + tid / WS, v = s * WS + tid % WS;
  return !(r < end && v < per_row) ? 0.0
         : WTYPE == WT_INT8        ? scale_at(1u, r)
         : WTYPE == WT_INT4        ? scale_at(1u, r * groups + v * 32u / pc.group)
                                   : 1.0;
}

// Rows c0 .. min(c0 + CR, end) - 1 of slice s times the slice's values in f1s4, added into h (with
// the bias where `bias`): q and fq hold the chunk's words and leave with the next chunk's (< end).
// The partial dots go to w2_parts, and then each row's WS partials are summed by one invocation,
// which adds the row into h. The workgroup's barriers inside; f1s4 and w2_parts free on return.
void out_chunk(uint s, uint c0, uint end, bool bias, inout uvec4 q[LOADS], inout float fq[LOADS]) {
  const uint w = tid % WS;
  for (uint k = 0u; k < LOADS; ++k) {
    const uvec4 wd = q[k];
#define X(i) f1s4[F * w + uint(i)]
    float p;
    if (WTYPE == WT_F16) p = WORD_DOT_F16(wd, X);
    else if (WTYPE == WT_INT8) p = WORD_DOT_I8(wd, X) * fq[k];
    else if (WTYPE == WT_INT4) p = WORD_DOT_I4(wd, X) * fq[k];
    else p = dot(uintBitsToFloat(wd), f1s4[w]);
#undef X
    w2_parts[k * THREADS + tid] = p;
    if (c0 + CR < end) q[k] = out_word(s, c0 + CR, end, k), fq[k] = out_scale(s, c0 + CR, end, k);
  }
  barrier();
  for (uint i = tid; i < CR; i += THREADS) {  // row c0 + i: its partials from k = i / RPR
    const uint at = i / RPR * THREADS + i % RPR * WS;
    float sum = 0.0;
    for (uint u = 0u; u < WS; ++u) sum += w2_parts[at + u];
    if (c0 + i < end) atomicAdd(h[c0 + i], bias ? sum + bias_o(c0 + i) : sum);
  }
  barrier();
}

// Tile t is (slice t / row tiles, R rows), workgroup t's, grid-stride; its first words are loaded
// before the attention phase (out_proj_prefetch) and held through it. R: rows enough for one tile
// a workgroup, whole loads (H200 seed size: 512, so that in f16 the tile's 64 KB is one chunk, in
// flight during the attention).
uint out_rows() {
  const uint D = pc.dim, slices = (Q_DIM_D + SL - 1u) / SL, G = gl_NumWorkGroups.x;
  const uint r = ((D * slices + G - 1u) / G + RPR - 1u) / RPR * RPR;
  return min(r, (D + RPR - 1u) / RPR * RPR);
}
void out_proj_tile(uint t, out uint s, out uint r0, out uint end) {
  const uint R = out_rows(), row_tiles = (pc.dim + R - 1u) / R;
  s = t / row_tiles, r0 = t % row_tiles * R, end = min(pc.dim, r0 + R);
}
// This workgroup's first tile's first chunk of words (not their scales: out_proj_phase loads them,
// so that they are not held through the attention).
void out_proj_prefetch(out uvec4 q[LOADS]) {
  const uint R = out_rows(), tiles = (Q_DIM + SL - 1u) / SL * ((pc.dim + R - 1u) / R);
  uint s, r0, end;
  out_proj_tile(gl_WorkGroupID.x, s, r0, end);
  if (gl_WorkGroupID.x >= tiles) end = 0u;  // nothing: zeros
  for (uint k = 0u; k < LOADS; ++k) q[k] = out_word(s, r0, end, k);
}

// This token's value row at att's column c (of head hh): its KV head's element c % hd.
#ifdef LLAMA
#define VALUE_ROW(c, hh) (Q_DIM + KV_DIM + KV_HEAD(hh) * HD + (c) % HD)
#else
#define VALUE_ROW(c, hh) (2u * D + (c))
#endif
// Whether slice s's rows add the bias (the first slice's, where there is one).
#ifdef LLAMA
#define OUT_BIAS(s) ((s) == 0u && pc.out_bias != 0u)
#else
#define OUT_BIAS(s) (s) == 0u
#endif

// Its atomics wait for count 3: every workgroup's qkv staging has read h (block blk's count).
void out_proj_phase(inout uvec4 q[LOADS]) {
  const uint D = pc.dim, G = gl_NumWorkGroups.x, R = out_rows();
  const uint tiles = (Q_DIM_D + SL - 1u) / SL * ((D + R - 1u) / R);
  // This workgroup's own attention stores before its polls: the waits depend on other workgroups
  // only (see attention_phase).
  barrier();
  bool first = true;
  float fq[LOADS];
  for (uint t = gl_WorkGroupID.x; t < tiles; t += G) {
    uint s, r0, end;
    out_proj_tile(t, s, r0, end);
    for (uint k = 0u; k < LOADS; ++k) {
      if (!first) q[k] = out_word(s, r0, end, k);
      fq[k] = out_scale(s, r0, end, k);
    }
    // The slice's values, att's columns s·SL .. plus this token's value row times its head's
    // weight (the three pairs read together), by the last SL invocations while the first waits
    // for count 3 (the first tile; a barrier of shared memory only after them, which does not
    // wait for the words in flight).
    if (tid >= THREADS - SL) {
#ifdef LLAMA
      const uint j = tid - (THREADS - SL), c = min(s * SL + j, Q_DIM - 1u), hh = c / HD;
#else
      const uint j = tid - (THREADS - SL), c = min(s * SL + j, D - 1u), hh = c / (D / pc.heads);
#endif
      const uvec2 a = tagged_read(QKV_DIM + c), v = tagged_read(VALUE_ROW(c, hh)), w = tagged_read(WEIGHT_PAIRS + hh);
      const float x =
          tagged_settle(QKV_DIM + c, a) + tagged_settle(WEIGHT_PAIRS + hh, w) * tagged_settle(VALUE_ROW(c, hh), v);
      f1s4[j >> 2u][j & 3u] = s * SL + j < Q_DIM_D ? x : 0.0;
    }
    if (first && tid == 0u) wait_count(3u, G * (blk + 1u));
    barrier();
    if (first) mark(7u);
    first = false;
    for (uint c0 = r0; c0 < end; c0 += CR) out_chunk(s, c0, end, OUT_BIAS(s), q, fq);
  }
  if (first) mark(7u);  // no tile here
}
