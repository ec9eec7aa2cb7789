// One causal decode token through a whole transformer block in one dispatch (a persistent kernel).
// The grid's workgroups, all resident at once (Ops::persistent_grid probes a grid that is), walk
// the block's phases, with a grid barrier between each from the attention on:
//   1. qkv = (rmsnorm(h)·g1)·Wqkvᵀ + bqkv; q and k rotated at p = position[0] (RoPE); k, v
//      written to row p of the layer's KV cache. Rows go head by head (q, k, v of head 0, then
//      head 1, ...), and each stored row is counted in its head's ready count.
//   2. att = attention of q over the cache's p + 1 keys: items (head, run of keys) over the
//      workgroups, from the last one down, each waiting for its head's ready count only: the
//      workgroups with no second round of qkv rows (the last ones) attend to the heads finished
//      in the first while the rest finish theirs. Where a head has several items, the last to
//      finish combines them (one softmax)
//   3. h += att·Woᵀ + bo, also written to hm, the FFN's input
//   4. h += silu((rmsnorm(hm)·g2)·W1ᵀ)·W2ᵀ by slices of SL rows of W1 (columns of W2) over the
//      workgroups: a slice's f1 stays in its workgroup's shared memory, and its product with W2's
//      SL columns is added into h with float atomics (so the sums' order varies run to run). No
//      grid barrier and no staging of the 4D-wide f1 between the two matrices: H200, µs a block
//      against the FFN as two phases (f1 = silu(...) stored, a grid barrier, h += f1·W2ᵀ): f16
//      52.1-52.2 / 53.0, int8 48.8-49.3 / 51.4-51.7, int4 51.9 / 52.3-52.5 (bench/vulkan_notes.md).
// Each GEMV phase stages its input row in shared memory first (x·g, the norm's Σx² summed once per
// workgroup); then each subgroup (or 2 or 4 together, where rows are few and long) takes ROWS
// weight rows at a time (QKV_ROWS in phase 1: rotation pairs, rows i and i + hd/2 of a head;
// MAXR of a slice in phase 4), grid-stride, its lanes reading consecutive 16-byte words of
// them, LOADS words in flight per lane, and a subgroup sum ends each row. The results are those of the per-op path (gemv_subgroup
// + attention_decode) up to summation order.
// Grid barrier: a workgroup's writes made visible (memoryBarrierBuffer), then it counts itself in
// on sync[0], loads the first weight words of its next phase, and waits until the count reaches
// n·(workgroups) at the n-th barrier. Every wait (a barrier's, a head's ready count) is bounded
// (about pc.spin_limit reads): past it, or once another workgroup has given up (sync[2]), it sets
// failed[0] for the host, which redoes the token on the per-op path. The last workgroup to finish
// sets the counters back to zero for the next dispatch. pc.probe != 0: only two barriers
// (Ops::persistent_grid's residency test).
// pc.head_rows != 0: the decode head instead (Ops::decode_head): qkv (head_rows) = h·Wᵀ with the
// matrix in qkv's bindings, one GEMV phase, no barrier, so the grid need not be resident.
// Needs: one chunk per matrix, rows of whole 16-byte words (int4: groups of a multiple of 32),
// dim % 4 == 0, head dim <= 256, dim <= XS, float atomic add (Ops::decode_layer_unsupported checks).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x_id = 3) in;                    // 256, 512 or 1024 (Ops::persistent_grid)
layout(constant_id = 0) const uint XS = 2048u;     // floats of staged x: >= dim and 512, a multiple of 4
layout(constant_id = 1) const uint ROWS = 1u;      // rows per subgroup, phase 3 and the head (<= MAXR)
layout(constant_id = 2) const uint QKV_ROWS = 2u;  // rows per subgroup, phase 1 (even, <= MAXR)
layout(constant_id = 4) const uint WTYPE = 1u;     // WT_* of the four matrices (one decoding per
                                                   // pipeline: 1.55x faster than a runtime branch)
layout(constant_id = 5) const uint LOADS = 4u;     // 16-byte words in flight per lane (>= MAXR)
const uint MAXR = 4u, CHUNK = 32u, MIN_ITEM = 128u;
const uint SL = 64u;  // FFN slice: rows of W1 (columns of W2) per workgroup at a time

