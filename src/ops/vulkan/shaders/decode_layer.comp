// One causal decode token through pc.blocks consecutive transformer blocks in one dispatch (a
// persistent kernel). The grid's workgroups, all resident at once (Ops::persistent_grid probes a
// grid that is), walk each block's phases, with two grid barriers a block, after out_proj and
// after the FFN (block b's weights and KV cache at the offsets of Table row b into the bindings:
// Ops::plan_layers puts blocks whose weights share buffers in one dispatch). Between the other
// phases, values are handed over as (value, tag) pairs, each stored with one 64-bit atomic
// (tagged_at, qk_tag) and polled until it carries this block's tag: no fence, count or barrier.
//   1. qkv = (rmsnorm(h)·g1)·Wqkvᵀ + bqkv; q and k rotated at p = position[0] (RoPE); k, v
//      written to row p of the layer's KV cache and as tagged pairs, q's and k's rows first,
//      head by head, v's last.
//   2. att = attention of q over the cache's p + 1 keys: items (head, run of keys) over the
//      workgroups, from the last one down, each polling its head's q and key p: the workgroups
//      with no second round of qkv rows (the last ones) attend while the rest store v's rows.
//      Where a head has several items, the last to finish combines them (one softmax). Stored
//      as tagged pairs.
//   3. h += att·Woᵀ + bo by tiles of (SL columns, rows) of Wo over the workgroups, each polling
//      its SL values of att (decode_layer_out_proj.glsl), added into h with float atomics once
//      count 3 says that every workgroup's staging has read h.
//   4. h += silu((rmsnorm(h)·g2)·W1ᵀ)·W2ᵀ by slices of SL rows of W1 (columns of W2) over the
//      workgroups: a slice's f1 stays in its workgroup's shared memory, and its product with W2's
//      SL columns is added into h with float atomics (once count 4 says every staging has read
//      h; the sums' order varies run to run). No grid barrier and no staging of the 4D-wide f1
//      between the two matrices: H200, µs a block against the FFN as two phases (f1 = silu(...)
//      stored, a grid barrier, h += f1·W2ᵀ): f16 52.1-52.2 / 53.0, int8 48.8-49.3 / 51.4-51.7,
//      int4 51.9 / 52.3-52.5 (bench/vulkan_notes.md).
// pc.embed != 0: block 0's input is row tokens[0] of the embedding table instead of h (the lookup
// folded in: its own dispatch took 8 µs a token on the H200), written to h for the residual.
// Each GEMV phase stages its input row in shared memory first (x·g, the norm's Σx² summed once per
// workgroup); then each subgroup (or 2 or 4 together, where rows are few and long) takes ROWS
// weight rows at a time (QKV_ROWS in phase 1: rotation pairs, rows i and i + hd/2 of a head;
// FR of a slice in phase 4), grid-stride, its lanes reading consecutive 16-byte words of
// them, LOADS words in flight per lane, and a subgroup sum ends each row. The results are those
// of the per-op path (gemv_subgroup + attention_decode + matmul) up to summation order.
// Grid barrier: a workgroup's writes made visible (memoryBarrierBuffer), then it counts itself in
// on sync[0], loads the first weight words of its next phase (all but the polling subgroup), and
// waits until the count reaches n·(workgroups) at the n-th barrier, then acquires (wait_for).
// Counts 3 and 4 are split barriers too: a workgroup counts itself in once its staging has read h
// and waits for all before its first atomic add into h, which comes microseconds later.
// Every wait (a barrier's, a count's, a tagged pair's) is bounded (about pc.spin_limit reads): past it, or
// once another workgroup has given up (sync[2]), it sets failed[0] for the host, which redoes the
// token on the per-op path.
// The last workgroup to finish sets the counters back to zero for the next dispatch.
// Needs 64-bit buffer atomics (the tagged pairs) and float atomic add (Ops::decode_layer_unsupported).
// pc.probe != 0: only two barriers (Ops::persistent_grid's residency test).
// HEAD 1: the decode head instead (Ops::decode_head): logits (pc.head_rows) = h·Wᵀ with the
// matrix in qkv's bindings, one GEMV phase, no barrier, so the grid need not be resident.
// The phases' code: decode_layer_gemv.glsl (qkv, the head), decode_layer_attention.glsl,
// decode_layer_out_proj.glsl, decode_layer_ffn.glsl; this file holds the bindings, the barriers,
// the tagged pairs, the staging and main.
// TIMELINE (the module decode_layer_timeline, compiled with -DTIMELINE): each workgroup's first
// invocation also stores its SM clock (GL_ARB_shader_clock's low word) at the dispatch's start and
// end and at EVENTS points of every block into Timeline (Ops::enable_timeline): a benchmark's view
// of where a block's time goes, workgroup by workgroup.
// LLAMA (the module decode_layer_llama, compiled with -DLLAMA): a llama block instead of MiniLLM's.
// pc.heads query heads over pc.kv_heads key/value heads of pc.head_dim (q's and att's width
// Q = heads·head_dim need not be D; the KV cache rows are kv_heads·head_dim wide, as the per-op
// path writes them, and query head h reads key/value head h / (heads / kv_heads)); q/k/v and o
// biases where pc.qkv_bias, pc.out_bias say; a SwiGLU MLP of pc.ffn: W1 is [gate; up] (2F, D),
// slice rows taken as (gate, up) pairs, f1 = silu(gate)·up, W2 (D, F). Rows of any length
// (ALIGNED 0: words read at byte offsets, row_word) and head sizes that are not a multiple of 4
// (HD4 0: the cache read by element). HEAD 2: the head behind the final norm (its weights at G1).
// Without LLAMA the preprocessor leaves MiniLLM's kernel exactly as it was: the macros below
// expand there to its own expressions (decode_layer's SPIR-V is unchanged, bench/vulkan_notes.md).
// Needs: one chunk per matrix, rows of whole 16-byte words (int4: groups of a multiple of 32;
// LLAMA: any rows, groups of a multiple of 32), dim % 4 == 0, head dim <= 256, dim <= XS, float
// atomic add (Ops::decode_layer_unsupported checks).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_atomic_float : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_atomic_int64 : require
#ifdef TIMELINE
#extension GL_ARB_shader_clock : require
#endif
layout(local_size_x_id = 3) in;                    // 256, 512 or 1024 (Ops::persistent_grid)
layout(constant_id = 0) const uint XS = 2048u;     // floats of staged x: >= dim and 512, a multiple of 4
layout(constant_id = 1) const uint ROWS = 1u;      // rows per subgroup, phase 3 and the head (<= MAXR)
layout(constant_id = 2) const uint QKV_ROWS = 2u;  // rows per subgroup, phase 1 (even, <= MAXR)
layout(constant_id = 4) const uint WTYPE = 1u;     // WT_* of the four matrices (one decoding per
                                                   // pipeline: 1.55x faster than a runtime branch)
