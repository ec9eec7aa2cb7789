// The MiniLLM forward on Vulkan, recorded op by op into one command buffer per call (DESIGN §1):
// embedding -> L x [RMSNorm, qkv, RoPE and KV append (causal), attention, out_proj + residual,
// RMSNorm, ffn.0 and SiLU, ffn.2 + residual] -> head. One token on a GPU: each RMSNorm is fused
// into the GEMV after it, RoPE and the KV append into the qkv GEMV's store; attention splits the
// keys over workgroups; on GPUs where it runs, a causal token's whole block is one persistent
// dispatch instead (Ops::decode_layer). A causal decode step is recorded
// once and replayed: its token and position are read from buffers, so the commands never change.
#include "model/vulkan/vulkan_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "core/error.h"
#include "model/edge_model.h"
#include "ops/vulkan/context.h"
#include "ops/vulkan/ops.h"
#include "model/params.h"
#include "ops/vulkan/weights.h"

namespace pylon {

VulkanOptions parse_vulkan_options(const std::string& device, bool allow_coopmat,
                                   const std::string& weights) {
  VulkanOptions options;
  options.allow_coopmat = allow_coopmat;
  options.weights = weights;
  if (device == "vulkan") return options;
  const std::string prefix = "vulkan:";
  PYLON_CHECK(device.rfind(prefix, 0) == 0 && device.size() > prefix.size() &&
                  device.find_first_not_of("0123456789", prefix.size()) == std::string::npos &&
                  device.size() - prefix.size() <= 4,
              "--device ", device, ": expected vulkan or vulkan:N");
  options.device_index = std::stoi(device.substr(prefix.size()));
  return options;
}

namespace {
vk::WeightPath weight_path(const std::string& s) {
  if (s == "auto") return vk::WeightPath::automatic;
  if (s == "import") return vk::WeightPath::import;
  PYLON_CHECK(s == "upload", "Vulkan weights path ", s, " is not auto, import or upload");
  return vk::WeightPath::upload;
}
vk::ContextOptions context_options(const VulkanOptions& o) {
  vk::ContextOptions c;
  c.device_index = o.device_index;
  c.max_buffer_bytes = o.max_buffer_bytes;
  c.allow_coopmat = o.allow_coopmat;
  c.allow_float_atomics = o.allow_float_atomics;
  c.allow_int64_atomics = o.allow_int64_atomics;
  return c;
}
}  // namespace

struct VulkanDecoder::Impl {
  EdgeModel edge;  // the mapping outlives imported weights
  const ModelConfig& cfg = edge.config;
  int max_tokens;
  vk::Context ctx;
  vk::Ops ops;
  vk::DeviceWeights weights;
  std::vector<const vk::DeviceMatrix*> params;  // table order (model/params.h)
  vk::Buffer tokens, position, x, h, qkv, att, f1, k_cache, v_cache, scores, partials, rope_table, logits;
  uint32_t forwards = 0;  // set_inputs' count (wraps; 0 skipped)
  uint32_t logits_rows;  // rows the logits buffer holds
  int pos = 0;
  std::vector<int32_t> history;  // seed preset: all tokens so far
  std::vector<float> last;       // (V)
  vk::GpuTimes* times = nullptr;  // benchmarks: where device times go
  vk::Ops::LayerGrid grid;  // the persistent decode kernel's launch; no groups: op by op
  int gave_up_at = -1;      // where the persistent kernel gave up, if it did
  std::vector<vk::Ops::DecodeLayerArgs> layer_list;  // its blocks' arguments
  vk::Ops::LayerRuns runs;                           // and their dispatches
  // The recorded causal decode step (made on first use; again when `times` changes). Last member:
  // it goes before the buffers and the context it refers to.
  std::unique_ptr<vk::Recorder> step;
  vk::GpuTimes* step_times = nullptr;