const uint THREADS = gl_WorkGroupSize.x, VT = 256u;  // VT: threads of the attention's p·V pass
const uint WT_F32 = 0u, WT_F16 = 1u, WT_INT8 = 2u, WT_INT4 = 3u;
const uint F = WTYPE == WT_F32 ? 1u : WTYPE == WT_F16 ? 2u : WTYPE == WT_INT8 ? 4u : 8u;  // x vec4s per word

layout(push_constant) uniform Push {
  uint dim;         // D; the FFN is 4D wide
  uint heads;       // H (head dim D / H)
  uint max_keys;    // KV cache rows (partials per head: max_keys / CHUNK rounded up)
  uint group;       // int4 columns per scale
  uint scale_f16;   // int4 scales stored as f16
  uint bias_f16;    // biases (qkv, out_proj) as f16, else f32
  uint norm_f16;    // RMSNorm weights as f16, else f32
  float eps;        // RMSNorm epsilon
  float attn_scale; // 1 / sqrt(head dim)
  uint spin_limit;  // reads of the barrier count before giving up
  uint probe;       // 1: the residency probe (two barriers, nothing else)
  uint split;       // subgroups per row set in every GEMV phase (a power of two); 0: split_for's
  uint phases;      // bit i: run phase i + 1 (all 15; else a benchmark's diagnostic: wrong results)
  uint chunk;       // keys per attention item (a multiple of 32); 0: chosen (attention_phase)
  uint head_rows;   // != 0: the head instead of a block: qkv (head_rows) = h · Wqkvᵀ, no barrier
} pc;

layout(std430, binding = 0) coherent buffer Hid { float h[]; };  // (D) the residual stream, in and out
layout(std430, binding = 0) coherent buffer Hid4 { vec4 h4[]; };
layout(std430, binding = 1) coherent buffer Qkv { float qkv[]; };  // (3D)
layout(std430, binding = 2) coherent buffer Att { float att[]; };  // (D)
layout(std430, binding = 2) coherent buffer Att4 { vec4 att4[]; };
layout(std430, binding = 3) coherent buffer Mid { float hm[]; };  // (D) h after phase 3
layout(std430, binding = 3) coherent buffer Mid4 { vec4 hm4[]; };
layout(std430, binding = 4) readonly buffer Wqkv { uvec4 w_qkv[]; };  // (3D, D) edge encoding
layout(std430, binding = 5) readonly buffer Wo { uvec4 w_o[]; };      // (D, D)
layout(std430, binding = 6) readonly buffer W1 { uvec4 w_1[]; };      // (4D, D)
layout(std430, binding = 7) readonly buffer W2 { uvec4 w_2[]; };      // (D, 4D)
layout(std430, binding = 8) readonly buffer Sqkv { uint s_qkv[]; };   // int8 row / int4 group scales
layout(std430, binding = 9) readonly buffer So { uint s_o[]; };
layout(std430, binding = 10) readonly buffer S1 { uint s_1[]; };
layout(std430, binding = 11) readonly buffer S2 { uint s_2[]; };
layout(std430, binding = 12) readonly buffer Bqkv { uint b_qkv[]; };
layout(std430, binding = 13) readonly buffer Bo { uint b_o[]; };
layout(std430, binding = 14) readonly buffer G1 { uint g_1[]; };  // RMSNorm weights
layout(std430, binding = 15) readonly buffer G2 { uint g_2[]; };
layout(std430, binding = 16) readonly buffer Table { vec2 cos_sin[]; };  // (positions, hd/2)
layout(std430, binding = 17) readonly buffer Position { uint position[]; };
layout(std430, binding = 18) coherent buffer KCache { float k_cache[]; };  // (positions, D)
layout(std430, binding = 18) coherent buffer KCache4 { vec4 k4[]; };
layout(std430, binding = 19) coherent buffer VCache { float v_cache[]; };
layout(std430, binding = 19) coherent buffer VCache4 { vec4 v4[]; };
layout(std430, binding = 20) coherent buffer Partials { float partials[]; };  // per (head, chunk): m, l, o
// 0 count, 1 done, 2 failed; 16 + h: head h's finished attention items; 16 + H + h: its stored qkv rows
layout(std430, binding = 21) coherent buffer Sync { uint sync_[]; };
layout(std430, binding = 22) buffer Failed { uint failed[]; };  // host-visible: a barrier gave up

