// decode_layer.comp's FFN phase: slices of f1 in shared memory, W2's columns added into h with
// float atomics; included by decode_layer.comp after decode_layer_out_proj.glsl (WS, RPR, CR).

// Slice s: rows s·SL .. of W1 (4D of them; past the end read as the last and dropped), taken by
// the subgroups FR at a time, set i of them rows s·SL + i·FR ... (rr[FR ..]: unused). LLAMA
// (SwiGLU): slice s's outputs s·SL + j read gate row s·SL + j and up row F + s·SL + j, in pairs
// (rr[2p], rr[2p + 1]), FR / 2 outputs a set: W1_SETS sets a slice.
#ifdef LLAMA
void ffn_rows(uint s, uint set, out uint rr[MAXR]) {
  for (uint i = 0u; i < MAXR; ++i) {
    const uint p = min(i, FR - 1u), j = min(s * SL + set * FR / 2u + p / 2u, pc.ffn - 1u);
    rr[i] = (p & 1u) * pc.ffn + j;
  }
}
#define W1_SETS (2u * SL / FR)
#else
void ffn_rows(uint s, uint set, out uint rr[MAXR]) {
  for (uint i = 0u; i < MAXR; ++i) rr[i] = min(s * SL + set * FR + min(i, FR - 1u), 4u * pc.dim - 1u);
}
#define W1_SETS (SL / FR)
#endif

void ffn_prefetch(out uvec4 pre[LOADS]) {  // the words this invocation's ffn_phase loads first
  for (uint k = 0u; k < LOADS; ++k) pre[k] = uvec4(0u);
  if (gl_WorkGroupID.x * SL >= FFN_DIM || gl_SubgroupID >= W1_SETS) return;
  uint rr[MAXR];
  ffn_rows(gl_WorkGroupID.x, gl_SubgroupID, rr);
  load_step(2u, row_words(pc.dim), FR, 1u, rr, gl_SubgroupInvocationID, pre);
}

// Load k of W2's slice s, rows c0 .. c0 + CR - 1 (CR = RPR·LOADS), coalesced: invocation t reads
// word t % WS of row c0 + k·RPR + t / WS (a row's WS words in WS adjacent lanes), and the word's
// scale (int8: the row's; int4: its group's).
void w2_load_one(uint s, uint c0, uint k, out uvec4 q, out float fq) {
  const uint D = pc.dim, per_row2 = row_words(FFN_DIM_D), w = tid % WS;
  const uint groups2 = (FFN_DIM_D + pc.group - 1u) / pc.group;
  const uint r = c0 + k * RPR + tid / WS, v = s * WS + w;
  const bool ok = r < D && v < per_row2;
#ifdef LLAMA
  q = ok ? row_word(3u, r, v) : uvec4(0u);
#else
  q = ok ? w_2[o_w.w + r * per_row2 + v] : uvec4(0u);
#endif
  fq = !ok                 ? 0.0
       : WTYPE == WT_INT8  ? scale_at(3u, r)
       : WTYPE == WT_INT4  ? scale_at(3u, r * groups2 + v * 32u / pc.group)
                           : 1.0;
}
void w2_load(uint s, uint c0, out uvec4 q[LOADS], out float fq[LOADS]) {
  for (uint k = 0u; k < LOADS; ++k) w2_load_one(s, c0, k, q[k], fq[k]);
}