layout(constant_id = 5) const uint LOADS = 4u;     // 16-byte words in flight per lane (>= ROWS, QKV_ROWS)
// MULTI 1: pc.blocks blocks, their offsets from the Table; 0: one block a dispatch, bound at its
// own tensors (no Table reads, no block loop). H200, seed size, ms a token with a dispatch per
// block, this way / through the Table: f16 0.690 / 0.707,
// int8 0.639 / 0.663, int4 0.688-0.699 / 0.706-0.712 (bench/vulkan_notes.md).
layout(constant_id = 6) const uint MULTI = 1u;
// POLL 1: waits read the counts with acquire atomic loads (GPUs); 0: with relaxed atomics, then
// one acquire fence (CPU devices: below). H200, ms a token, 1 / 0 in the same calls: f16
// 0.583-0.586 / 0.589-0.592, int8 0.569-0.585 / 0.574-0.587, int4 0.600-0.601 / 0.607-0.617.
layout(constant_id = 7) const uint POLL = 1u;
// HEAD 1: decode_head's pipeline, the head's GEMV alone (pc.head_rows; the block phases compiled
// out: H200 registers f16 94 against 119, int4 97 against 109). LLAMA's HEAD 2: after the final
// RMSNorm (its weights in G1's binding).
layout(constant_id = 8) const uint HEAD = 0u;
#ifdef LLAMA
// ALIGNED 1: every block matrix's rows are whole 16-byte words (read as uvec4s); 0: read at their
// byte offsets (row_word). HD4 1: head dim a multiple of 4 (the KV cache read as vec4s); 0: by
// element (cache4).
layout(constant_id = 9) const uint ALIGNED = 1u;
layout(constant_id = 10) const uint HD4 = 1u;
#endif
const uint MAXR = 4u, CHUNK = 32u, MIN_ITEM = 128u;
const uint SL = 64u;  // FFN slice: rows of W1 (columns of W2) per workgroup at a time
#ifdef LLAMA
const uint FR = (LOADS < MAXR ? LOADS : MAXR) & ~1u;  // even: a gate row and its up row together
#else
const uint FR = LOADS < MAXR ? LOADS : MAXR;  // rows of W1 a subgroup at a time (a load each a step at least)
#endif

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
  uint chunk;       // keys per attention item (a multiple of 32); 0: chosen (attention_phase)
  uint head_rows;   // HEAD: the head's rows, logits (head_rows) = h · Wᵀ (W in Wqkv's binding), no barrier
  uint blocks;      // blocks in this dispatch: Table rows first_row .. first_row + blocks - 1
  uint first_row;
  uint embed;       // 1 f32, 2 f16: block 0 starts from row tokens[0] of Embed (and writes it to h)