#include "words.glsl"

shared vec4 xs4[XS / 4u];   // the staged input row
shared float red[THREADS / 4u];               // per-subgroup sums (subgroups of 4 or more)
shared float part_sums[THREADS / 4u * MAXR];  // a split row set's partial sums, per subgroup
shared float qs[256];       // attention: the head's q
shared vec4 pv[VT];         // attention: p·V per (vec4 column, key slice)
shared float wts[VT];       // attention: the combine's chunk weights
shared bool flag;           // attention: this workgroup combines the head
shared vec4 f1s4[SL / 4u];  // FFN: the workgroup's slice of f1
shared float w2_parts[LOADS * THREADS];  // FFN: W2 rows' partial dots, per (load, invocation)
// Attention's scores (then exp(s - m)), one per key of an item: in the staging row, which the
// attention phase does not use.
#define PS(j) xs4[(j) >> 2][(j) & 3u]

// Where x's vec4 i lies in xs4: swizzled within each aligned run of 8 vec4s (128 bytes, all 32
// banks), so that the lanes of a GEMV, lane v reading vec4s F·v .. F·v + F - 1 of the row, meet
// distinct banks (unswizzled, the 8 lanes of a 16-byte access phase would share F-way: int4 8-way,
// int8 4-way, f16 2-way). Staging writes stay conflict-free: a run of 8 is permuted in itself.
uint swz(uint i) { return i ^ ((i >> 3u) & (F - 1u)); }

#define tid gl_LocalInvocationIndex

// ---- grid barrier ----------------------------------------------------------------------------
// Split in two so that a workgroup can issue loads that do not depend on the other workgroups
// (the next phase's first weight words) between arriving and waiting.
// The count is read with an atomic: llvmpipe hoists volatile loads out of a loop.
uint sync_read(uint i) { return atomicOr(sync_[i], 0u); }

void grid_arrive() {  // this workgroup's writes visible to the device, then counted
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) atomicAdd(sync_[0], 1u);
}

// Until sync[i] >= target: the workgroup waits on its first invocation, then sees what the
// counted writes wrote.
void wait_for(uint i, uint target) {
  if (tid == 0u) {
    // Two nested loops of at most 1024 and spin_limit / 1024 reads: llvmpipe ends any loop after
    // 65535 iterations. Whatever ended the wait, the count decides.
    for (uint outer = 0u; outer < max(pc.spin_limit >> 10u, 1u) && sync_read(i) < target && sync_read(2u) == 0u; ++outer)
      for (uint spins = 0u; spins < min(pc.spin_limit, 1024u) && sync_read(i) < target; ++spins) {
      }
    if (sync_read(i) < target || pc.spin_limit == 0u) {  // 0: a failure injected by tests
      atomicOr(sync_[2], 1u);
      failed[0] = 1u;
    }
  }
  barrier();
  memoryBarrierBuffer();
}

void grid_wait(uint n) { wait_for(0u, n * gl_NumWorkGroups.x); }  // every workgroup arrived n times

void finish() {  // the last workgroup out resets the counts for the next dispatch
  barrier();
  if (tid == 0u && atomicAdd(sync_[1], 1u) == gl_NumWorkGroups.x - 1u) {
    sync_[0] = 0u;
    sync_[1] = 0u;
    for (uint hh = 0u; hh < pc.heads; ++hh) sync_[16u + pc.heads + hh] = 0u;
  }
}