  Impl(const std::string& path, const VulkanOptions& o, int max_tokens_)
      : edge(path), max_tokens(max_tokens_), ctx(context_options(o)), ops(ctx),
        weights(ctx, edge.file, weight_path(o.weights)) {
    PYLON_CHECK(max_tokens > 0, "context length must be positive");
    for (const ParamInfo& p : param_table(cfg).params) params.push_back(&weights.get(p.name));
    PYLON_CHECK(o.gemv == "auto" || o.gemv == "subgroup" || o.gemv == "rows", "Vulkan GEMV ", o.gemv,
                " is not auto, subgroup or rows");
    if (o.gemv != "auto") ops.set_gemv_rows(o.gemv == "rows");
    ops.set_gemv_shape({o.gemv_rows, o.gemv_split});
    PYLON_CHECK(o.attention_chunk % 32 == 0, "attention chunk ", o.attention_chunk, " is not a multiple of 32");
    ops.set_attention_chunk(o.attention_chunk);
    const uint64_t T = static_cast<uint64_t>(max_tokens), D = static_cast<uint64_t>(cfg.dim);
    const uint64_t V = static_cast<uint64_t>(cfg.vocab), H = static_cast<uint64_t>(cfg.heads);
    const auto make = [&](uint64_t floats, vk::MemoryKind kind, const char* what) {
      PYLON_CHECK(floats * 4 <= ctx.info().max_buffer_bytes, "Vulkan: the ", what, " buffer for ",
                  max_tokens, " tokens (", floats * 4, " bytes) exceeds the device's largest storage ",
                  "buffer (", ctx.info().max_buffer_bytes, "); use a shorter context");
      return ctx.make_buffer(std::max<uint64_t>(floats, 4) * 4, kind);
    };
    tokens = make(T, vk::MemoryKind::host, "token");
    position = make(4, vk::MemoryKind::host, "position");
    x = make(T * D, vk::MemoryKind::device, "activation");
    h = make(T * D, vk::MemoryKind::device, "activation");
    qkv = make(T * 3 * D, vk::MemoryKind::device, "qkv");
    att = make(T * D, vk::MemoryKind::device, "attention");
    f1 = make(T * 4 * D, vk::MemoryKind::device, "ffn");
    scores = make(T * H * T, vk::MemoryKind::device, "attention score");
    partials = make(vk::Ops::attention_partials(static_cast<uint32_t>(H), static_cast<uint32_t>(D / H),
                                                static_cast<uint32_t>(T)),
                    vk::MemoryKind::device, "attention partials");
    {  // zeroed: decode_layer.comp's tagged pairs start with no token's tag (tags are never 0)
      const std::vector<uint32_t> zeros(partials.size() / 4, 0);
      ctx.upload(partials, 0, zeros.data(), zeros.size() * 4);
    }
    if (cached()) {
      k_cache = make(static_cast<uint64_t>(cfg.layers) * T * D, vk::MemoryKind::device, "KV cache");
      v_cache = make(static_cast<uint64_t>(cfg.layers) * T * D, vk::MemoryKind::device, "KV cache");
    }
    if (cached() || roped()) {
      // (T, hd/2) of {cos, sin}, computed exactly as ops/cpu/rope.cpp does; without rotary
      // embeddings the identity (cos 1, sin 0), so that the rope kernels append to the KV cache alone.
      const int hd = cfg.head_dim(), half = hd / 2;
      std::vector<float> table(T * static_cast<uint64_t>(half) * 2);
      for (int t = 0; t < max_tokens; ++t)
        for (int i = 0; i < half; ++i) {
          const float inv_freq = std::pow(cfg.rope_theta, -float(2 * i) / float(hd));
          const float angle = roped() ? float(t) * inv_freq : 0.0f;
          table[(static_cast<size_t>(t) * half + i) * 2] = std::cos(angle);
          table[(static_cast<size_t>(t) * half + i) * 2 + 1] = std::sin(angle);
        }
      rope_table = make(table.size(), vk::MemoryKind::device, "rope table");
      ctx.upload(rope_table, 0, table.data(), table.size() * 4);
    }
    logits_rows = static_cast<uint32_t>(std::clamp<uint64_t>((64ull << 20) / (V * 4), 1, T));
    logits_rows = static_cast<uint32_t>(std::min<uint64_t>(logits_rows, ctx.info().max_buffer_bytes / (V * 4)));
    PYLON_CHECK(logits_rows > 0, "Vulkan: one row of logits exceeds the device's largest buffer");
    logits = make(static_cast<uint64_t>(logits_rows) * V, vk::MemoryKind::host, "logits");
    last.resize(V);
    choose_decode(o);
  }

  // Whether decoding appends to a KV cache (a causal mask), and whether q and k are rotated.
  bool cached() const { return cfg.preset.mask == Mask::causal; }
  bool roped() const { return cfg.preset.positions == Positions::rope; }
  // Block l's parameters, W[kInProjW] etc. (model/params.h); the embedding and the head.
  const vk::DeviceMatrix* const* block(int l) const { return params.data() + block_first_param(l); }
  const vk::DeviceMatrix& embed() const { return *params.front(); }
  const vk::DeviceMatrix& head_weight() const { return *params.back(); }