#ifdef LLAMA
  uint kv_heads;    // key/value heads (dividing heads)
  uint head_dim;    // hd (heads·hd need not be dim)
  uint ffn;         // F: W1 (2F, D) is [gate; up], W2 (D, F)
  uint qkv_bias;    // 1: q, k and v have biases (Bqkv)
  uint out_bias;    // 1: out_proj has a bias (Bo)
#endif
} pc;

layout(std430, binding = 0) coherent buffer Hid { float h[]; };  // (D) the residual stream, in and out
layout(std430, binding = 0) coherent buffer Hid4 { vec4 h4[]; };
layout(std430, binding = 1) buffer HeadOut { float logits[]; };  // HEAD: (head_rows)
// Bindings 2 and 3: unused.
layout(std430, binding = 4) readonly buffer Wqkv { uvec4 w_qkv[]; };  // (3D, D) edge encoding
layout(std430, binding = 5) readonly buffer Wo { uvec4 w_o[]; };      // (D, D)
layout(std430, binding = 6) readonly buffer W1 { uvec4 w_1[]; };      // (4D, D)
layout(std430, binding = 7) readonly buffer W2 { uvec4 w_2[]; };      // (D, 4D)
#ifdef LLAMA
// The same matrices as 32-bit words (ALIGNED 0: rows start anywhere): (Q + 2KV, D), (D, Q), (2F, D), (D, F).
layout(std430, binding = 4) readonly buffer WqkvU { uint w_qkv_u[]; };
layout(std430, binding = 5) readonly buffer WoU { uint w_o_u[]; };
layout(std430, binding = 6) readonly buffer W1U { uint w_1_u[]; };
layout(std430, binding = 7) readonly buffer W2U { uint w_2_u[]; };
#endif
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
layout(std430, binding = 20) coherent buffer Tagged { uint64_t tagged[]; };  // (value, tag) pairs: tagged_at
// 0 the grid barriers' count, 1 done, 2 failed, 3 and 4 the stagings that read h (phases 1 and 4);
// 16 + h: head h's finished attention items

layout(std430, binding = 21) coherent buffer Sync { uint sync_[]; };
layout(std430, binding = 22) buffer Failed { uint failed[]; };  // host-visible: a barrier gave up
// Table, 16 words per block: the 16-byte-word offsets of Wqkv, Wo, W1, W2 in their bindings; the 32-bit
// word offsets of their scales, then of Bqkv, Bo, G1, G2; the float offset of its KV cache rows.
layout(std430, binding = 23) readonly buffer Offsets { uint table[]; };
layout(std430, binding = 24) readonly buffer Embed { uint emb[]; };  // (V, D) f32 or f16 pairs
layout(std430, binding = 25) readonly buffer Tokens { uint tokens[]; };
#ifdef TIMELINE
// (2, workgroups): the SM clock at each workgroup's start and end; then (blocks, EVENTS, workgroups)
// the clock at event e of Table row first_row + b: 0 the block's start (the previous barrier
// passed), 1 qkv's row staged, 2 qkv stored, in the workgroup's first attention item 3 its head's
// q and k seen stored, 4 its scores' softmax done, 5 its output stored (a workgroup with no item:
// 3-5 at 6), 6 the attention done, 7 its first out_proj tile's att seen (and count 3), 8 out_proj
// added, 9 the barrier after out_proj passed, 10 the FFN's row staged, 11 its first slice's f1
// done, 12 the FFN done.
layout(std430, binding = 26) buffer Timeline { uint timeline[]; };
#endif
const uint EVENTS = 13u;