// ---- the matrices: m = 0 qkv, 1 out_proj, 2 ffn.0, 3 ffn.2; 4 the head (in qkv's bindings) ----
uvec4 w_word(uint m, uint i) {
  if (m == 0u || m == 4u) return w_qkv[i];
  if (m == 1u) return w_o[i];
  if (m == 2u) return w_1[i];
  return w_2[i];
}
uint s_word(uint m, uint i) {
  if (m == 0u || m == 4u) return s_qkv[i];
  if (m == 1u) return s_o[i];
  if (m == 2u) return s_1[i];
  return s_2[i];
}
float scale_at(uint m, uint i) {  // int8: row i's scale; int4: scale i of the (rows, groups) table
  if (WTYPE == WT_INT4 && pc.scale_f16 != 0u) return unpackHalf2x16(s_word(m, i >> 1))[i & 1u];
  return uintBitsToFloat(s_word(m, i));
}
float bias_qkv(uint r) { return pc.bias_f16 != 0u ? unpackHalf2x16(b_qkv[r >> 1])[r & 1u] : uintBitsToFloat(b_qkv[r]); }
float bias_o(uint r) { return pc.bias_f16 != 0u ? unpackHalf2x16(b_o[r >> 1])[r & 1u] : uintBitsToFloat(b_o[r]); }
vec4 norm4(uint which, uint c) {  // g[c .. c + 3], c a multiple of 4
  if (pc.norm_f16 != 0u) {
    const uvec2 w = which == 0u ? uvec2(g_1[c >> 1], g_1[(c >> 1) + 1u]) : uvec2(g_2[c >> 1], g_2[(c >> 1) + 1u]);
    return f16x4(w.x, w.y);
  }
  if (which == 0u) return uintBitsToFloat(uvec4(g_1[c], g_1[c + 1u], g_1[c + 2u], g_1[c + 3u]));
  return uintBitsToFloat(uvec4(g_2[c], g_2[c + 1u], g_2[c + 2u], g_2[c + 3u]));
}

// ---- staging -----------------------------------------------------------------------------------
// xs4 = the input row (src 0: h, 1: att, 2: hm; cols floats), times g (norm 1: g1, 2: g2; 0: none).
// Returns rstd = 1 / sqrt(Σx² / cols + eps) with a norm, else 1.
float stage(uint src, uint cols, uint norm) {
  float ss = 0.0;
  for (uint c4 = tid; c4 < cols / 4u; c4 += THREADS) {
    vec4 x = src == 0u ? h4[c4] : src == 1u ? att4[c4] : hm4[c4];
    if (norm != 0u) {
      ss += dot(x, x);
      x *= norm4(norm - 1u, 4u * c4);
    }
    xs4[swz(c4)] = x;
  }
  if (norm != 0u) {
    ss = subgroupAdd(ss);
    if (subgroupElect()) red[gl_SubgroupID] = ss;
  }
  barrier();
  if (norm == 0u) return 1.0;
  float total = 0.0;
  for (uint i = 0u; i < gl_NumSubgroups; ++i) total += red[i];
  barrier();  // red is free again
  return 1.0 / sqrt(total / float(cols) + pc.eps);
}

// ---- GEMV phases -------------------------------------------------------------------------------
uint row_words(uint cols) {  // 16-byte words per weight row
  if (WTYPE == WT_F32) return cols / 4u;
  if (WTYPE == WT_F16) return cols / 8u;
  if (WTYPE == WT_INT8) return cols / 16u;
  return cols / 32u;
}

// Phase 1's rows, head by head: head h's logical rows 3·hd·h .. are its q rows, k rows, v rows,
// where q's and k's logical rows 2j, 2j + 1 are their j-th rotation pair (rows j, j + hd/2).
uint qkv_head(uint l) { return l / (3u * (pc.dim / pc.heads)); }
uint qkv_row(uint l) {
  const uint hd = pc.dim / pc.heads, half_hd = hd / 2u, hh = l / (3u * hd), within = l % (3u * hd);
  const uint part = within / hd, i = within % hd;  // part 0 q, 1 k, 2 v
  return part * pc.dim + hh * hd + (part == 2u ? i : (i >> 1u) + (i & 1u) * half_hd);
}

