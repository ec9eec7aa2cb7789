#include "ops/vulkan/inference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/vulkan/context.h"
#include "ops/vulkan/ops.h"
#include "ops/vulkan/weights.h"

namespace pylon::vk {
namespace {

WeightPath weight_path(const std::string& s) {
  if (s == "auto") return WeightPath::automatic;
  if (s == "import") return WeightPath::import;
  PYLON_CHECK(s == "upload", "Vulkan weights path ", s, " is not auto, import or upload");
  return WeightPath::upload;
}

ContextOptions context_options(const InferenceOptions& o) {
  ContextOptions c;
  c.device_index = o.device_index;
  c.max_buffer_bytes = o.max_buffer_bytes;
  c.allow_coopmat = o.allow_coopmat;
  c.allow_float_atomics = o.allow_float_atomics;
  c.allow_int64_atomics = o.allow_int64_atomics;
  c.fail_allocation = o.fail_allocation;
  c.pipeline_stats = o.pipeline_stats;
  return c;
}

// The context for a model the Vulkan kernels run (heads whose size RoPE halves, up to 256 floats,
// in groups that divide them), checked before the device is opened.
ContextOptions context_options_for(const InferenceSpec& s, const InferenceOptions& o) {
  PYLON_CHECK(s.head_size > 0 && s.head_size % 2 == 0 && s.head_size <= 256, "Vulkan: a head size of ",
              s.head_size, " (its kernels take even sizes up to 256): run this model with --device cpu");
  PYLON_CHECK(s.kv_heads > 0 && s.heads % s.kv_heads == 0 && static_cast<uint32_t>(s.heads) <= Ops::kMaxHeads,
              "Vulkan: ", s.heads, " heads over ", s.kv_heads, " key/value heads (at most ", Ops::kMaxHeads,
              " heads, in groups that divide them)");
  return context_options(o);
}

// Whether the model's blocks are those the persistent decode kernel runs (decode_layer.comp):
// MiniLLM's (nn.MultiheadAttention's heads of dim/heads with q, k, v and o biases, a SiLU MLP of
// 4·dim) or llama's (any grouped heads the op-by-op path takes, biases or none, SwiGLU of any
// width), each block with the same biases (one dispatch's push constants); a final norm and a
// tied head are the head's (decode_head). Empty when they are, else why not.
std::string persistent_blocks_unsupported(const InferenceSpec& s) {
  const bool multi_head = s.kv_heads == s.heads && s.head_size * s.heads == s.dim;
  for (const BlockWeights& b : s.blocks) {
    if ((b.qkv_bias == kNoWeight) != (s.blocks[0].qkv_bias == kNoWeight) ||
        (b.out_bias == kNoWeight) != (s.blocks[0].out_bias == kNoWeight))
      return "it runs blocks that all have the same biases";
    if (!s.swiglu && !(multi_head && s.ffn_dim == 4 * s.dim && b.qkv_bias != kNoWeight && b.out_bias != kNoWeight))
      return "it runs a SiLU MLP only in MiniLLM's blocks (heads of dim/heads, q, k, v and o biases, 4·dim wide)";
  }
  return "";
}

}  // namespace

struct VulkanInference::Impl {
  InferenceSpec spec;
  InferenceOptions options;
  Context ctx;
  Ops ops;
  DeviceWeights weights;
  std::vector<const DeviceMatrix*> params;  // the spec's Weight order
  HeadLayout heads;  // the attention's query and key/value heads
  // ffn_gates: SwiGLU's [gate | up] (T, 2F) before it makes ffn (T, F).
  Buffer tokens, position, x, h, qkv, att, ffn, ffn_gates, k_cache, v_cache, scores, partials, logits;
  // (T, hd/2) {cos, sin}: the rotation of each position (the identity without rotary embeddings, so
  // that the rope kernels append to the KV cache alone); identity: that for a rotary model's plain
  // kv_append, made on first use.
  Buffer rope_table, identity_table;
  uint32_t forwards = 0;  // set_inputs' count (wraps; 0 skipped)
  uint32_t logits_rows;   // rows the logits buffer holds
  GpuTimes* times = nullptr;  // benchmarks: where device times go
  Ops::LayerGrid grid;        // the persistent decode kernel's launch; no groups: op by op
  int gave_up_at = -1;        // where the persistent kernel gave up, if it did
  std::vector<Ops::DecodeLayerArgs> layer_list;  // its blocks' arguments
  Ops::LayerRuns runs;                           // and their dispatches
  // The forward being issued: a one-token causal forward (the decode step), dry, its first position.
  bool in_step = false, dry = false;
  int pos0 = 0;
  Recorder* r = nullptr;            // where ops record now (null: replaying)
  std::unique_ptr<Recorder> rec;    // a forward other than the step, run at finish
  bool step_blocks_fused = false;   // the step's blocks are the persistent kernel's
  // The recorded decode step (made on first use; again when `times` changes). Last member: it goes
  // before the buffers and the context it refers to.
  std::unique_ptr<Recorder> step;
  GpuTimes* step_times = nullptr;