// h += f1·W2ᵀ, f1 = silu((rmsnorm(h)·g2)·W1ᵀ) (LLAMA: silu(gate)·up), slice by slice: the
// workgroup's slice of f1 into f1s4, then W2's SL columns of every row (WS 16-byte words: 128
// bytes in f16) read coalesced, a
// row's words by WS adjacent invocations, their partial dots summed through shared memory (below)
// and each row added into h by one invocation (the first once count 4 says that every
// workgroup's staging has read h): out_chunk's method (decode_layer_out_proj.glsl), written out
// here because through out_chunk's code f16's W2 ran at half speed. Measured slower on the H200 (bench/vulkan_notes.md): one
// invocation a row reading its words in turn (32 cache lines a load: f16 54.1 µs a block against
// 52.2 here), several invocations a row each adding its part (the atomics doubled or more), and
// the parts summed by subgroup shuffles (the whole kernel 1.4x slower).
void ffn_phase(uvec4 pre[LOADS]) {
  const uint D = pc.dim, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
  const uint slices = (FFN_DIM_D + SL - 1u) / SL, per_row1 = row_words(D);
  const float rstd = stage(0u, D, 2u);
  count_staged(4u, false);  // W2's sums may go into h once every workgroup has counted in
  mark(10u);
  bool first = pre_loaded, marked = false;
  const uint w = tid % WS;
  uvec4 q[LOADS];
  float fq[LOADS];
  for (uint s = gl_WorkGroupID.x; s < slices; s += gl_NumWorkGroups.x) {
    for (uint set = sg; set < W1_SETS; set += gl_NumSubgroups) {
      uint rr[MAXR];
      ffn_rows(s, set, rr);
      float factor[MAXR], acc[MAXR];
      for (uint i = 0u; i < MAXR; ++i) factor[i] = WTYPE == WT_INT8 ? scale_at(2u, rr[i]) : 1.0, acc[i] = 0.0;
      row_dots(2u, per_row1, FR, 1u, 0u, rr, first, pre, acc);
      first = false;
#ifdef LLAMA
      for (uint i = 0u; i + 1u < FR; i += 2u) {  // a (gate, up) pair
        const float y = subgroupAdd(acc[i]) * factor[i] * rstd, up = subgroupAdd(acc[i + 1u]) * factor[i + 1u] * rstd;
        const uint j = set * FR / 2u + i / 2u;
        if (lane == i % gl_SubgroupSize) f1s4[j >> 2u][j & 3u] = s * SL + j < pc.ffn ? y / (1.0 + exp(-y)) * up : 0.0;
      }
#else
      for (uint i = 0u; i < FR; ++i) {
        const float y = subgroupAdd(acc[i]) * factor[i] * rstd;
        const uint j = set * FR + i;
        if (lane == i % gl_SubgroupSize) f1s4[j >> 2u][j & 3u] = s * SL + j < 4u * D ? y / (1.0 + exp(-y)) : 0.0;
      }
#endif
    }
    w2_load(s, 0u, q, fq);  // W2's first words in flight during f1's barrier
    // Count 4 (the first slice: every workgroup's staging past its read of h; a barrier of shared
    // memory only, which does not wait for W2's words in flight), and the slice's f1 complete.
    if (!marked && tid == 0u) wait_count(4u, gl_NumWorkGroups.x * (blk + 1u));
    barrier();
    if (!marked) mark(11u), marked = true;
    // W2's slice by chunks of CR rows (w2_load): the partial dots go to w2_parts, and then each
    // row's WS partials are summed by one invocation, which adds the row into h.
    for (uint c0 = 0u; c0 < D; c0 += CR) {
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
        // The next chunk's word k in flight as soon as this one's is used, through the sums'
        // barriers (H200, µs a block for W2: f16 8.9 against 10.5 with each chunk loaded after the
        // last one's sums; ms a token, int4 0.555-0.557 against 0.560 with the chunk's words
        // loaded together after its last product, f16 and int8 within the noise).
        if (c0 + CR < D) w2_load_one(s, c0 + CR, k, q[k], fq[k]);
      }
      barrier();
      for (uint i = tid; i < CR; i += THREADS) {  // row c0 + i: its partials from k = i / RPR
        const uint at = i / RPR * THREADS + i % RPR * WS;
        float sum = 0.0;
        for (uint u = 0u; u < WS; ++u) sum += w2_parts[at + u];
        if (c0 + i < D) atomicAdd(h[c0 + i], sum);
      }
      barrier();  // w2_parts free again; after the last chunk, f1s4 too
    }
  }
  if (!marked) mark(11u);  // no slice here
}
