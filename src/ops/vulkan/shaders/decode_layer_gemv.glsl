// decode_layer.comp's GEMV phases (qkv, the head) and the dot products of weight rows
// with the staged row that the FFN reuses; included by decode_layer.comp after its bindings.

uint row_words(uint cols) {  // 16-byte words per weight row
#ifdef LLAMA
  return (cols + 4u * F - 1u) / (4u * F);  // the last one partial where the row is not whole words
#else
  if (WTYPE == WT_F32) return cols / 4u;
  if (WTYPE == WT_F16) return cols / 8u;
  if (WTYPE == WT_INT8) return cols / 16u;
  return cols / 32u;
#endif
}

#ifdef LLAMA
// Word v of row r of matrix m (m 0 qkv, 1 out_proj, 2 ffn.0, 3 ffn.2, 4 the head in qkv's bindings):
// the 16 bytes from byte 16·v of the row. ALIGNED 0: rows are packed end to end from any byte, so
// the word is read as the 32-bit words that hold it (none past the row's last), shifted into place;
// its bytes past the row's end are the next row's or zeros, which meet zeros of x (stage, the
// slices' values past their ends).
uvec4 row_word(uint m, uint r, uint v) {
  const uint cols = m == 1u ? Q_DIM : m == 3u ? FFN_DIM : pc.dim;
  if (ALIGNED != 0u) {
    const uint i = r * row_words(cols) + v;
    if (m == 1u) return w_o[o_w.y + i];
    if (m == 3u) return w_2[o_w.w + i];
    return w_word(m, i);
  }
  const uint bytes = WTYPE == WT_F32   ? 4u * cols
                     : WTYPE == WT_F16 ? 2u * cols
                     : WTYPE == WT_INT8 ? cols
                                        : (cols + 1u) / 2u;
  const uint at = r * bytes + 16u * v, end = r * bytes + min(16u * v + 16u, bytes);
  const uint first = at >> 2u, count = (end + 3u) / 4u - first;
  const uint base = m == 1u ? o_w.y : m == 3u ? o_w.w : m == 2u ? o_w.z : o_w.x;
  uint u[5];
  for (uint k = 0u; k < 5u; ++k) {
    const uint i = 4u * base + first + k;
    u[k] = k >= count ? 0u : m == 1u ? w_o_u[i] : m == 3u ? w_2_u[i] : m == 2u ? w_1_u[i] : w_qkv_u[i];
  }
  const uint sh = 8u * (at & 3u);
  if (sh == 0u) return uvec4(u[0], u[1], u[2], u[3]);
  const uvec4 lo = uvec4(u[0], u[1], u[2], u[3]), hi = uvec4(u[1], u[2], u[3], u[4]);
  return (lo >> sh) | (hi << (32u - sh));
}
#define ROW_WORD(m, r, v) row_word(m, r, v)
#else
#define ROW_WORD(m, r, v) w_word(m, (r) * per_row + (v))  // per_row: the caller's row_words
#endif

// Phase 1's rows: logical rows 0 .. 2D - 1 are q's and k's, head by head (head h's 2·hd·h .. are
// its q rows, then its k rows), where logical rows 2j, 2j + 1 of each are its j-th rotation pair
// (rows j, j + hd/2); then v's rows 2D .. 3D - 1 in order, last, since the attention does not wait
// for them: with a grid of fewer subgroups than row sets, they are the second round's rows.
// LLAMA: grouped heads, KV head g's query heads' rows (g·group .. (g + 1)·group - 1, head by
// head), then its k rows, so that a head's q and k come together as in MiniLLM's blocks (group 1).
#ifdef LLAMA
uint qkv_row(uint l) {
  const uint hd = pc.head_dim, Q = Q_DIM;
  if (l >= Q + KV_DIM) return l;
  const uint group = pc.heads / pc.kv_heads, span = (group + 1u) * hd, g = l / span, within = l % span;
  const uint part = within / hd, i = within % hd;  // part < group: q of head g·group + part; group: k of KV head g
  const uint head_row = part < group ? (g * group + part) * hd : Q + g * hd;
  return head_row + (i >> 1u) + (i & 1u) * (hd / 2u);
}
#else
uint qkv_row(uint l) {
  if (l >= 2u * pc.dim) return l;
  const uint hd = pc.dim / pc.heads, half_hd = hd / 2u, hh = l / (2u * hd), within = l % (2u * hd);
  const uint part = within / hd, i = within % hd;  // part 0 q, 1 k
  return part * pc.dim + hh * hd + (i >> 1u) + (i & 1u) * half_hd;
}
#endif