  Impl(const InferenceSpec& s, const EdgeFile& file, const std::vector<std::string>& names,
       const InferenceOptions& o)
      : spec(s), options(o), ctx(context_options_for(s, o)), ops(ctx), weights(ctx, file, weight_path(o.weights)) {
    PYLON_CHECK(spec.max_tokens > 0, "context length must be positive");
    for (const std::string& name : names) params.push_back(&weights.get(name));
    PYLON_CHECK(o.gemv == "auto" || o.gemv == "subgroup" || o.gemv == "rows", "Vulkan GEMV ", o.gemv,
                " is not auto, subgroup or rows");
    if (o.gemv != "auto") ops.set_gemv_rows(o.gemv == "rows");
    ops.set_gemv_shape({o.gemv_rows, o.gemv_split});
    PYLON_CHECK(o.attention_chunk % 32 == 0, "attention chunk ", o.attention_chunk, " is not a multiple of 32");
    ops.set_attention_chunk(o.attention_chunk);
    ops.set_decode_tuning({o.layer_loads, o.head_loads, o.head_rows, o.head_groups});
    heads = {spec.heads, spec.kv_heads, spec.head_size};
    const uint64_t T = static_cast<uint64_t>(spec.max_tokens), D = static_cast<uint64_t>(spec.dim);
    const uint64_t V = static_cast<uint64_t>(spec.vocab), H = static_cast<uint64_t>(heads.heads), F = static_cast<uint64_t>(spec.ffn_dim);
    tokens = make(T, MemoryKind::host, "token");
    position = make(4, MemoryKind::host, "position");
    x = make(T * D, MemoryKind::device, "activation");
    h = make(T * D, MemoryKind::device, "activation");
    qkv = make(T * static_cast<uint64_t>(heads.row()), MemoryKind::device, "qkv");
    att = make(T * static_cast<uint64_t>(heads.q_dim()), MemoryKind::device, "attention");
    ffn = make(T * F, MemoryKind::device, "ffn");
    if (spec.swiglu) ffn_gates = make(T * 2 * F, MemoryKind::device, "ffn");
    scores = make(T * H * T, MemoryKind::device, "attention score");
    partials = make(Ops::attention_partials(static_cast<uint32_t>(heads.heads), static_cast<uint32_t>(heads.head_dim),
                                             static_cast<uint32_t>(T)), MemoryKind::device,
                    "attention partials");
    {  // zeroed: decode_layer.comp's tagged pairs start with no token's tag (tags are never 0)
      const std::vector<uint32_t> zeros(partials.size() / 4, 0);
      ctx.upload(partials, 0, zeros.data(), zeros.size() * 4);
    }
    if (spec.kv_cache) {
      k_cache = make(static_cast<uint64_t>(spec.layers) * T * heads.kv_dim(), MemoryKind::device, "KV cache");
      v_cache = make(static_cast<uint64_t>(spec.layers) * T * heads.kv_dim(), MemoryKind::device, "KV cache");
    }
    if (spec.kv_cache || spec.rotary) rope_table = make_rope_table(spec.rotary);
    logits_rows = static_cast<uint32_t>(std::clamp<uint64_t>((64ull << 20) / (V * 4), 1, T));
    logits_rows = static_cast<uint32_t>(std::min<uint64_t>(logits_rows, ctx.info().max_buffer_bytes / (V * 4)));
    PYLON_CHECK(logits_rows > 0, "Vulkan: one row of logits exceeds the device's largest buffer");
    logits = make(static_cast<uint64_t>(logits_rows) * V, MemoryKind::host, "logits");
    choose_decode();
  }