// Rows ra, rb (a rotation pair where q or k) of q/k/v done: biased (the caller), rotated by cs
// (cos, sin) where q or k, stored, k and v appended at pos.
void store_qkv_pair(uint ra, uint rb, float a, float b, vec2 cs, uint pos) {
  const uint D = pc.dim;
  if (ra < 2u * D) {
    const float ya = a * cs.x - b * cs.y, yb = b * cs.x + a * cs.y;
    a = ya, b = yb;
  }
  qkv[ra] = a, qkv[rb] = b;
  if (ra >= 2u * D) v_cache[pos * D + ra - 2u * D] = a, v_cache[pos * D + rb - 2u * D] = b;
  else if (ra >= D) k_cache[pos * D + ra - D] = a, k_cache[pos * D + rb - D] = b;
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
    q[k] = k < nr * U && v < per_row ? w_word(m, rr[k % nr] * per_row + v) : uvec4(0u);
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

// Matrix m (rows, cols) times the staged row: each workgroup takes row sets of `nr` rows (<= MAXR)
// per `split` subgroups, grid-stride (the loop's trip count is the workgroup's, for the split's
// barriers). The first step's words are `pre` (prefetch). Each row's sum is scaled by rstd and
// stored as phase m does.
void gemv(uint m, uint rows, uint cols, uint nr, float rstd, uvec4 pre[LOADS]) {
  const uint S = gl_SubgroupSize, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID, per_row = row_words(cols);
  const uint split = split_for(rows, nr, per_row), part = sg % split, per_group = gl_NumSubgroups / split * nr;
  const uint pos = position[0], half_hd = pc.dim / pc.heads / 2u;
  bool first = true;
  for (uint base = gl_WorkGroupID.x * per_group; base < rows; base += gl_NumWorkGroups.x * per_group) {
    const uint r0 = base + sg / split * nr;
    uint rr[MAXR];
    set_rows(m, rows, r0, rr);
    // What the rows' stores need besides the sums, loaded now so that their latency overlaps the
    // dot products': the sum's factor (int8's row scale), the addend (bias, residual) and the
    // pair's rotation (phase 1).
    float factor[MAXR], addend[MAXR];
    vec2 cs[MAXR];
    for (uint i = 0u; i < MAXR; ++i) {
      factor[i] = 1.0, addend[i] = 0.0, cs[i] = vec2(1.0, 0.0);
      if (i >= nr) continue;
      const uint r = rr[i];
      factor[i] = WTYPE == WT_INT8 ? scale_at(m, r) : 1.0;
      addend[i] = m == 0u ? bias_qkv(r) : m == 1u ? h[r] + bias_o(r) : 0.0;
      cs[i] = m == 0u && i % 2u == 0u && r < 2u * pc.dim ? cos_sin[pos * half_hd + r % half_hd] : vec2(1.0, 0.0);
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
    if (m == 0u) {  // each pair stored, then counted in its head's ready count
      for (uint i = 0u; i + 1u < MAXR; i += 2u)
        if (i + 1u < nr && lane == i % S && r0 + i < rows)
          store_qkv_pair(rr[i], rr[i + 1u], acc[i] + addend[i], acc[i + 1u] + addend[i + 1u], cs[i], pos);
      // The fence outside the branch: llvmpipe (Mesa 22.3) computed wrong sums in a split row set
      // with it inside.
      memoryBarrierBuffer();
      for (uint i = 0u; i + 1u < MAXR; i += 2u)
        if (i + 1u < nr && lane == i % S && r0 + i < rows) atomicAdd(sync_[16u + pc.heads + qkv_head(r0 + i)], 2u);
    } else {
      for (uint i = 0u; i < MAXR; ++i)
        if (i < nr && lane == i % S && r0 + i < rows) {
          const uint r = rr[i];
          if (m == 4u) qkv[r] = acc[i];
          else h[r] = hm[r] = acc[i] + addend[i];  // out_proj: the residual and the bias added
        }
    }
  }
}

// ---- FFN phase ---------------------------------------------------------------------------------
// Slice s: rows s·SL .. of W1 (4D of them; past the end read as the last and dropped), taken by
// the subgroups MAXR at a time, set i of them rows s·SL + i·MAXR ...
void ffn_rows(uint s, uint set, out uint rr[MAXR]) {
  for (uint i = 0u; i < MAXR; ++i) rr[i] = min(s * SL + set * MAXR + i, 4u * pc.dim - 1u);
}

void ffn_prefetch(out uvec4 pre[LOADS]) {  // the words this invocation's ffn_phase loads first
  for (uint k = 0u; k < LOADS; ++k) pre[k] = uvec4(0u);
  if (gl_WorkGroupID.x * SL >= 4u * pc.dim || gl_SubgroupID >= SL / MAXR) return;
  uint rr[MAXR];
  ffn_rows(gl_WorkGroupID.x, gl_SubgroupID, rr);
  load_step(2u, row_words(pc.dim), MAXR, 1u, rr, gl_SubgroupInvocationID, pre);
}

// h += f1·W2ᵀ, f1 = silu((rmsnorm(hm)·g2)·W1ᵀ), slice by slice: the workgroup's slice of f1 into
// f1s4, then W2's SL columns of every row (WS 16-byte words: 128 bytes in f16) read coalesced, a
// row's words by WS adjacent invocations, their partial dots summed through shared memory (below)
// and each row added into h by one invocation. Measured slower on the H200 (bench/vulkan_notes.md):
// one invocation a row reading its words in turn (32 cache lines a load: f16 54.1 µs a block
// against 52.2 here), several invocations a row each adding its part (the atomics doubled or
// more), and the parts summed by subgroup shuffles (the whole kernel 1.4x slower).
void ffn_phase(uvec4 pre[LOADS]) {
  const uint D = pc.dim, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
  const uint slices = (4u * D + SL - 1u) / SL, per_row1 = row_words(D), per_row2 = row_words(4u * D);
  const uint WS = SL / (4u * F);  // 16-byte words of a W2 row in the slice
  const uint groups2 = (4u * D + pc.group - 1u) / pc.group;
  const float rstd = stage(2u, D, 2u);
  bool first = true;
  for (uint s = gl_WorkGroupID.x; s < slices; s += gl_NumWorkGroups.x) {
    for (uint set = sg; set < SL / MAXR; set += gl_NumSubgroups) {
      uint rr[MAXR];
      ffn_rows(s, set, rr);
      float factor[MAXR], acc[MAXR];
      for (uint i = 0u; i < MAXR; ++i) factor[i] = WTYPE == WT_INT8 ? scale_at(2u, rr[i]) : 1.0, acc[i] = 0.0;
      row_dots(2u, per_row1, MAXR, 1u, 0u, rr, first, pre, acc);
      first = false;
      for (uint i = 0u; i < MAXR; ++i) {
        const float y = subgroupAdd(acc[i]) * factor[i] * rstd;
        const uint j = set * MAXR + i;
        if (lane == i % gl_SubgroupSize) f1s4[j >> 2u][j & 3u] = s * SL + j < 4u * D ? y / (1.0 + exp(-y)) : 0.0;
      }
    }
    barrier();  // the slice's f1 complete
    // W2's slice, coalesced: invocation t reads word t % WS of the chunk's row k·RPR + t / WS for
    // k < LOADS (a row's WS words in WS adjacent lanes), its partial dots go to w2_parts, and then
    // each row's WS partials are summed by one invocation, which adds the row into h.
    const uint RPR = THREADS / WS, CR = RPR * LOADS, w = tid % WS;
    for (uint c0 = 0u; c0 < D; c0 += CR) {
      uvec4 q[LOADS];
      float fq[LOADS];
      for (uint k = 0u; k < LOADS; ++k) {
        const uint r = c0 + k * RPR + tid / WS, v = s * WS + w;
        const bool ok = r < D && v < per_row2;
        q[k] = ok ? w_2[r * per_row2 + v] : uvec4(0u);
        fq[k] = !ok ? 0.0 : WTYPE == WT_INT8 ? scale_at(3u, r) : WTYPE == WT_INT4 ? scale_at(3u, r * groups2 + v * 32u / pc.group) : 1.0;
      }
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
      }
      barrier();
      for (uint i = tid; i < CR; i += THREADS) {  // row c0 + i: its partials from k = i / RPR
        const uint at = i / RPR * THREADS + i % RPR * WS;
        float sum = 0.0;
        for (uint u = 0u; u < WS; ++u) sum += w2_parts[at + u];
        if (c0 + i < D) atomicAdd(h[c0 + i], sum);
      }
      barrier();
    }
    barrier();  // f1s4 free again
  }
}

// ---- attention phase ---------------------------------------------------------------------------
// Item (head hh, chunk c: keys c·chunk ..) of the p + 1 keys. A head of one item writes its output
// at once; else each item writes its max m, sum l = Σ exp(s - m) and o = Σ exp(s - m)·v to
// partials and the head's last item to finish combines them (attention_decode.comp's method).
float block_max(float v) {  // over the workgroup; red free on entry and on return
  v = subgroupMax(v);
  if (subgroupElect()) red[gl_SubgroupID] = v;
  barrier();
  v = red[0];
  for (uint i = 1u; i < gl_NumSubgroups; ++i) v = max(v, red[i]);
  barrier();
  return v;
}
float block_sum(float v) {
  v = subgroupAdd(v);
  if (subgroupElect()) red[gl_SubgroupID] = v;
  barrier();
  v = 0.0;
  for (uint i = 0u; i < gl_NumSubgroups; ++i) v += red[i];
  barrier();
  return v;
}

void attend(uint hh, uint chunk, uint size, uint chunks, uint keys, uint max_chunks) {
  const uint hd = pc.dim / pc.heads, row = hd + 2u, D = pc.dim;
  const uint first = chunk * size, count = min(size, keys - first);
  const uint dst = (hh * max_chunks + chunk) * row;
  if ((pc.phases & 1u) != 0u) wait_for(16u + pc.heads + hh, 3u * hd);  // the head's q, k, v stored
  for (uint c = tid; c < hd; c += THREADS) qs[c] = qkv[hh * hd + c];
  barrier();
  const uint lane = gl_SubgroupInvocationID, S = gl_SubgroupSize, NS = gl_NumSubgroups;
  const uint KB = 4u;  // keys of a subgroup whose loads are in flight together
  for (uint j0 = gl_SubgroupID; j0 < count; j0 += NS * KB) {
    float d[KB];
    for (uint t = 0u; t < KB; ++t) d[t] = 0.0;
    for (uint c = 4u * lane; c < hd; c += 4u * S) {
      const vec4 qv = vec4(qs[c], qs[c + 1u], qs[c + 2u], qs[c + 3u]);
      for (uint t = 0u; t < KB; ++t) {
        const uint j = j0 + t * NS;
        if (j < count) d[t] += dot(qv, k4[((first + j) * D + hh * hd + c) >> 2]);
      }
    }
    for (uint t = 0u; t < KB; ++t) {
      const float s = subgroupAdd(d[t]);
      if (j0 + t * NS < count && subgroupElect()) PS(j0 + t * NS) = s * pc.attn_scale;
    }
  }
  barrier();
  float mx = -3.402823e38;
  for (uint j = tid; j < count; j += THREADS) mx = max(mx, PS(j));
  mx = block_max(mx);
  float l = 0.0;
  for (uint j = tid; j < count; j += THREADS) {
    const float e = exp(PS(j) - mx);
    PS(j) = e;
    l += e;
  }
  l = block_sum(l);  // its barriers also make the exp(s - m) visible
  // p·V: invocation (g, slice) sums column vec4 g over keys slice, slice + slices, ..., VB keys'
  // loads in flight together.
  const uint cols = hd / 4u, slices = VT / cols, g = tid % cols, slice = tid / cols, VB = 8u;
  vec4 acc = vec4(0.0);
  if (tid < VT && slice < slices)
    for (uint j0 = slice; j0 < count; j0 += VB * slices) {
      vec4 vv[VB];
      for (uint t = 0u; t < VB; ++t) {
        const uint j = j0 + t * slices;
        vv[t] = j < count ? v4[((first + j) * D + hh * hd) / 4u + g] : vec4(0.0);
      }
      for (uint t = 0u; t < VB; ++t)
        if (j0 + t * slices < count) acc += PS(j0 + t * slices) * vv[t];
    }
  if (tid < VT) pv[tid] = acc;
  barrier();
  vec4 o = vec4(0.0);
  if (tid < cols)
    for (uint sl = 0u; sl < slices; ++sl) o += pv[sl * cols + tid];
  if (chunks == 1u) {  // the head's only item: its output
    if (tid < cols) att4[(hh * hd) / 4u + tid] = o / l;
    barrier();  // pv, qs and the scores are free again
    return;
  }
  if (tid == 0u) partials[dst] = mx, partials[dst + 1u] = l;
  if (tid < cols) {
    const uint at = dst + 2u + 4u * tid;
    partials[at] = o.x, partials[at + 1u] = o.y, partials[at + 2u] = o.z, partials[at + 3u] = o.w;
  }
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) flag = atomicAdd(sync_[16u + hh], 1u) == chunks - 1u;
  barrier();
  if (!flag) return;
  memoryBarrierBuffer();  // the other items' partials, seen after their counts
  const uint base = hh * max_chunks * row;
  float m_all = -3.402823e38;
  for (uint c = tid; c < chunks; c += THREADS) m_all = max(m_all, partials[base + c * row]);
  m_all = block_max(m_all);
  float total = 0.0;
  for (uint c = tid; c < chunks; c += THREADS) total += partials[base + c * row + 1u] * exp(partials[base + c * row] - m_all);
  total = block_sum(total);
  float out_e = 0.0;  // element tid of the head's output (head dim <= VT)
  for (uint c0 = 0u; c0 < chunks; c0 += VT) {
    barrier();
    if (tid < VT && c0 + tid < chunks) wts[tid] = exp(partials[base + (c0 + tid) * row] - m_all);
    barrier();
    const uint n = min(VT, chunks - c0);
    if (tid < hd)
      for (uint c = 0u; c < n; ++c) out_e += partials[base + (c0 + c) * row + 2u + tid] * wts[c];
  }
  if (tid < hd) att[hh * hd + tid] = out_e / total;
  if (tid == 0u) sync_[16u + hh] = 0u;
  barrier();  // the flag is free again
}

