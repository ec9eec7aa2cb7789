// decode_layer.comp's attention phase over the KV cache: items of (head, run of keys), each
// head's items combined by its last; included by decode_layer.comp after its bindings.

// Item (head hh, chunk c: keys c·chunk ..) of the p + 1 keys, scored with q and the cache's keys
// (key p, this token's, from its tagged pairs: stage_qk) but summed over the values of keys < p
// only, so that the attention never waits for qkv's v rows (stored last): out_proj adds this
// token's value row, times the head's weight of it, exp(s_p - m) / l. A head of one item writes
// its output o / l and that weight at once, as tagged pairs (out_proj polls them); else each item
// writes its max m, sum l = Σ exp(s - m) and o = Σ exp(s - m)·v to partials (the last item also
// exp(s_p - m), at value_weight_at) and the head's last item to finish combines them
// (attention_decode.comp's method) and writes the output and the weight.
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

// Where head hh's key row starts among the qkv rows (hd: the caller's head dim).
#ifdef LLAMA
#define KEY_ROWS(hh) (Q_DIM + KV_HEAD(hh) * hd)
#else
#define KEY_ROWS(hh) (pc.dim + (hh) * hd)
#endif

// Head hh's q into qs and its key p into kps, from their tagged pairs (each invocation some of the
// 2·hd elements): the attention's wait for phase 1, with no fence or count on either side.
void stage_qk(uint hh) {
  const uint hd = HD;
  for (uint e = tid; e < 2u * hd; e += THREADS) {
    const uint r = e < hd ? hh * hd + e : KEY_ROWS(hh) + e - hd;
    const float x = tagged_wait(r);
    if (e < hd) qs[e] = x;
    else kps[e - hd] = x;
  }
#ifdef LLAMA
  if (HD4 == 0u && tid < 2u) qs[hd + tid] = 0.0, kps[hd + tid] = 0.0;  // the last vec4's 2 past hd
#endif
}

// Elements c .. c + 3 (c a multiple of 4) of the KV cache row of a head that starts at element
// `at` (k: which 0, v: 1), zero past the head's hd; HD4 1: one vec4 load.
#ifdef LLAMA
vec4 cache4(uint which, uint at, uint c, uint hd) {
  if (HD4 != 0u) return which == 0u ? k4[(at + c) >> 2] : v4[(at + c) >> 2];
  vec4 x = vec4(0.0);
  for (uint i = 0u; i < 4u; ++i)
    if (c + i < hd) x[i] = which == 0u ? k_cache[at + c + i] : v_cache[at + c + i];
  return x;
}
// Key or value j of the item, head elements c .. c + 3 (first, hh, hd: attend's).
#define KEY4(j, c) cache4(0u, o_kv + (first + (j)) * KV_DIM + KV_HEAD(hh) * hd, c, hd)
#define VALUE4(j, g) cache4(1u, o_kv + (first + (j)) * KV_DIM + KV_HEAD(hh) * hd, 4u * (g), hd)
#define HEAD_VEC4S ((hd + 3u) / 4u)
#else
#define KEY4(j, c) k4[(o_kv + (first + (j)) * D + hh * hd + (c)) >> 2]
#define VALUE4(j, g) v4[(o_kv + (first + (j)) * D + hh * hd) / 4u + (g)]
#define HEAD_VEC4S (hd / 4u)
#endif