  Buffer make(uint64_t floats, MemoryKind kind, const char* what) {
    PYLON_CHECK(floats * 4 <= ctx.info().max_buffer_bytes, "Vulkan: the ", what, " buffer for ", spec.max_tokens,
                " tokens (", floats * 4, " bytes) exceeds the device's largest storage ", "buffer (",
                ctx.info().max_buffer_bytes, "); use a shorter context");
    return ctx.make_buffer(std::max<uint64_t>(floats, 4) * 4, kind);
  }

  // (T, hd/2) of {cos, sin}, computed exactly as ops/cpu/rope.cpp does; rotate false: the identity.
  Buffer make_rope_table(bool rotate) {
    const int T = spec.max_tokens, hd = spec.head_dim(), half = hd / 2;
    std::vector<float> table(static_cast<size_t>(T) * half * 2);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < half; ++i) {
        const float inv_freq = scaled_inv_freq(std::pow(spec.rope_theta, -float(2 * i) / float(hd)), spec.rope_scaling);
        const float angle = rotate ? float(t) * inv_freq : 0.0f;
        table[(static_cast<size_t>(t) * half + i) * 2] = std::cos(angle);
        table[(static_cast<size_t>(t) * half + i) * 2 + 1] = std::sin(angle);
      }
    Buffer b = make(table.size(), MemoryKind::device, "rope table");
    ctx.upload(b, 0, table.data(), table.size() * 4);
    return b;
  }

  const DeviceMatrix& W(Weight w) const { return *params.at(w); }
  const DeviceMatrix* bias_of(Weight w) const { return w == kNoWeight ? nullptr : params.at(w); }
  uint32_t D() const { return static_cast<uint32_t>(spec.dim); }
  BufferView view(Act a) {
    switch (a) {
      case Act::x: return {&x};
      case Act::h: return {&h};
      case Act::qkv: return {&qkv};
      case Act::att: return {&att};
      case Act::ffn: return {&ffn};
    }
    return {&x};
  }
  uint32_t width(Act a) const {
    switch (a) {
      case Act::qkv: return heads.row();
      case Act::att: return heads.q_dim();
      case Act::ffn: return static_cast<uint32_t>(spec.ffn_dim);
      default: return D();
    }
  }
  // The head's input: x, or h after a final norm.
  Buffer& head_input() { return spec.final_norm != kNoWeight ? h : x; }
  // Layer l's rows of the KV cache.
  Ops::KvCache cache(int l) {
    const uint64_t T = static_cast<uint64_t>(spec.max_tokens), bytes = T * heads.kv_dim() * 4;
    const BufferView K{&k_cache, static_cast<uint64_t>(l) * bytes, bytes};
    return {K, {&v_cache, K.offset, K.size}};
  }
  // The table that rotates by nothing: the KV append alone through the rope kernels.
  const Buffer& identity() {
    if (!spec.rotary) return rope_table;
    if (!identity_table) identity_table = make_rope_table(false);
    return identity_table;
  }
  Recorder& recorder() {
    PYLON_ASSERT(r, "a Vulkan op outside a recorded forward");
    return *r;
  }

  // The arguments of layer l's persistent decode dispatch.
  Ops::DecodeLayerArgs layer_args(int l) {
    const BlockWeights& b = spec.blocks.at(static_cast<size_t>(l));
    Ops::DecodeLayerArgs a{};
    a.norm1 = &W(b.norm1), a.qkv = &W(b.qkv), a.qkv_bias = bias_of(b.qkv_bias);
    a.out = &W(b.out), a.out_bias = bias_of(b.out_bias);
    a.norm2 = &W(b.norm2), a.ffn0 = &W(b.ffn_up), a.ffn2 = &W(b.ffn_down);
    a.x = {&x}, a.partials = {&partials};
    a.table = {&rope_table}, a.position = {&position};
    a.cache = cache(l);
    a.heads = heads, a.max_keys = static_cast<uint32_t>(spec.max_tokens);
    a.eps = spec.norm_eps;
    a.swiglu = spec.swiglu;
    return a;
  }