void attention_phase() {
  // Every subgroup of this workgroup past its qkv rows before any waits for a head's count: the
  // wait must depend on other workgroups only (resident, so they progress), never on a subgroup of
  // its own, which a device may not run while another spins (llvmpipe in Mesa 25 does not: the
  // wait gave up there with one workgroup).
  barrier();
  const uint G = gl_NumWorkGroups.x, keys = position[0] + 1u;
  // Keys per item: enough that the heads' items fill the grid at most once, at least MIN_ITEM (a
  // head's item that is its only one saves the combine's round trips), a multiple of CHUNK, and
  // at most the staging row (the scores' room). H200, f16, µs a block at ~220 / ~560 keys:
  // items of >= 128 keys 60.3 / 61.5, of >= 256 63.4 / 67.7, of 64 (560 keys) 64.3.
  // (bench/vulkan_notes.md)
  const uint per_head = max(G / pc.heads, 1u);
  uint size = pc.chunk != 0u ? pc.chunk : max(MIN_ITEM, ((keys + per_head - 1u) / per_head + CHUNK - 1u) / CHUNK * CHUNK);
  size = min(size, XS / CHUNK * CHUNK);
  const uint chunks = (keys + size - 1u) / size, items = pc.heads * chunks;
  const uint max_chunks = (pc.max_keys + CHUNK - 1u) / CHUNK;
  // From the last workgroup down: those are the ones with no second round of qkv rows.
  for (uint item = G - 1u - gl_WorkGroupID.x; item < items; item += G)
    attend(item / chunks, item % chunks, size, chunks, keys, max_chunks);
}

void main() {
  if (pc.probe != 0u) {
    grid_arrive();
    grid_wait(1u);
    grid_arrive();
    grid_wait(2u);
    finish();
    return;
  }
  const uint D = pc.dim;
  uvec4 pre[LOADS];
  if (pc.head_rows != 0u) {
    prefetch(4u, pc.head_rows, D, ROWS, pre);
    gemv(4u, pc.head_rows, D, ROWS, stage(0u, D, 0u), pre);
    return;
  }
  prefetch(0u, 3u * D, D, QKV_ROWS, pre);
  if ((pc.phases & 1u) != 0u) gemv(0u, 3u * D, D, QKV_ROWS, stage(0u, D, 1u), pre);
  prefetch(1u, D, D, ROWS, pre);  // held through the attention phase
  if ((pc.phases & 2u) != 0u) attention_phase();  // no grid barrier: per-head ready counts
  grid_arrive();
  grid_wait(1u);
  if ((pc.phases & 4u) != 0u) gemv(1u, D, D, ROWS, stage(1u, D, 0u), pre);
  grid_arrive();
  ffn_prefetch(pre);
  grid_wait(2u);
  if ((pc.phases & 8u) != 0u) ffn_phase(pre);
  finish();
}