// The block's sizes. MiniLLM's: H heads of D / H, q, k, v and att D wide, the FFN 4D; LLAMA's from
// the push constants. HD the head dim, Q_DIM q's and att's width (Wo's columns), KV_DIM k's and
// v's (a KV cache row), QKV_DIM a token's q, k and v (phase 1's rows), FFN_DIM the MLP's width,
// KV_HEAD(hh) query head hh's key/value head. MiniLLM's expand to its kernel's own expressions,
// some of them with the caller's local D (= pc.dim) as its text had: QKV_DIM, and the _D forms of
// Q_DIM and FFN_DIM (the same sizes), so that its SPIR-V stays byte for byte what it was.
#ifdef LLAMA
#define HD pc.head_dim
#define Q_DIM (pc.heads * pc.head_dim)
#define Q_DIM_D Q_DIM
#define KV_DIM (pc.kv_heads * pc.head_dim)
#define QKV_DIM (Q_DIM + 2u * KV_DIM)
#define FFN_DIM pc.ffn
#define FFN_DIM_D FFN_DIM
#define KV_HEAD(hh) ((hh) / (pc.heads / pc.kv_heads))
#else
#define HD (pc.dim / pc.heads)
#define Q_DIM pc.dim
#define Q_DIM_D D
#define QKV_DIM (3u * D)
#define FFN_DIM (4u * pc.dim)
#define FFN_DIM_D (4u * D)
#endif

#include "words.glsl"

shared vec4 xs4[XS / 4u];   // the staged input row
shared float red[THREADS / 4u];               // per-subgroup sums (subgroups of 4 or more)
shared float part_sums[THREADS / 4u * MAXR];  // a split row set's partial sums, per subgroup
shared float qs[256];       // attention: the head's q
shared float kps[256];      // attention: the head's key p
shared vec4 pv[VT];         // attention: p·V per (vec4 column, key slice)
shared float wts[VT];       // attention: the combine's chunk weights
shared bool flag;           // attention: this workgroup combines the head
shared vec4 f1s4[SL / 4u];  // a column slice's values: out_proj's of att, the FFN's of f1
shared float w2_parts[LOADS * THREADS];  // the slice's rows' partial dots, per (load, invocation)
// Attention's scores (then exp(s - m)), one per key of an item: in the staging row, which the
// attention phase does not use.
#define PS(j) xs4[(j) >> 2][(j) & 3u]

// Where x's vec4 i lies in xs4: swizzled within each aligned run of 8 vec4s (128 bytes, all 32
// banks), so that the lanes of a GEMV, lane v reading vec4s F·v .. F·v + F - 1 of the row, meet
// distinct banks (unswizzled, the 8 lanes of a 16-byte access phase would share F-way: int4 8-way,
// int8 4-way, f16 2-way). Staging writes stay conflict-free: a run of 8 is permuted in itself.
uint swz(uint i) { return i ^ ((i >> 3u) & (F - 1u)); }

#define tid gl_LocalInvocationIndex

// The block being run: its index in the dispatch and its Table row (uniform over the grid).
uint blk = 0u;
uvec4 o_w = uvec4(0u), o_s = uvec4(0u), o_v = uvec4(0u);  // (qkv, out_proj, ffn.0, ffn.2); (Bqkv, Bo, G1, G2)
uint o_kv = 0u;
bool pre_loaded = true;  // this subgroup's first words of its next GEMV phase are in main's `pre`
// Timeline's event e of the block being run (nothing without TIMELINE).
void mark(uint e) {
#ifdef TIMELINE
  const uint G = gl_NumWorkGroups.x;
  if (tid == 0u) timeline[2u * G + ((pc.first_row + blk) * EVENTS + e) * G + gl_WorkGroupID.x] = clock2x32ARB().x;
#endif
}
void mark_edge(uint end) {  // the dispatch's start (0) or end (1)
#ifdef TIMELINE
  if (tid == 0u) timeline[end * gl_NumWorkGroups.x + gl_WorkGroupID.x] = clock2x32ARB().x;
#endif
}
void enter_block(uint b) {
  if (MULTI == 0u) return;
  const uint t = 16u * (pc.first_row + b);
  blk = b;
  o_w = uvec4(table[t], table[t + 1u], table[t + 2u], table[t + 3u]);
  o_s = uvec4(table[t + 4u], table[t + 5u], table[t + 6u], table[t + 7u]);
  o_v = uvec4(table[t + 8u], table[t + 9u], table[t + 10u], table[t + 11u]);
  o_kv = table[t + 12u];
}