void attend(uint hh, uint chunk, uint size, uint chunks, uint keys, uint max_chunks, bool marks) {
  const uint hd = HD, row = hd + 2u, D = pc.dim;
  const uint first = chunk * size, count = min(size, keys - first);
  const bool has_p = first + count == keys;  // the item holds key p
  const uint v_count = has_p ? count - 1u : count;  // its keys whose value rows it sums
  const uint dst = (hh * max_chunks + chunk) * row;
  const uint lane = gl_SubgroupInvocationID, S = gl_SubgroupSize, NS = gl_NumSubgroups;
  const uint KB = 4u;  // keys of a subgroup whose loads are in flight together
  // The first round's keys (< p: in the cache before this token) in flight during the wait for q
  // and key p (H200, ms a token against loading them after it: f16 0.570-0.572 / 0.576-0.578; the
  // first round's values too: f16 0.586-0.587, int8 0.598-0.601, slower).
  vec4 kp[KB];
  for (uint t = 0u; t < KB; ++t) {
    const uint j = gl_SubgroupID + t * NS, c = 4u * lane;
    const bool cached = j < count && first + j + 1u != keys && c < hd;
    kp[t] = cached ? KEY4(j, c) : vec4(0.0);
  }
  stage_qk(hh);
  if (marks) mark(3u);
  barrier();
  for (uint j0 = gl_SubgroupID; j0 < count; j0 += NS * KB) {
    float d[KB];
    for (uint t = 0u; t < KB; ++t) d[t] = 0.0;
    for (uint c = 4u * lane; c < hd; c += 4u * S) {
      const vec4 qv = vec4(qs[c], qs[c + 1u], qs[c + 2u], qs[c + 3u]);
      for (uint t = 0u; t < KB; ++t) {
        const uint j = j0 + t * NS;
        if (j < count) {
          const bool own = first + j + 1u == keys;  // key p: staged by stage_qk
          d[t] += dot(qv, own ? vec4(kps[c], kps[c + 1u], kps[c + 2u], kps[c + 3u])
                              : j0 == gl_SubgroupID && c == 4u * lane ? kp[t]
                              : KEY4(j, c));
        }
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
  if (marks) mark(4u);
  // p·V: invocation (g, slice) sums column vec4 g over keys slice, slice + slices, ..., VB keys'
  // loads in flight together.
  const uint cols = HEAD_VEC4S, slices = VT / cols, g = tid % cols, slice = tid / cols, VB = 8u;
  vec4 acc = vec4(0.0);
  if (tid < VT && slice < slices)
    for (uint j0 = slice; j0 < v_count; j0 += VB * slices) {
      vec4 vv[VB];
      for (uint t = 0u; t < VB; ++t) {
        const uint j = j0 + t * slices;
        vv[t] = j < v_count ? VALUE4(j, g) : vec4(0.0);
      }
      for (uint t = 0u; t < VB; ++t)
        if (j0 + t * slices < v_count) acc += PS(j0 + t * slices) * vv[t];
    }
  if (tid < VT) pv[tid] = acc;
  barrier();
  vec4 o = vec4(0.0);
  if (tid < cols)
    for (uint sl = 0u; sl < slices; ++sl) o += pv[sl * cols + tid];
  const float e_p = has_p ? PS(count - 1u) : 0.0;  // exp(s_p - m)
  if (chunks == 1u) {  // the head's only item: its output and its weight of value row p
    if (tid < cols)
      for (uint i = 0u; i < 4u; ++i)
#ifdef LLAMA
        if (4u * tid + i < hd)
#endif
          tagged_store(QKV_DIM + hh * hd + 4u * tid + i, o[i] / l);
    if (tid == 0u) tagged_store(WEIGHT_PAIRS + hh, e_p / l);
    if (marks) mark(5u);
    barrier();  // pv, qs and the scores are free again
    return;
  }
  if (tid == 0u) {
    partials[dst] = mx, partials[dst + 1u] = l;
    if (has_p) partials[value_weight_at(hh)] = e_p;
  }
  if (tid < cols) {
    const uint at = dst + 2u + 4u * tid;
#ifdef LLAMA
    partials[at] = o.x, partials[at + 1u] = o.y;  // hd even
    if (4u * tid + 2u < hd) partials[at + 2u] = o.z, partials[at + 3u] = o.w;
#else
    partials[at] = o.x, partials[at + 1u] = o.y, partials[at + 2u] = o.z, partials[at + 3u] = o.w;
#endif
  }
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) flag = atomicAdd(sync_[16u + hh], 1u) == chunks - 1u;
  if (marks) mark(5u);
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
  if (tid < hd) tagged_store(QKV_DIM + hh * hd + tid, out_e / total);
  if (tid == 0u) {  // the last item's exp(s_p - m) rescaled to the head's m and sum
    const float w = partials[value_weight_at(hh)] * exp(partials[base + (chunks - 1u) * row] - m_all) / total;
    tagged_store(WEIGHT_PAIRS + hh, w);
    sync_[16u + hh] = 0u;
  }
  barrier();  // the flag is free again
}

// Keys per item: enough that the heads' items fill the grid at most once, at least MIN_ITEM (a
// head's item that is its only one saves the combine's round trips), a multiple of CHUNK, and at
// most the staging row (the scores' room). H200, f16, µs a block at ~220 / ~560 keys: items of
// >= 128 keys 60.3 / 61.5, of >= 256 63.4 / 67.7, of 64 (560 keys) 64.3 (bench/vulkan_notes.md).
uint item_keys(uint keys) {
  const uint per_head = max(gl_NumWorkGroups.x / pc.heads, 1u);
  const uint fill = ((keys + per_head - 1u) / per_head + CHUNK - 1u) / CHUNK * CHUNK;
  const uint size = pc.chunk != 0u ? pc.chunk : max(MIN_ITEM, fill);
  return min(size, XS / CHUNK * CHUNK);
}
void attention_phase() {
  // Every subgroup of this workgroup past its qkv rows before any polls a head's q and k: the
  // wait must depend on other workgroups only (resident, so they progress), never on a subgroup of
  // its own, which a device may not run while another spins (llvmpipe in Mesa 25 does not: the
  // wait gave up there with one workgroup).
  barrier();
  const uint G = gl_NumWorkGroups.x, keys = position[0] + 1u, size = item_keys(keys);
  const uint chunks = (keys + size - 1u) / size, items = pc.heads * chunks;
  const uint max_chunks = (pc.max_keys + CHUNK - 1u) / CHUNK;
  // From the last workgroup down: those are the ones with no second round of qkv rows.
  for (uint item = G - 1u - gl_WorkGroupID.x; item < items; item += G)
    attend(item / chunks, item % chunks, size, chunks, keys, max_chunks, item < G);
  if (G - 1u - gl_WorkGroupID.x >= items) mark(3u), mark(4u), mark(5u);  // no item here
}