// Rows ra, rb (a rotation pair where q or k) of q/k/v done: biased (the caller), rotated by cs
// (cos, sin) where q or k, stored as tagged pairs (which the attention polls), k and v appended at
// pos (a cache row of KV_DIM: k's rows from Q_DIM, v's from Q_DIM + KV_DIM).
void store_qkv_pair(uint ra, uint rb, float a, float b, vec2 cs, uint pos) {
#ifdef LLAMA
  const uint Q = Q_DIM, KV = KV_DIM;
  if (ra < Q + KV) {
    const float ya = a * cs.x - b * cs.y, yb = b * cs.x + a * cs.y;
    a = ya, b = yb;
  }
  tagged_store(ra, a);
  tagged_store(rb, b);
  const uint at = o_kv + pos * KV;
  if (ra >= Q + KV) v_cache[at + ra - Q - KV] = a, v_cache[at + rb - Q - KV] = b;
  else if (ra >= Q) k_cache[at + ra - Q] = a, k_cache[at + rb - Q] = b;
#else
  const uint D = pc.dim;
  if (ra < 2u * D) {
    const float ya = a * cs.x - b * cs.y, yb = b * cs.x + a * cs.y;
    a = ya, b = yb;
  }
  tagged_store(ra, a);
  tagged_store(rb, b);
  const uint at = o_kv + pos * D;
  if (ra >= 2u * D) v_cache[at + ra - 2u * D] = a, v_cache[at + rb - 2u * D] = b;
  else if (ra >= D) k_cache[at + ra - D] = a, k_cache[at + rb - D] = b;
#endif
}

// Subgroups per row set (1, 2 or 4): more where the row sets are fewer than the grid's subgroups
// and the rows long enough to share.
uint split_for(uint rows, uint nr, uint per_row) {
  if (pc.split != 0u) return min(pc.split, gl_NumSubgroups);
  const uint sets = (rows + nr - 1u) / nr, subgroups = gl_NumWorkGroups.x * gl_NumSubgroups;
  uint split = 1u;
  while (split < 4u && gl_NumSubgroups % (2u * split) == 0u && sets * 2u * split <= subgroups &&
         per_row >= 2u * split * gl_SubgroupSize)
    split *= 2u;
  return split;
}

// Row set r0's weight rows (clamped to the last; gemv stores only rows < `rows`): logical rows of
// phase 1 mapped by qkv_row.
void set_rows(uint m, uint rows, uint r0, out uint rr[MAXR]) {
  for (uint i = 0u; i < MAXR; ++i) {
    const uint l = min(r0 + i, rows - 1u);
    rr[i] = m == 0u ? qkv_row(l) : l;
  }
}

// One step's words of a lane: load k (< nr·U, U = LOADS / nr) is word v0 + (k / nr)·split·S of
// row rr[k % nr]; zero past the row's end.
void load_step(uint m, uint per_row, uint nr, uint split, uint rr[MAXR], uint v0, out uvec4 q[LOADS]) {
  const uint U = max(LOADS / nr, 1u);
  for (uint k = 0u; k < LOADS; ++k) {
    const uint v = v0 + k / nr * split * gl_SubgroupSize;
    q[k] = k < nr * U && v < per_row ? ROW_WORD(m, rr[k % nr], v) : uvec4(0u);
  }
}

// The words this invocation's gemv(m, ...) loads first (its first row set's first step), loaded
// ahead: between a grid barrier's arrive and wait, so their latency overlaps the barrier's.
void prefetch(uint m, uint rows, uint cols, uint nr, out uvec4 q[LOADS]) {
  const uint sg = gl_SubgroupID, per_row = row_words(cols);
  const uint split = split_for(rows, nr, per_row), per_group = gl_NumSubgroups / split * nr;
  uint rr[MAXR];
  set_rows(m, rows, gl_WorkGroupID.x * per_group + sg / split * nr, rr);
  load_step(m, per_row, nr, split, rr, sg % split * gl_SubgroupSize + gl_SubgroupInvocationID, q);
}

// acc[i] += this lane's share of row rr[i] (i < nr) of matrix m times the staged row: words
// part·S + lane, then every split·S, LOADS in flight (of each row U = LOADS / nr a step); the first
// step's words are `pre` where `first`. int4's group scales applied, int8's row scales not (the
// caller's factor). Not summed over the subgroup.
void row_dots(uint m, uint per_row, uint nr, uint split, uint part, uint rr[MAXR], bool first, uvec4 pre[LOADS],
              inout float acc[MAXR]) {
  const uint S = gl_SubgroupSize, lane = gl_SubgroupInvocationID;
  const uint U = max(LOADS / nr, 1u);
  const uint words_per_group = max(pc.group / 32u, 1u), groups = (per_row + words_per_group - 1u) / words_per_group;
  const bool pow2 = (words_per_group & (words_per_group - 1u)) == 0u;
  const uint shift = uint(findLSB(words_per_group));
  for (uint v0 = part * S + lane; v0 < per_row; v0 += U * split * S) {  // load_step's words
    uvec4 q[LOADS];
    if (first) {
      for (uint k = 0u; k < LOADS; ++k) q[k] = pre[k];
      first = false;
    } else {
      load_step(m, per_row, nr, split, rr, v0, q);
    }
    for (uint k = 0u; k < LOADS; ++k) {
      const uint v = v0 + k / nr * split * S, i = k % nr;
      if (k >= nr * U || v >= per_row) continue;
      const uvec4 w = q[k];
      // X(j): vec4 j of word v's columns (F·v + j, swizzled: (F·v + j) >> 3 is v·F / 8).
#define X(j) xs4[F * v + (uint(j) ^ ((v * F >> 3u) & (F - 1u)))]
      if (WTYPE == WT_F16) {
        acc[i] += WORD_DOT_F16(w, X);
      } else if (WTYPE == WT_INT8) {
        acc[i] += WORD_DOT_I8(w, X);
      } else if (WTYPE == WT_INT4) {
        const uint g = pow2 ? v >> shift : v / words_per_group;
        acc[i] += WORD_DOT_I4(w, X) * scale_at(m, rr[i] * groups + g);
      } else {
        acc[i] += dot(uintBitsToFloat(w), xs4[v]);  // F = 1: no swizzle
      }
#undef X
    }
  }
}