// ---- grid barrier ----------------------------------------------------------------------------
// Split in two so that a workgroup can issue loads that do not depend on the other workgroups
// (the next phase's first weight words) between arriving and waiting.
// The count is read with an atomic: llvmpipe hoists volatile loads out of a loop. POLL 1: each read
// an acquire; 0 (CPU devices): relaxed, and wait_for acquires with a fence after its last read
// (with acquire reads, llvmpipe in Mesa 22.3 let a grid of 4096 workgroups pass the residency
// probe).
uint sync_read(uint i) {
  if (POLL != 0u) return atomicLoad(sync_[i], gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquire);
  return atomicOr(sync_[i], 0u);
}

void grid_arrive() {  // this workgroup's writes visible to the device, then counted
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) atomicAdd(sync_[0], 1u);
}
// After stage() (whose last barrier follows every invocation's use of what it read from h): this
// workgroup counted in on sync[i], its reads of h done. No fence, which would wait for the
// prefetched words too (H200: 0.7 µs a staging); one only where the staging wrote h (`wrote`: the
// embedding's share).
void count_staged(uint i, bool wrote) {
  if (wrote) {
    memoryBarrierBuffer();
    barrier();
  }
  if (tid == 0u) atomicAdd(sync_[i], 1u);
}

// Until sync[i] >= target, on the calling invocation (the workgroup's first: wait_for, or count 3
// and 4's waits, whose closing barrier is the caller's).
void wait_count(uint i, uint target) {
  // Two nested loops of at most 1024 and spin_limit / 1024 reads: llvmpipe ends any loop after
  // 65535 iterations. The last count read decides: no read after the one that saw the target.
  uint seen = sync_read(i);
  for (uint outer = 0u; seen < target && outer < max(pc.spin_limit >> 10u, 1u); ++outer) {
    for (uint spins = 0u; seen < target && spins < min(pc.spin_limit, 1024u); ++spins) seen = sync_read(i);
    if (seen < target && sync_read(2u) != 0u) break;  // another workgroup gave up
  }
  if (seen < target || pc.spin_limit == 0u) {  // 0: a failure injected by tests
    atomicOr(sync_[2], 1u);
    failed[0] = 1u;
  }
  if (POLL == 0u) memoryBarrier(gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquire);
}

// A grid barrier's wait: the workgroup waits on its first invocation, which acquires the counted
// writes (by the read that saw the count, or a fence after it: POLL), and the barrier passes them
// on to the rest of the workgroup. No full fence in every invocation: that waits for each one's
// loads in flight, the next phase's prefetched words (H200, f16: 0.59 against 0.605 ms a token
// with memoryBarrierBuffer after the barrier).
void wait_for(uint i, uint target) {
  if (tid == 0u) wait_count(i, target);
  controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsBuffer | gl_StorageSemanticsShared,
                 gl_SemanticsAcquireRelease);
}

void grid_wait(uint n) { wait_for(0u, n * gl_NumWorkGroups.x); }  // every workgroup arrived n times

void finish() {  // the last workgroup out resets the counts for the next dispatch
  barrier();
  if (tid == 0u && atomicAdd(sync_[1], 1u) == gl_NumWorkGroups.x - 1u) {
    sync_[0] = 0u;
    sync_[1] = 0u;
    sync_[3] = 0u;
    sync_[4] = 0u;
  }
}