  // The arguments of layer l's persistent decode dispatch.
  vk::Ops::DecodeLayerArgs layer_args(int l) {
    const uint64_t T = static_cast<uint64_t>(max_tokens), D = static_cast<uint64_t>(cfg.dim);
    const vk::BufferView K{&k_cache, static_cast<uint64_t>(l) * T * D * 4, T * D * 4};
    const vk::DeviceMatrix* const* W = block(l);
    vk::Ops::DecodeLayerArgs a{};
    a.norm1 = W[kNorm1], a.qkv = W[kInProjW], a.qkv_bias = W[kInProjB];
    a.out = W[kOutProjW], a.out_bias = W[kOutProjB];
    a.norm2 = W[kNorm2], a.ffn0 = W[kFfn1], a.ffn2 = W[kFfn2];
    a.x = {&x}, a.partials = {&partials};
    a.table = {&rope_table}, a.position = {&position};
    a.cache = {K, {&v_cache, K.offset, K.size}};
    a.heads = static_cast<uint32_t>(cfg.heads), a.max_keys = static_cast<uint32_t>(max_tokens);
    a.eps = cfg.norm_eps;
    return a;
  }

  // Causal models: whether a token's blocks run as one persistent dispatch each (probed here).
  void choose_decode(const VulkanOptions& o) {
    PYLON_CHECK(o.decode == "auto" || o.decode == "persistent" || o.decode == "ops", "Vulkan decode ", o.decode,
                " is not auto, persistent or ops");
    // auto: on GPUs whose SM count is known (the grid is then one workgroup per SM, as measured).
    // The H200 decodes f16 / int8 / int4 1.23x / 1.21x / 1.52x faster so (bench/vulkan_notes.md,
    // 2026-11-30 23:14-23:28 UTC).
    PYLON_CHECK(o.decode != "persistent" || cached(), "Vulkan: the persistent decode kernel runs models with ",
                "a causal mask (a KV cache); the ", cfg.preset.name, " preset's is ", mask_name(cfg.preset.mask));
    const bool measured = ctx.info().type != VK_PHYSICAL_DEVICE_TYPE_CPU && ctx.info().compute_units > 0;
    const bool op_by_op = !cached() || o.decode == "ops" || (o.decode == "auto" && !measured);
    PYLON_CHECK(!o.timeline || !op_by_op, "Vulkan: the decode timeline needs the persistent decode kernel, ",
                "which this model and decode option do not run");
    if (op_by_op) return;
    std::string why;
    for (int l = 0; l < cfg.layers && why.empty(); ++l) why = ops.decode_layer_unsupported(layer_args(l));
    if (why.empty()) {
      grid = ops.persistent_grid(layer_args(0), {o.persistent_grid, o.persistent_threads});
      if (!grid.groups) why = "no grid of its workgroups runs at once on this device";
    }
    if (grid.groups) {
      for (int l = 0; l < cfg.layers; ++l) layer_list.push_back(layer_args(l));
      runs = ops.plan_layers(layer_list, o.persistent_blocks);
    }
    PYLON_CHECK(o.decode != "persistent" || grid.groups, "Vulkan: the persistent decode kernel cannot run here: ", why);
    if (o.timeline) {
      PYLON_CHECK(grid.groups, "Vulkan: the decode timeline needs the persistent decode kernel: ", why);
      ops.enable_timeline(static_cast<uint32_t>(cfg.layers), grid.groups);
    }
  }

  // The inputs of the next forward: n token ids and the position of the first.
  void set_inputs(const int32_t* toks, uint32_t n, uint32_t pos0) {
    std::vector<uint32_t> ids(toks, toks + n);
    ctx.upload(tokens, 0, ids.data(), n * 4ull);
    // position[1]: this forward's number, never 0 (decode_layer.comp's qk_tag).
    if (++forwards == 0) forwards = 1;
    const uint32_t p[4] = {pos0, forwards, 0, 0};
    ctx.upload(position, 0, p, sizeof(p));
  }