// q's and k's rows (rotated), the q/k/v bias of row r.
#ifdef LLAMA
#define QK_ROWS (Q_DIM + KV_DIM)
#define QKV_BIAS(r) (pc.qkv_bias != 0u ? bias_qkv(r) : 0.0)
#else
#define QK_ROWS (2u * pc.dim)
#define QKV_BIAS(r) bias_qkv(r)
#endif

// Matrix m (rows, cols) times the staged row: each workgroup takes row sets of `nr` rows (<= MAXR)
// per `split` subgroups, grid-stride (the loop's trip count is the workgroup's, for the split's
// barriers). The first step's words are `pre` (prefetch) where pre_loaded, else loaded here.
// Each row's sum is scaled by rstd and stored as phase m does.
void gemv(uint m, uint rows, uint cols, uint nr, float rstd, uvec4 pre[LOADS]) {
  const uint S = gl_SubgroupSize, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID, per_row = row_words(cols);
  const uint split = split_for(rows, nr, per_row), part = sg % split, per_group = gl_NumSubgroups / split * nr;
  const uint pos = position[0], half_hd = HD / 2u;
  bool first = pre_loaded;
  for (uint base = gl_WorkGroupID.x * per_group; base < rows; base += gl_NumWorkGroups.x * per_group) {
    const uint r0 = base + sg / split * nr;
    uint rr[MAXR];
    set_rows(m, rows, r0, rr);
    // What the rows' stores need besides the sums, loaded now so that their latency overlaps the
    // dot products': the sum's factor (int8's row scale), the addend (bias) and the pair's
    // rotation (phase 1).
    float factor[MAXR], addend[MAXR];
    vec2 cs[MAXR];
    for (uint i = 0u; i < MAXR; ++i) {
      factor[i] = 1.0, addend[i] = 0.0, cs[i] = vec2(1.0, 0.0);
      if (i >= nr) continue;
      const uint r = rr[i];
      factor[i] = WTYPE == WT_INT8 ? scale_at(m, r) : 1.0;
      addend[i] = m == 0u ? QKV_BIAS(r) : 0.0;
      cs[i] = m == 0u && i % 2u == 0u && r < QK_ROWS ? cos_sin[pos * half_hd + r % half_hd] : vec2(1.0, 0.0);
    }
    float acc[MAXR];
    for (uint i = 0u; i < MAXR; ++i) acc[i] = 0.0;
    row_dots(m, per_row, nr, split, part, rr, first, pre, acc);
    first = false;
    for (uint i = 0u; i < MAXR; ++i)
      if (i < nr) acc[i] = subgroupAdd(acc[i]);
    if (split > 1u) {  // the parts' sums meet in shared memory
      if (subgroupElect())
        for (uint i = 0u; i < MAXR; ++i) part_sums[sg * MAXR + i] = acc[i];
      barrier();
      if (part == 0u)
        for (uint p = 1u; p < split; ++p)
          for (uint i = 0u; i < MAXR; ++i) acc[i] += part_sums[(sg + p) * MAXR + i];
      barrier();
      if (part != 0u) continue;
    }
    for (uint i = 0u; i < MAXR; ++i) acc[i] *= factor[i] * rstd;
    if (m == 0u) {
      // Each pair stored, q's and k's as tagged pairs: nothing to fence or count (H200, ms a token
      // against a fence and a ready count per head and row set, the attention waiting for the
      // count, then reading q: f16 0.577 / 0.584-0.585, int4 0.593-0.595 / 0.607-0.608).
      for (uint i = 0u; i + 1u < MAXR; i += 2u)
        if (i + 1u < nr && lane == i % S && r0 + i < rows)
          store_qkv_pair(rr[i], rr[i + 1u], acc[i] + addend[i], acc[i + 1u] + addend[i + 1u], cs[i], pos);
    } else {
      for (uint i = 0u; i < MAXR; ++i)
        if (i < nr && lane == i % S && r0 + i < rows) logits[rr[i]] = acc[i];  // the head
    }
  }
}