// ---- the matrices: m = 0 qkv, 1 out_proj, 2 ffn.0, 3 ffn.2; 4 the head (in qkv's bindings) ----
uvec4 w_word(uint m, uint i) {  // m 0, 2 or 4 (Wo: out_word; W2: w2_load_one)
  if (m == 0u || m == 4u) return w_qkv[o_w.x + i];
  return w_1[o_w.z + i];
}
uint s_word(uint m, uint i) {
  if (m == 0u || m == 4u) return s_qkv[o_s.x + i];
  if (m == 1u) return s_o[o_s.y + i];
  if (m == 2u) return s_1[o_s.z + i];
  return s_2[o_s.w + i];
}
// int8: row i's scale; int4: scale i of the (rows, groups) table. One load, then a select: with a
// branch on pc.scale_f16 around two loads, H200 int4 0.583-0.615 against 0.560-0.572 ms a token.
float scale_at(uint m, uint i) {
  const bool half_scales = WTYPE == WT_INT4 && pc.scale_f16 != 0u;
  const uint word = s_word(m, half_scales ? i >> 1 : i);
  return half_scales ? unpackHalf2x16(word)[i & 1u] : uintBitsToFloat(word);
}
float bias_qkv(uint r) {
  return pc.bias_f16 != 0u ? unpackHalf2x16(b_qkv[o_v.x + (r >> 1)])[r & 1u] : uintBitsToFloat(b_qkv[o_v.x + r]);
}
float bias_o(uint r) {
  return pc.bias_f16 != 0u ? unpackHalf2x16(b_o[o_v.y + (r >> 1)])[r & 1u] : uintBitsToFloat(b_o[o_v.y + r]);
}
uint g_word(uint which, uint i) { return which == 0u ? g_1[o_v.z + i] : g_2[o_v.w + i]; }
vec4 norm4(uint which, uint c) {  // g[c .. c + 3], c a multiple of 4
  if (pc.norm_f16 != 0u) return f16x4(g_word(which, c >> 1), g_word(which, (c >> 1) + 1u));
  return uintBitsToFloat(uvec4(g_word(which, c), g_word(which, c + 1u), g_word(which, c + 2u), g_word(which, c + 3u)));
}

// ---- staging -----------------------------------------------------------------------------------
vec4 embed4(uint c4) {  // vec4 c4 of token tokens[0]'s embedding row
  const uint at = tokens[0] * pc.dim + 4u * c4;
  if (pc.embed == 2u) return f16x4(emb[at >> 1], emb[(at >> 1) + 1u]);
  return uintBitsToFloat(uvec4(emb[at], emb[at + 1u], emb[at + 2u], emb[at + 3u]));
}

// Where a head of several attention items leaves its last item's exp(s_p - m) for the combine: in
// partials, past the items' (m, l, o) rows (Ops::attention_partials counts it).
uint value_weight_at(uint hh) {
  return pc.heads * ((pc.max_keys + CHUNK - 1u) / CHUNK) * (HD + 2u) + hh;
}
// Pair r as a (value, tag) pair in partials, past the weights, 64-bit aligned
// (Ops::attention_partials counts them): r < QKV_DIM q's, k's and v's rows (3D in MiniLLM's
// blocks), QKV_DIM + c the attention's output, WEIGHT_PAIRS + h head h's weight of this token's
// value row.
uint tagged_at(uint r) { return (value_weight_at(pc.heads) + 1u) / 2u + r; }
#ifdef LLAMA
#define WEIGHT_PAIRS (QKV_DIM + Q_DIM)
#else
#define WEIGHT_PAIRS (4u * D)
#endif
// The tag of this token's block blk: position[1] is a count of the decoder's forwards (never 0),
// times 4096 plus the block's Table row plus 1, so that no earlier block's or token's pair (nor a
// zeroed one) carries it. Wraps after 2^20 forwards, long after every pair was rewritten.
uint qk_tag() { return position[1] * 4096u + pc.first_row + blk + 1u; }
void tagged_store(uint r, float x) {
  atomicStore(tagged[tagged_at(r)], pack64(uvec2(floatBitsToUint(x), qk_tag())), gl_ScopeDevice,
              gl_StorageSemanticsBuffer, gl_SemanticsRelaxed);
}
uvec2 tagged_read(uint r) {  // (value bits, tag): relaxed 64-bit atomics, so a pair is read whole
  return unpack32(atomicLoad(tagged[tagged_at(r)], gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsRelaxed));
}
// Pair r's value, read again from `got` (a first read) until it carries this block's tag (where
// `wait`: else a benchmark's diagnostic that skipped the phase storing it). Bounded as wait_for
// is; giving up sets failed[0].
float tagged_settle(uint r, uvec2 got) {
  const uint tag = qk_tag();
  for (uint outer = 0u; got.y != tag && outer < max(pc.spin_limit >> 10u, 1u); ++outer) {
    for (uint spins = 0u; got.y != tag && spins < min(pc.spin_limit, 1024u); ++spins) got = tagged_read(r);
    if (got.y != tag && sync_read(2u) != 0u) break;  // another workgroup gave up
  }
  if (got.y != tag || pc.spin_limit == 0u) {  // 0: a failure injected by tests
    atomicOr(sync_[2], 1u);
    failed[0] = 1u;
  }
  return uintBitsToFloat(got.x);
}
float tagged_wait(uint r) { return tagged_settle(r, tagged_read(r)); }