  // Records the blocks over the n tokens of the token buffer at positions position[0].. ; x holds
  // the block output (n, D). `persistent` (one token): in the persistent kernel, whose caller
  // checks Ops::persistent_failed after the run.
  void blocks(vk::Recorder& r, uint32_t n, bool persistent = false) {
    const uint32_t D = static_cast<uint32_t>(cfg.dim), H = static_cast<uint32_t>(cfg.heads);
    const uint32_t hd = D / H, T = static_cast<uint32_t>(max_tokens);
    const vk::BufferView X{&x}, Hb{&h}, QKV{&qkv}, ATT{&att}, F1{&f1}, S{&scores}, P{&position};
    if (persistent) {  // one dispatch per run of blocks, the embedding lookup in the first where it can
      const vk::Ops::Embedding lookup{&embed(), {&tokens}};
      const bool folded = ops.layer_embeds(*lookup.table, cfg.dim);
      if (!folded) ops.embedding(r, X, {&tokens}, n, *lookup.table);
      ops.decode_layers(r, layer_list, runs, grid, folded ? &lookup : nullptr);
      return;
    }
    ops.embedding(r, X, {&tokens}, n, embed());
    for (int l = 0; l < cfg.layers; ++l) {
      const vk::DeviceMatrix* const* W = block(l);
      // One token on a GPU: the RMSNorm fused into the GEMV. (A CPU device runs it apart: on llvmpipe
      // the fused GEMV is 1.8x slower, its norm loads costing even where unused; vulkan_notes.md.)
      const vk::DeviceMatrix& in_proj = *W[kInProjW];
      const vk::BufferView K{&k_cache, static_cast<uint64_t>(l) * T * D * 4, static_cast<uint64_t>(T) * D * 4};
      const vk::Ops::KvCache cache{K, {&v_cache, K.offset, K.size}};
      // One causal token on a GPU: RoPE and the KV append in the qkv GEMV's store too.
      const bool fused_rope = n == 1 && cached() && ops.fuses_rope(in_proj);
      if (fused_rope) {
        ops.qkv_rope_gemv(r, QKV, X, *W[kNorm1], cfg.norm_eps, in_proj, *W[kInProjB], {{&rope_table}, P, H, cache});
      } else if (n == 1 && !ops.gemv_rows()) {
        ops.normed_gemv(r, QKV, 3 * D, X, 0, *W[kNorm1], cfg.norm_eps, in_proj, W[kInProjB], false);
      } else {
        ops.rmsnorm(r, Hb, X, *W[kNorm1], n, cfg.norm_eps);
        ops.matmul(r, QKV, 3 * D, Hb, 0, n, in_proj, W[kInProjB], false);
      }
      vk::Ops::AttentionArgs a{};
      a.n = n, a.heads = H, a.hd = hd, a.pos0 = 0, a.o_stride = D, a.max_keys = T;
      a.q_off = 0, a.q_stride = 3 * D;
      a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      if (cached()) {  // rotated (or not: rope_table) and appended to the cache
        if (!fused_rope) ops.rope(r, QKV, {&rope_table}, P, n, D, H, 0, &cache);
        a.causal = 1, a.keys = 0, a.k_off = 0, a.k_stride = D, a.v_off = 0, a.v_stride = D;
        if (n == 1) ops.attention_decode(r, QKV, cache.k, cache.v, {&partials}, ATT, P, a);  // keys over workgroups
        else ops.attention(r, QKV, cache.k, cache.v, S, ATT, P, a);
      } else {
        if (roped()) ops.rope(r, QKV, {&rope_table}, P, n, D, H, 0, nullptr);
        a.causal = 0, a.keys = n, a.k_off = D, a.k_stride = 3 * D, a.v_off = 2 * D, a.v_stride = 3 * D;
        ops.attention(r, QKV, QKV, QKV, S, ATT, P, a);
      }
      ops.matmul(r, X, D, ATT, 0, n, *W[kOutProjW], W[kOutProjB], true);
      if (n == 1 && !ops.gemv_rows()) {  // RMSNorm and SiLU fused
        ops.normed_gemv(r, F1, 4 * D, X, 0, *W[kNorm2], cfg.norm_eps, *W[kFfn1], nullptr, false, true);
      } else {
        ops.rmsnorm(r, Hb, X, *W[kNorm2], n, cfg.norm_eps);
        ops.matmul(r, F1, 4 * D, Hb, 0, n, *W[kFfn1], nullptr, false, true);  // SiLU fused
      }
      ops.matmul(r, X, D, F1, 0, n, *W[kFfn2], nullptr, true);
    }
  }