  // Causal models: whether a token's blocks run as persistent dispatches (probed here).
  void choose_decode() {
    const InferenceOptions& o = options;
    PYLON_CHECK(o.decode == "auto" || o.decode == "persistent" || o.decode == "ops", "Vulkan decode ", o.decode,
                " is not auto, persistent or ops");
    // auto: on GPUs whose SM count is known (the grid is then one workgroup per SM, as measured:
    // bench/vulkan_notes.md).
    PYLON_CHECK(o.decode != "persistent" || spec.kv_cache, "Vulkan: the persistent decode kernel runs models ",
                "with a causal mask (a KV cache); this one's is bidirectional");
    const bool measured = ctx.info().type != VK_PHYSICAL_DEVICE_TYPE_CPU && ctx.info().compute_units > 0;
    const std::string blocks_why = persistent_blocks_unsupported(spec);
    PYLON_CHECK(o.decode != "persistent" || blocks_why.empty(), "Vulkan: the persistent decode kernel cannot run ",
                "this model: ", blocks_why);
    const bool op_by_op = !spec.kv_cache || o.decode == "ops" || (o.decode == "auto" && !measured) || !blocks_why.empty();
    PYLON_CHECK(!o.timeline || !op_by_op, "Vulkan: the decode timeline needs the persistent decode kernel, ",
                "which this model and decode option do not run");
    if (op_by_op) return;
    std::string why;
    for (int l = 0; l < spec.layers && why.empty(); ++l) why = ops.decode_layer_unsupported(layer_args(l));
    if (why.empty() && spec.layers == 0) why = "the model has no blocks";
    if (why.empty()) {
      grid = ops.persistent_grid(layer_args(0), {o.persistent_grid, o.persistent_threads});
      if (!grid.groups) why = "no grid of its workgroups runs at once on this device";
    }
    if (grid.groups) {
      for (int l = 0; l < spec.layers; ++l) layer_list.push_back(layer_args(l));
      runs = ops.plan_layers(layer_list, o.persistent_blocks);
    }
    PYLON_CHECK(o.decode != "persistent" || grid.groups, "Vulkan: the persistent decode kernel cannot run here: ", why);
    if (o.timeline) {
      PYLON_CHECK(grid.groups, "Vulkan: the decode timeline needs the persistent decode kernel: ", why);
      ops.enable_timeline(static_cast<uint32_t>(spec.layers), grid.groups);
    }
  }

  // The inputs of the next forward: n token ids and the position of the first.
  void set_inputs(const int32_t* toks, uint32_t n, uint32_t first) {
    std::vector<uint32_t> ids(toks, toks + n);
    ctx.upload(tokens, 0, ids.data(), n * 4ull);
    // position[1]: this forward's number, never 0 (decode_layer.comp's qk_tag).
    if (++forwards == 0) forwards = 1;
    const uint32_t p[4] = {first, forwards, 0, 0};
    ctx.upload(position, 0, p, sizeof(p));
  }

  // The head over rows [first, first + rows) of its input into logits rows 0.. (rows <= logits_rows).
  void head_matmul(Recorder& rr, uint32_t first, uint32_t rows) {
    ops.matmul(rr, {&logits}, static_cast<uint32_t>(spec.vocab), {&head_input()}, first * D(), rows, W(spec.head),
               nullptr, false);
  }
};

VulkanInference::VulkanInference(const InferenceSpec& spec, const EdgeFile& file, const std::vector<std::string>& names,
                                 const InferenceOptions& options)
    : impl_(std::make_unique<Impl>(spec, file, names, options)) {}
VulkanInference::~VulkanInference() = default;