// xs4 = the input row (src 0: h, 3: the token's embedding row, each workgroup writing its share of
// it to h; cols floats), times g (norm 1: g1, 2: g2; 0: none).
// Returns rstd = 1 / sqrt(Σx² / cols + eps) with a norm, else 1.
float stage(uint src, uint cols, uint norm) {
  float ss = 0.0;
  for (uint c4 = tid; c4 < cols / 4u; c4 += THREADS) {
    vec4 x = src == 0u ? h4[c4] : embed4(c4);
    if (src == 3u && c4 % gl_NumWorkGroups.x == gl_WorkGroupID.x) h4[c4] = x;  // read after count 3
    if (norm != 0u) {
      ss += dot(x, x);
      x *= norm4(norm - 1u, 4u * c4);
    }
    xs4[swz(c4)] = x;
  }
#ifdef LLAMA
  // Rows not of whole words (ALIGNED 0): the last word's columns past cols multiply zeros.
  if (ALIGNED == 0u)
    for (uint c4 = cols / 4u + tid; c4 < (cols / 4u + F - 1u) / F * F; c4 += THREADS) xs4[swz(c4)] = vec4(0.0);
#endif
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

#include "decode_layer_gemv.glsl"
#include "decode_layer_out_proj.glsl"
#include "decode_layer_ffn.glsl"
#include "decode_layer_attention.glsl"

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
  if (HEAD != 0u) {
    prefetch(4u, pc.head_rows, D, ROWS, pre);
#ifdef LLAMA
    gemv(4u, pc.head_rows, D, ROWS, stage(0u, D, HEAD == 2u ? 1u : 0u), pre);
#else
    gemv(4u, pc.head_rows, D, ROWS, stage(0u, D, 0u), pre);
#endif
    return;
  }
  mark_edge(0u);
  enter_block(0u);
  prefetch(0u, QKV_DIM, D, QKV_ROWS, pre);
  for (uint b = 0u; b < (MULTI != 0u ? pc.blocks : 1u); ++b) {  // barriers 2b + 1 in block b, 2b + 2 after it
    mark(0u);
    const uint src = b == 0u && pc.embed != 0u ? 3u : 0u;
    const float rstd = stage(src, D, 1u);
    count_staged(3u, src == 3u);  // out_proj may add into h once every workgroup has counted in
    mark(1u);
    gemv(0u, QKV_DIM, D, QKV_ROWS, rstd, pre);
    mark(2u);
    // out_proj's first words, held through the attention phase in `pre`, whose qkv words are done
    // with (an array of their own would leave both live through the attention: `pre` is read again
    // only where pre_loaded, which the compiler cannot tie to the write that `first` skips).
    out_proj_prefetch(pre);
    attention_phase();  // no grid barrier: q and k polled by tag
    mark(6u);
    out_proj_phase(pre);  // no grid barrier: att polled by tag
    mark(8u);
    grid_arrive();
    // Between arriving and waiting, the next phase's first words; not in the subgroup that polls
    // the count (tid 0's), which loads its own after the wait (H200, ms a token against every
    // subgroup loading ahead: int8 0.541-0.542 / 0.543-0.549, int4 0.557-0.559 / 0.563-0.567, f16
    // 0.572-0.577 either way).
    pre_loaded = gl_SubgroupID != 0u;
    if (pre_loaded) ffn_prefetch(pre);
    grid_wait(2u * b + 1u);
    mark(9u);
    ffn_phase(pre);
    mark(12u);
    if (MULTI == 0u || b + 1u == pc.blocks) break;
    grid_arrive();  // the FFN's sums in h before the next block stages it
    enter_block(b + 1u);
    pre_loaded = gl_SubgroupID != 0u;  // as at the barrier after out_proj
    if (pre_loaded) prefetch(0u, QKV_DIM, D, QKV_ROWS, pre);
    grid_wait(2u * b + 2u);
  }
  mark_edge(1u);
  finish();
}