  // The head over rows [first, first + rows) of x into logits rows 0.. (rows <= logits_rows).
  void head_matmul(vk::Recorder& r, uint32_t first, uint32_t rows) {
    const uint32_t D = static_cast<uint32_t>(cfg.dim), V = static_cast<uint32_t>(cfg.vocab);
    ops.matmul(r, {&logits}, V, {&x}, first * D, rows, head_weight(), nullptr, false);
  }

  // Head over rows [first, first + count) of x into logits rows 0.., then runs the recording.
  void head(vk::Recorder& r, uint32_t first, uint32_t count, float* out) {
    const uint32_t V = static_cast<uint32_t>(cfg.vocab);
    for (uint32_t done = 0; done < count; done += logits_rows) {
      const uint32_t rows = std::min(logits_rows, count - done);
      head_matmul(r, first + done, rows);
      r.run();
      ctx.download(logits, 0, out + static_cast<uint64_t>(done) * V, static_cast<uint64_t>(rows) * V * 4);
    }
  }

  const float* feed(const int32_t* toks, int n) {
    PYLON_CHECK(n > 0, "nothing to feed");
    PYLON_CHECK(pos + n <= max_tokens, "context full: ", pos + n, " tokens > ", max_tokens);
    for (int i = 0; i < n; ++i)
      PYLON_CHECK(toks[i] >= 0 && toks[i] < cfg.vocab, "token id ", toks[i], " is outside the vocab ", cfg.vocab);
    if (cached() && n == 1) {
      decode_step(toks[0]);
    } else if (cached()) {
      set_inputs(toks, static_cast<uint32_t>(n), static_cast<uint32_t>(pos));
      vk::Recorder r(ctx, times);
      blocks(r, static_cast<uint32_t>(n));
      head(r, static_cast<uint32_t>(n - 1), 1, last.data());
    } else {
      history.insert(history.end(), toks, toks + n);
      const uint32_t all = static_cast<uint32_t>(history.size());
      set_inputs(history.data(), all, 0);
      vk::Recorder r(ctx, times);
      blocks(r, all);
      head(r, all - 1, 1, last.data());
    }
    pos += n;
    return last.data();
  }

  // The decode step's recording (a causal token at the position in the inputs), made where there
  // is none for the current timing sink.
  void record_step() {
    if (step && step_times == times) return;
    step.reset();
    step = std::make_unique<vk::Recorder>(ctx, times, true);
    step_times = times;
    blocks(*step, 1, grid.groups != 0);
    const vk::DeviceMatrix& head_w = head_weight();
    // PYLON_VK_DECODE_HEAD=ops: matmul's GEMV even so (a benchmark's comparison).
    const char* head_env = std::getenv("PYLON_VK_DECODE_HEAD");
    const bool kernel_head = !(head_env && std::string(head_env) == "ops");
    if (grid.groups && kernel_head && ops.decode_head_unsupported(head_w).empty())  // the kernel's GEMV
      ops.decode_head(*step, {&logits}, {&x}, head_w, grid);
    else
      head_matmul(*step, 0, 1);
  }

  // See VulkanDecoder::prepare. The prefill's recording is dropped unrun (every buffer it bound
  // stays: scratch buffers only grow), the decode step's kept for decode_step to replay.
  void prepare(int n) {
    PYLON_CHECK(n > 0 && n <= max_tokens, "prepare: a prompt of ", n, " tokens for a context of ", max_tokens);
    if (n > 1 || !cached()) {
      vk::Recorder r(ctx, times);
      blocks(r, static_cast<uint32_t>(n));
      head_matmul(r, static_cast<uint32_t>(n - 1), 1);
    }
    if (cached()) record_step();
  }

  // One causal token at `pos`: the recorded step replayed (recorded on first use).
  void decode_step(int32_t token) {
    record_step();
    set_inputs(&token, 1, static_cast<uint32_t>(pos));
    step->replay();
    if (grid.groups && ops.persistent_failed()) {  // a grid barrier gave up: redo the token op by op
      grid = {};
      gave_up_at = pos;
      step.reset();
      decode_step(token);
      return;
    }
    ctx.download(logits, 0, last.data(), static_cast<uint64_t>(cfg.vocab) * 4);
  }