bool VulkanInference::begin(const int32_t* tokens, int n, int pos0, bool dry) {
  Impl& m = *impl_;
  m.in_step = m.spec.kv_cache && n == 1;
  m.dry = dry, m.pos0 = pos0;
  if (!dry) m.set_inputs(tokens, static_cast<uint32_t>(n), static_cast<uint32_t>(pos0));
  if (m.in_step) {
    if (m.step && m.step_times == m.times) {  // replay the recorded step
      m.r = nullptr;
      return false;
    }
    m.step.reset();
    m.step = std::make_unique<Recorder>(m.ctx, m.times, true);
    m.step_times = m.times;
    m.step_blocks_fused = false;
    m.r = m.step.get();
    return true;
  }
  m.rec = std::make_unique<Recorder>(m.ctx, m.times);
  m.r = m.rec.get();
  return true;
}

bool VulkanInference::finish(int first, int rows, float* out) {
  Impl& m = *impl_;
  const uint32_t V = static_cast<uint32_t>(m.spec.vocab);
  if (m.in_step) {
    // The step's head, on the persistent kernel's GEMV (the final norm staged in it) where its
    // blocks are there.
    if (m.r) {
      const DeviceMatrix& head = m.W(m.spec.head);
      const DeviceMatrix* norm = m.spec.final_norm != kNoWeight ? &m.W(m.spec.final_norm) : nullptr;
      if (m.step_blocks_fused && !m.options.matmul_head && m.ops.decode_head_unsupported(head, norm).empty()) {
        m.ops.decode_head(*m.step, {&m.logits}, {&m.x}, head, m.grid, norm, m.spec.norm_eps);
      } else {
        // The fused blocks leave x; the head's input is h after a final norm.
        if (m.step_blocks_fused && norm) m.ops.rmsnorm(*m.step, {&m.h}, {&m.x}, *norm, 1, m.spec.norm_eps);
        m.head_matmul(*m.step, 0, 1);
      }
      m.r = nullptr;
    }
    if (m.dry) return true;  // kept for the first real step to replay
    m.step->replay();
    if (m.grid.groups && m.ops.persistent_failed()) {  // a grid barrier gave up: op by op from now on
      m.grid = {};
      m.gave_up_at = m.pos0;
      m.step.reset();
      return false;
    }
    m.ctx.download(m.logits, 0, out, static_cast<uint64_t>(V) * 4);
    return true;
  }
  Recorder& rr = *m.rec;
  if (m.dry) {  // dropped unrun: every buffer it bound stays (scratch buffers only grow)
    m.head_matmul(rr, static_cast<uint32_t>(first), 1);
  } else {
    for (uint32_t done = 0; done < static_cast<uint32_t>(rows); done += m.logits_rows) {
      const uint32_t count = std::min(m.logits_rows, static_cast<uint32_t>(rows) - done);
      m.head_matmul(rr, static_cast<uint32_t>(first) + done, count);
      rr.run();
      m.ctx.download(m.logits, 0, out + static_cast<uint64_t>(done) * V, static_cast<uint64_t>(count) * V * 4);
    }
  }
  m.r = nullptr;
  m.rec.reset();
  return true;
}

void VulkanInference::embedding(int n, Weight table) {
  Impl& m = *impl_;
  m.ops.embedding(m.recorder(), {&m.x}, {&m.tokens}, static_cast<uint32_t>(n), m.W(table));
}

void VulkanInference::rmsnorm(Act y, Act x, int n, Weight norm) {
  Impl& m = *impl_;
  m.ops.rmsnorm(m.recorder(), m.view(y), m.view(x), m.W(norm), static_cast<uint32_t>(n), m.spec.norm_eps);
}

void VulkanInference::linear(Act y, Act x, int n, Weight w, Weight bias, Epilogue e) {
  Impl& m = *impl_;
  if (e.swiglu) {  // [gate | up] into ffn_gates, then y = SiLU(gate) · up
    PYLON_ASSERT(y == Act::ffn && m.ffn_gates && !e.accumulate && !e.silu, "SwiGLU writes the MLP's hidden");
    m.ops.matmul(m.recorder(), {&m.ffn_gates}, 2 * m.width(y), m.view(x), 0, static_cast<uint32_t>(n), m.W(w),
                 m.bias_of(bias), false);
    m.ops.swiglu(m.recorder(), m.view(y), {&m.ffn_gates}, static_cast<uint32_t>(n), m.width(y));
    return;
  }
  m.ops.matmul(m.recorder(), m.view(y), m.width(y), m.view(x), 0, static_cast<uint32_t>(n), m.W(w), m.bias_of(bias),
               e.accumulate, e.silu);
}