  void score(const int32_t* toks, int n, float* out) {
    PYLON_CHECK(n > 0 && n <= max_tokens, "row of ", n, " tokens for a context of ", max_tokens);
    for (int i = 0; i < n; ++i)
      PYLON_CHECK(toks[i] >= 0 && toks[i] < cfg.vocab, "token id ", toks[i], " is outside the vocab ", cfg.vocab);
    pos = 0;
    history.clear();
    set_inputs(toks, static_cast<uint32_t>(n), 0);
    vk::Recorder r(ctx, times);
    blocks(r, static_cast<uint32_t>(n));
    head(r, 0, static_cast<uint32_t>(n), out);
  }
};

VulkanDecoder::VulkanDecoder(const std::string& edge_path, const VulkanOptions& options, int max_tokens) {
  PYLON_CHECK(EdgeFile::has_magic(edge_path), "Vulkan runs edge files: ", edge_path,
              " is not one (make it with pylon export)");
  impl_ = std::make_unique<Impl>(edge_path, options, max_tokens);
}
VulkanDecoder::~VulkanDecoder() = default;
const ModelConfig& VulkanDecoder::config() const { return impl_->cfg; }
void VulkanDecoder::prepare(int prompt_tokens) { impl_->prepare(prompt_tokens); }
std::string VulkanDecoder::tokenizer_model() const { return std::string(impl_->edge.file.tokenizer()); }
std::string VulkanDecoder::describe() const {
  const vk::DeviceInfo& i = impl_->ctx.info();
  return detail::concat("vulkan: ", i.name, " (", i.type_name(), "), ",
                        !impl_->ops.uses_coopmat(64) ? "tiled GEMM"
                        : impl_->ops.uses_coopmat2(64, *impl_->params.back())
                            ? "cooperative-matrix GEMM (NV coopmat2) and attention"
                            : "cooperative-matrix GEMM and attention",
                        ", ",
                        impl_->grid.groups ? detail::concat("decode in ", impl_->runs.starts.size(),
                                                            impl_->runs.starts.size() == 1 ? " persistent dispatch"
                                                                                           : " persistent dispatches",
                                                            " for ", impl_->cfg.layers, " blocks (", impl_->grid.groups,
                                                            " workgroups of ", impl_->grid.threads, ")")
                                           : impl_->gave_up_at < 0
                                               ? std::string("decode op by op")
                                               : detail::concat("decode op by op since position ", impl_->gave_up_at,
                                                                " (the persistent kernel's grid wait timed out there)"),
                        ", ", impl_->weights.description(), ", ",
                        impl_->ctx.pipeline_cache_file().empty()
                            ? std::string("no pipeline cache")
                            : "pipeline cache " + impl_->ctx.pipeline_cache_file() +
                                  (impl_->ctx.pipeline_cache_loaded() ? " (read back)" : " (empty at start)"));
}
const float* VulkanDecoder::feed(const int32_t* tokens, int n) { return impl_->feed(tokens, n); }
int VulkanDecoder::position() const { return impl_->pos; }
int VulkanDecoder::max_tokens() const { return impl_->max_tokens; }
void VulkanDecoder::reset() {
  impl_->pos = 0;
  impl_->history.clear();
}
bool VulkanDecoder::use_coopmat(bool on) {
  impl_->ops.set_coopmat(on);
  return impl_->ops.uses_coopmat(64);
}
bool VulkanDecoder::use_coopmat2(bool on, int tokens) {
  impl_->ops.set_coopmat2(on);
  return impl_->ops.uses_coopmat2(static_cast<uint32_t>(std::max(tokens, 0)), *impl_->params.back());
}
void VulkanDecoder::set_coopmat2_dequant_tokens(uint32_t tokens) {
  vk::Ops::Coopmat2Dequant d;
  d.min_tokens = tokens;
  impl_->ops.set_coopmat2_dequant(d);
}
void VulkanDecoder::set_coopmat2_tile(uint32_t tokens, uint32_t rows, uint32_t k, uint32_t splits) {
  impl_->ops.set_coopmat2_tile({tokens, rows, k, splits});
}
uint32_t VulkanDecoder::persistent_grid() const { return impl_->grid.groups; }
int VulkanDecoder::persistent_gave_up_at() const { return impl_->gave_up_at; }
uint32_t VulkanDecoder::persistent_dispatches() const {
  return impl_->grid.groups ? static_cast<uint32_t>(impl_->runs.starts.size()) : 0;
}
vk::LayerTimeline VulkanDecoder::layer_timeline() { return impl_->ops.read_timeline(); }
void VulkanDecoder::time_dispatches(vk::GpuTimes* times) { impl_->times = times; }
void VulkanDecoder::score(const int32_t* tokens, int n, float* logits) { impl_->score(tokens, n, logits); }


}  // namespace pylon