void VulkanInference::rope(int n) {
  Impl& m = *impl_;
  m.ops.rope(m.recorder(), {&m.qkv}, {&m.rope_table}, {&m.position}, static_cast<uint32_t>(n), m.heads, 0, nullptr);
}

void VulkanInference::kv_append(int layer, int n) {
  Impl& m = *impl_;
  const Ops::KvCache cache = m.cache(layer);
  m.ops.rope(m.recorder(), {&m.qkv}, {&m.identity()}, {&m.position}, static_cast<uint32_t>(n), m.heads, 0, &cache);
}

void VulkanInference::attention(int layer, int n, bool causal) {
  Impl& m = *impl_;
  const HeadLayout& hs = m.heads;
  const uint32_t Q = static_cast<uint32_t>(hs.q_dim()), KV = static_cast<uint32_t>(hs.kv_dim()),
                 row = static_cast<uint32_t>(hs.row());
  Ops::AttentionArgs a{};
  a.n = static_cast<uint32_t>(n), a.heads = static_cast<uint32_t>(hs.heads);
  a.hd = static_cast<uint32_t>(hs.head_dim), a.pos0 = 0, a.o_stride = Q;
  a.kv_group = static_cast<uint32_t>(hs.group());
  a.max_keys = static_cast<uint32_t>(m.spec.max_tokens);
  a.q_off = 0, a.q_stride = row;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hs.head_dim));
  const BufferView QKV{&m.qkv}, ATT{&m.att}, S{&m.scores}, P{&m.position};
  if (causal) {  // the keys and values appended to the cache
    const Ops::KvCache cache = m.cache(layer);
    a.causal = 1, a.keys = 0, a.k_off = 0, a.k_stride = KV, a.v_off = 0, a.v_stride = KV;
    if (n == 1)
      m.ops.attention_decode(m.recorder(), QKV, cache.k, cache.v, {&m.partials}, ATT, P, a);  // keys over workgroups
    else
      m.ops.attention(m.recorder(), QKV, cache.k, cache.v, S, ATT, P, a);
  } else {
    a.causal = 0, a.keys = static_cast<uint32_t>(n), a.k_off = Q, a.k_stride = row, a.v_off = Q + KV,
    a.v_stride = row;
    m.ops.attention(m.recorder(), QKV, QKV, QKV, S, ATT, P, a);
  }
}

// One token on a GPU: the RMSNorm fused into the GEMV. (A CPU device runs it apart: on llvmpipe the
// fused GEMV is slower, its norm loads costing even where unused: bench/vulkan_notes.md.)
bool VulkanInference::try_norm_linear(Act y, Act x, int n, Weight norm, Weight w, Weight bias, Epilogue e) {
  Impl& m = *impl_;
  if (n != 1 || m.ops.gemv_rows() || e.swiglu) return false;
  m.ops.normed_gemv(m.recorder(), m.view(y), m.width(y), m.view(x), 0, m.W(norm), m.spec.norm_eps, m.W(w),
                    m.bias_of(bias), e.accumulate, e.silu);
  return true;
}

// One causal token on a GPU: the norm, the qkv GEMV, RoPE and the KV append in one dispatch; else
// the RoPE and the KV append in one (the rope kernel's store).
bool VulkanInference::try_attention_inputs(int layer, int n, Weight norm, Weight w, Weight bias, bool rotate,
                                           bool append) {
  Impl& m = *impl_;
  if (!append) return false;
  const Ops::KvCache cache = m.cache(layer);
  const Buffer& table = rotate ? m.rope_table : m.identity();
  const uint32_t H = static_cast<uint32_t>(m.spec.heads);
  // The fused GEMV rotates multi-head rows of 3·dim with a bias (matmul_common.glsl).
  const bool multi_head = m.heads.kv_heads == m.heads.heads && static_cast<uint32_t>(m.heads.q_dim()) == m.D() &&
                          bias != kNoWeight;
  if (n == 1 && multi_head && m.ops.fuses_rope(m.W(w))) {
    m.ops.qkv_rope_gemv(m.recorder(), {&m.qkv}, {&m.x}, m.W(norm), m.spec.norm_eps, m.W(w), m.W(bias),
                        {{&table}, {&m.position}, H, cache});
    return true;
  }
  norm_linear(Act::qkv, Act::x, n, norm, w, bias, {});
  m.ops.rope(m.recorder(), {&m.qkv}, {&table}, {&m.position}, static_cast<uint32_t>(n), m.heads, 0, &cache);
  return true;
}

// The decode step's embedding lookup and blocks in the persistent kernel: a dispatch per run of
// blocks whose weights share buffers, the lookup folded into the first where it can be.
bool VulkanInference::try_decode_blocks(int n) {
  Impl& m = *impl_;
  if (!m.in_step || n != 1 || !m.grid.groups) return false;
  const Ops::Embedding lookup{&m.W(m.spec.embed), {&m.tokens}};
  const bool folded = m.ops.layer_embeds(*lookup.table, m.spec.dim);
  if (!folded) m.ops.embedding(m.recorder(), {&m.x}, {&m.tokens}, 1, *lookup.table);
  m.ops.decode_layers(m.recorder(), m.layer_list, m.runs, m.grid, folded ? &lookup : nullptr);
  m.step_blocks_fused = true;
  return true;
}

std::string VulkanInference::describe() const {
  const Impl& m = *impl_;
  const DeviceInfo& i = m.ctx.info();
  const std::string gemm = !m.ops.uses_coopmat(64)                       ? "tiled GEMM"
                           : m.ops.uses_coopmat2(64, m.W(m.spec.head)) ? "cooperative-matrix GEMM (NV coopmat2) and attention"
                                                                        : "cooperative-matrix GEMM and attention";
  const size_t dispatches = m.runs.starts.size();
  const std::string decode =
      m.grid.groups ? detail::concat("decode in ", dispatches,
                                     dispatches == 1 ? " persistent dispatch" : " persistent dispatches", " for ",
                                     m.spec.layers, " blocks (", m.grid.groups, " workgroups of ", m.grid.threads, ")")
      : m.gave_up_at < 0
          ? std::string("decode op by op")
          : detail::concat("decode op by op since position ", m.gave_up_at,
                           " (the persistent kernel's grid wait timed out there)");
  const std::string cache = m.ctx.pipeline_cache_file().empty()
                                ? std::string("no pipeline cache")
                                : "pipeline cache " + m.ctx.pipeline_cache_file() +
                                      (m.ctx.pipeline_cache_loaded() ? " (read back)" : " (empty at start)");
  return detail::concat("vulkan: ", i.name, " (", i.type_name(), "), ", gemm, ", ", decode, ", ",
                        m.weights.description(), ", ", cache);
}

bool VulkanInference::use_coopmat(bool on) {
  impl_->ops.set_coopmat(on);
  return impl_->ops.uses_coopmat(64);
}
bool VulkanInference::use_coopmat2(bool on, int tokens) {
  impl_->ops.set_coopmat2(on);
  return impl_->ops.uses_coopmat2(static_cast<uint32_t>(std::max(tokens, 0)), impl_->W(impl_->spec.head));
}
void VulkanInference::set_coopmat2_dequant_tokens(uint32_t tokens) {
  Ops::Coopmat2Dequant d;
  d.min_tokens = tokens;
  impl_->ops.set_coopmat2_dequant(d);
}
void VulkanInference::set_coopmat2_tile(uint32_t tokens, uint32_t rows, uint32_t k, uint32_t splits) {
  impl_->ops.set_coopmat2_tile({tokens, rows, k, splits});
}
void VulkanInference::time_dispatches(GpuTimes* times) { impl_->times = times; }
uint32_t VulkanInference::persistent_grid() const { return impl_->grid.groups; }
uint32_t VulkanInference::persistent_dispatches() const {
  return impl_->grid.groups ? static_cast<uint32_t>(impl_->runs.starts.size()) : 0;
}
int VulkanInference::persistent_gave_up_at() const { return impl_->gave_up_at; }
LayerTimeline VulkanInference::layer_timeline() { return impl_->ops.read_timeline(); }
void VulkanInference::set_fail_barriers(bool on) { impl_->ops.set_fail_barriers(on); }

}  // namespace pylon::vk
