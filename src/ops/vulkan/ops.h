// The Vulkan ops of the edge decoder, recorded into a Recorder. Weights stay in their edge-file
// encoding (f32, f16, int8 rows, int4 groups) and are decoded inside the shaders; activations are
// fp32. Each op has its CPU reference in ops/cpu (tests compare every element).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/head_layout.h"
#include "io/edge_format.h"
#include "ops/vulkan/context.h"
#include "ops/vulkan/gpu_times.h"
#include "ops/vulkan/pipeline.h"

namespace pylon::vk {

// A weight (rows, cols) in edge encoding, split into row chunks that each fit one storage binding
// (maxStorageBufferRange, maxMemoryAllocationSize). A 1-D tensor is (1, cols).
struct DeviceMatrix {
  struct Chunk {
    BufferView values;
    int64_t row_begin = 0, rows = 0;
  };
  EdgeDType dtype = EdgeDType::f32;
  int64_t rows = 0, cols = 0;
  int group = 0;           // int4
  bool scale_f16 = false;  // int4 scales
  std::vector<Chunk> chunks;
  BufferView scales;  // int8 / int4: the whole tensor's scales
};

// Bytes of one row of a (rows, cols) weight in this dtype.
uint64_t row_bytes(EdgeDType dtype, int64_t cols);
// The shaders' code for a weight encoding (matmul_common.glsl WT_*).
inline uint32_t shader_wtype(EdgeDType d) {
  switch (d) {
    case EdgeDType::f32: return 0;
    case EdgeDType::f16: return 1;
    case EdgeDType::int8: return 2;
    case EdgeDType::int4: return 3;
  }
  return 0;
}

class Ops {
 public:
  static constexpr uint32_t kAttentionChunk = 32;  // keys per attention_decode chunk (decode_layer: a multiple)
  static constexpr uint32_t kMaxHeads = 1024;      // per-head counters the decode kernels hold
  explicit Ops(Context& ctx);
  Context& context() { return ctx_; }

  // y (n, ldy) [+]= act(x (n, w.cols) · wᵀ [+ bias]), act SiLU when `silu` else none: a GEMV
  // (set_gemv_rows) when n == 1, else the coopmat GEMM where available and allowed, else on CPU
  // devices the texel GEMV over 4 tokens at once (gemm_rows_texel, rows of whole words), else the
  // tiled GEMM. x starts at element x_off.
  void matmul(Recorder& r, const BufferView& y, uint32_t ldy, const BufferView& x, uint32_t x_off,
              uint32_t n, const DeviceMatrix& w, const DeviceMatrix* bias, bool accumulate,
              bool silu = false);
  // The plain kernels only, the GEMV or the tiled GEMM (the other GEMMs' oracle).
  void matmul_plain(Recorder& r, const BufferView& y, uint32_t ldy, const BufferView& x,
                    uint32_t x_off, uint32_t n, const DeviceMatrix& w, const DeviceMatrix* bias,
                    bool accumulate, bool silu = false);
  // One token: y (ldy) [+]= act((rmsnorm(x) · norm) · wᵀ [+ bias]), the RMSNorm (weights `norm`,
  // w.cols of them) fused into the GEMV, x the un-normalised row.
  void normed_gemv(Recorder& r, const BufferView& y, uint32_t ldy, const BufferView& x, uint32_t x_off,
                   const DeviceMatrix& norm, float eps, const DeviceMatrix& w, const DeviceMatrix* bias,
                   bool accumulate, bool silu = false);
  // One token's q, k, v: qkv (3D) = (rmsnorm(x)·norm)·wᵀ + bias, q and k rotated at p = position[0]
  // (rope() below, with its table), and k, v written to row p of the cache: normed_gemv, rope and
  // the KV append in one dispatch. Where fuses_rope(w) (the subgroup GEMV, w in one chunk).
  struct KvCache;
  struct RopeArgs;
  void qkv_rope_gemv(Recorder& r, const BufferView& qkv, const BufferView& x, const DeviceMatrix& norm, float eps,
                     const DeviceMatrix& w, const DeviceMatrix& bias, const RopeArgs& rope);
  bool fuses_rope(const DeviceMatrix& w) const;
  bool uses_coopmat(uint32_t n) const;  // whether matmul with n tokens takes a coopmat GEMM
  void set_coopmat(bool on) { coopmat_on_ = on; }  // off: neither the coopmat GEMMs nor attention
  // Whether matmul with n tokens and weight w takes gemm_coopmat2 (VK_NV_cooperative_matrix2, where
  // the device and build have it; columns a multiple of 32; f16 weights, or int8 / int4 (groups a
  // multiple of 8) decoded to fp16 first where n >= Coopmat2Dequant::min_tokens) rather than
  // gemm_coopmat. off: gemm_coopmat (tests, benchmarks).
  bool uses_coopmat2(uint32_t n, const DeviceMatrix& w) const;
  void set_coopmat2(bool on) { coopmat2_on_ = on; }
  // gemm_coopmat2's tile (tokens, weight rows, K step), multiples of the device's granularities
  // (DeviceInfo::coopmat2_granularity), and the workgroups that split a tile's K steps (each
  // summing a share; coopmat2_reduce adds them). Zero fields (tokens and rows together): chosen
  // per GEMM (coopmat2_tile_for); a benchmark's tuning knob, and the tests'.
  struct Coopmat2Tile {
    uint32_t tokens = 0, rows = 0, k = 0, splits = 0;
  };
  void set_coopmat2_tile(Coopmat2Tile t) { coopmat2_tile_ = t; }
  Coopmat2Tile coopmat2_tile_for(uint32_t n, int64_t rows, int64_t cols) const;
  // int8 / int4 weights on gemm_coopmat2: from min_tokens tokens (below, gemm_coopmat reads them
  // as they are), decoded to fp16 (coopmat2_weights.comp) in pieces of at most piece_bytes (whole
  // rows, at least 256), each piece's GEMM right after it, so the scratch stays that small.
  // H200, seed size, prefill tokens/s against gemm_coopmat's, int8 / int4: 16 tokens 4.5k / 4.3k
  // against 2.8k / 2.9k, 64 tokens 19.1k / 21.4k against 10.3k / 9.5k, 512 tokens 66.7k / 65.4k
  // against 52.2k / 46.7k (bench/vulkan_notes.md, 2026-12-02 06:10-07:10): so from gemm_coopmat's 16.
  // Tests and benchmarks move them.
  struct Coopmat2Dequant {
    uint32_t min_tokens = 16;
    uint64_t piece_bytes = 32ull << 20;
  };
  void set_coopmat2_dequant(Coopmat2Dequant d) { coopmat2_dequant_ = d; }
  // off: attention takes attention.comp (a workgroup per query) whatever the layout and device
  // (tests, benchmarks)
  void set_tiled_attention(bool on) { tiled_attention_ = on; }
  // The one-token GEMV: a row per invocation (gemv_rows; the default on CPU devices) or rows per
  // subgroup (gemv_subgroup; the default on GPUs, which needs subgroups of 4 or more: up to 32 in a
  // workgroup of 128). Tests run both on any device.
  void set_gemv_rows(bool on) { gemv_rows_ = on || ctx_.info().subgroup_size < 4; }
  bool gemv_rows() const { return gemv_rows_; }
  // The row-per-invocation GEMV without a fused norm reads through texel buffers where the device
  // offers them (DeviceInfo::texel_reads: CPU devices); off: storage buffers. Tests run both.
  void set_gemv_texel(bool on) { gemv_texel_ = on && ctx_.info().texel_reads; }
  // The subgroup GEMV's shape (gemv_subgroup.comp): `rows` weight rows per subgroup, read by
  // `split` subgroups together. Zero fields: chosen per matrix (gemv_shape_for); tests and the
  // benchmark's sweep force them.
  struct GemvShape {
    uint32_t rows = 0, split = 0;
  };
  void set_gemv_shape(GemvShape s) { gemv_shape_ = s; }
  GemvShape gemv_shape_for(const DeviceMatrix& w) const;
  // x (n, D) = embed[tokens] (tokens: n uint32)
  void embedding(Recorder& r, const BufferView& x, const BufferView& tokens, uint32_t n,
                 const DeviceMatrix& embed);
  void rmsnorm(Recorder& r, const BufferView& y, const BufferView& x, const DeviceMatrix& w,
               uint32_t n, float eps);
  void silu(Recorder& r, const BufferView& x, uint32_t count);
  // y (n, width) = SiLU(gate) · up over the rows [gate | up] of x (n, 2·width)
  void swiglu(Recorder& r, const BufferView& y, const BufferView& x, uint32_t n, uint32_t width);
  // Positions: a forward's first token is at p = pos0 + position[0], position a uint buffer read on
  // the device (so that one recording of a decode step serves every position); zero_position()
  // holds 0.
  BufferView zero_position() const { return {&zero_, 0, 16}; }
  // One layer's KV cache: (positions, kv_heads·hd) keys and values.
  struct KvCache {
    BufferView k, v;
  };
  struct RopeArgs {
    BufferView table, position;
    uint32_t heads;
    KvCache cache;
  };
  // q and k of qkv (n, heads.row()) (core/head_layout.h) rotated at positions p + i; table: (positions, hd/2) vec2
  // {cos, sin}. With a cache, token i's rotated k and its v are also written to row p + i of it
  // (the KV append).
  void rope(Recorder& r, const BufferView& qkv, const BufferView& table, const BufferView& position,
            uint32_t n, const HeadLayout& heads, uint32_t pos0, const KvCache* append = nullptr);
  struct AttentionArgs {
    uint32_t n, heads, hd, keys, pos0, causal;
    uint32_t q_off, q_stride, k_off, k_stride, v_off, v_stride, o_stride, max_keys;
    float scale;
    uint32_t kv_group = 1;  // query heads per key/value head (divides heads): head h reads h / kv_group
  };
  // out (n, o_stride) per head; scores: n * heads * max_keys floats of scratch. Causal: query i
  // sees keys 0 .. p + i (p from a.pos0 and position, as for rope). On cooperative matrices where
  // uses_coopmat_attention (fp16 operands), else in fp32 (attention_tiled.comp, attention.comp).
  void attention(Recorder& r, const BufferView& q, const BufferView& k, const BufferView& v,
                 const BufferView& scores, const BufferView& out, const BufferView& position,
                 const AttentionArgs& a);
  // One query (a.n == 1): the same result, the keys split into chunks of 32 over heads x chunks
  // workgroups, combined per head by the last of its workgroups (one dispatch; heads <= 1024).
  // partials: attention_partials(a) floats of scratch.
  void attention_decode(Recorder& r, const BufferView& q, const BufferView& k, const BufferView& v,
                        const BufferView& partials, const BufferView& out, const BufferView& position,
                        const AttentionArgs& a);
  // Whether attention(a) runs on cooperative matrices with `scores` as its scratch: 16 queries or
  // more, hd % 16 == 0 and <= 128, subgroups of 32, coopmat allowed (set_coopmat), and the
  // scratch holds the fp16 operands (coopmat_attention_scratch bytes).
  bool uses_coopmat_attention(const AttentionArgs& a, const BufferView& scores) const;
  static uint64_t coopmat_attention_scratch(const AttentionArgs& a);
  static uint64_t attention_partials(uint32_t heads, uint32_t hd, uint32_t max_keys);

  // One block of a causal decode token for decode_layers, a persistent kernel whose workgroups
  // meet at grid barriers between the block's phases and between blocks (decode_layer.comp): the
  // same results as the per-op path (the qkv GEMV, rope with its KV append, attention_decode,
  // matmul (out_proj), normed_gemv (ffn.0, SiLU, or SwiGLU through swiglu) and matmul (ffn.2)).
  // MiniLLM's blocks (heads of D/H, q/k/v and o biases, SiLU over ffn0 (4D, D)) and llama's (any
  // HeadLayout with an even head dim up to 256, biases optional (null), SwiGLU over ffn0 = [gate;
  // up] (2F, D), F = ffn2's columns). x (D): the residual stream, read and updated; cache: the
  // layer's rows of heads.kv_dim() (the per-op path's layout); partials: attention_partials(heads,
  // hd, max_keys) floats of scratch, zeroed before the first dispatch (its tagged pairs).
  struct DecodeLayerArgs {
    const DeviceMatrix *norm1, *qkv, *qkv_bias, *out, *out_bias, *norm2, *ffn0, *ffn2;
    BufferView x, partials, table, position;
    KvCache cache;
    HeadLayout heads;
    uint32_t max_keys;
    float eps;
    bool swiglu;  // ffn0 is [gate; up]
  };
  // "" where decode_layer runs these weights on this device, else why not (one line).
  std::string decode_layer_unsupported(const DecodeLayerArgs& a) const;
  // decode_layer's launch: `groups` workgroups of `threads` (256, 512 or 1024).
  struct LayerGrid {
    uint32_t groups = 0, threads = 0;
  };
  // A grid for decode_layer whose workgroups the device runs all at once, found by probing (a
  // dispatch of the kernel whose workgroups only meet at two barriers) the candidates in turn:
  // `want` alone where its groups are non-zero (threads 0: 256), else one workgroup of 512, 1024
  // or 256 per SM where the SM count is known (the order measured fastest on the H200; two per SM
  // exceed its shared memory). groups 0: none passed (use the per-op path).
  LayerGrid persistent_grid(const DecodeLayerArgs& a, LayerGrid want);
  // How decode_layers splits a token's blocks into dispatches: runs of consecutive blocks whose
  // weights lie in the same buffers (DeviceWeights' one-buffer upload: every block in one run;
  // a buffer per tensor: a run per block), at most max_blocks a run (0: no cap).
  struct LayerRuns {
    std::vector<uint32_t> starts;  // each run's first block; a run ends where the next starts
    Buffer table;                  // decode_layer.comp's Table: 16 words per block
  };
  LayerRuns plan_layers(const std::vector<DecodeLayerArgs>& blocks, uint32_t max_blocks);
  // The embedding lookup folded into the first dispatch: its input is row tokens[0] of `table`
  // (written to the blocks' x), where layer_embeds(table, D) (one chunk, f32 or f16).
  struct Embedding {
    const DeviceMatrix* table;
    BufferView tokens;
  };
  bool layer_embeds(const DeviceMatrix& table, int64_t dim) const;
  // The blocks, a dispatch per run of `runs` (from plan_layers over the same blocks); embed: the
  // token's embedding lookup too (else x holds the input).
  void decode_layers(Recorder& r, const std::vector<DecodeLayerArgs>& blocks, const LayerRuns& runs, LayerGrid grid,
                     const Embedding* embed = nullptr);
  // The head of a decode token with decode_layer's GEMV (x staged in shared memory, no grid
  // barrier, so any grid): y (rows) = x (cols) · Wᵀ, as matmul's one-token GEMV up to summation
  // order; with a final norm (weights `norm`, cols of them), y = (rmsnorm(x)·norm) · Wᵀ, as
  // rmsnorm then matmul. decode_head_unsupported: "" where it runs w (and norm), else why not.
  std::string decode_head_unsupported(const DeviceMatrix& w, const DeviceMatrix* norm = nullptr) const;
  void decode_head(Recorder& r, const BufferView& y, const BufferView& x, const DeviceMatrix& w, LayerGrid grid,
                   const DeviceMatrix* norm = nullptr, float eps = 0);
  // Test hook: decode_layer's keys per attention item (a multiple of 32); 0: chosen per token.
  void set_attention_chunk(uint32_t keys) { attention_chunk_ = keys; }
  // Benchmarks: decode_layers' dispatches run decode_layer_timeline instead, which stores each
  // workgroup's SM clock at LayerTimeline's points of blocks 0 .. blocks - 1 on a grid of `groups`
  // workgroups; read_timeline() gives the last dispatches' marks. Throws pylon::Error where the
  // device has no shader clock.
  void enable_timeline(uint32_t blocks, uint32_t groups);
  LayerTimeline read_timeline();
  // Whether a decode_layer barrier gave up waiting since the last call (then its results are
  // wrong: the caller redoes the work on the per-op path). Clears the flag.
  bool persistent_failed();
  // Test hook: every barrier of decode_layer (not of the probe) gives up.
  void set_fail_barriers(bool on) { fail_barriers_ = on; }
  // The persistent kernel's tuning: 16-byte words in flight per lane in the blocks and in the head
  // (0, or 2, 4, 8 or 16: the blocks' MLP takes that many rows a set from slices of 64, so another
  // count would leave rows uncomputed), the head's rows per subgroup and workgroups per SM. Zeros:
  // the measured choices (decode_layer.cpp); benchmarks move them (pylon_bench_vulkan's flags).
  // Throws pylon::Error for a load count outside those.
  struct DecodeTuning {
    uint32_t layer_loads = 0, head_loads = 0, head_rows = 0, head_groups = 0;
  };
  void set_decode_tuning(DecodeTuning t);

 private:
  void matmul_with(const char* kernel, Recorder& r, const BufferView& y, uint32_t ldy,
                   const BufferView& x, uint32_t x_off, uint32_t n, const DeviceMatrix& w,
                   const DeviceMatrix* bias, bool accumulate, bool silu, const DeviceMatrix* norm,
                   float eps, const RopeArgs* rope);
  // matmul on gemm_coopmat2 (uses_coopmat2): x to fp16, then a GEMM a chunk (f16) or a piece
  // (int8 / int4, decoded to fp16 first), K split where coopmat2_tile_for says.
  void coopmat2_matmul(Recorder& r, const BufferView& y, uint32_t ldy, const BufferView& x, uint32_t x_off,
                       uint32_t n, const DeviceMatrix& w, const DeviceMatrix* bias, bool accumulate, bool silu);
  Context& ctx_;
  KernelCache kernels_;
  bool coopmat_on_ = true;
  bool coopmat2_on_ = true;
  Coopmat2Tile coopmat2_tile_;
  Coopmat2Dequant coopmat2_dequant_;
  bool tiled_attention_ = true;
  bool gemv_rows_, gemv_texel_;
  GemvShape gemv_shape_;
  uint32_t attention_chunk_ = 0;
  DecodeTuning tuning_;
  bool fail_barriers_ = false;
  Buffer dummy_;  // bound where a shader's optional buffer is absent
  // gemm_coopmat2's fp16 activations, its int8 / int4 weights' fp16 pieces and its split K's
  // partial sums, each list's last the largest; earlier ones kept alive because recorded commands
  // may still bind them.
  std::vector<Buffer> halves_, weight_halves_, partials_;
  const Buffer& scratch(std::vector<Buffer>& list, uint64_t bytes);
  Buffer zero_;   // 64 bytes of zeros: zero_position(), a one-block Table
  Buffer counters_;  // attention_decode's per-head counts of finished chunks, zero between dispatches
  Buffer sync_;      // decode_layer's barrier counts and per-head counts, zero between dispatches
  Buffer failed_;    // host-visible: decode_layer's "a barrier gave up" flag
  Buffer timeline_;  // host-visible: decode_layer_timeline's clock marks (enable_timeline)
  uint32_t timeline_blocks_ = 0, timeline_groups_ = 0;
  // Blocks [first, first + count) in one dispatch, their offsets in rows first_row .. of `table`
  // (decode_layer.comp's Table; zeros for one block bound at its own views).
  void dispatch_layers(Recorder& r, const DecodeLayerArgs* first, uint32_t count, const BufferView& table,
                       uint32_t first_row, LayerGrid grid, bool probe, const Embedding* embed);
  // The llama module's specializations (decode_layer.comp with LLAMA): rows of whole 16-byte
  // words (ALIGNED), a head dim that is a multiple of 4 (HD4).
  struct LlamaModule {
    bool aligned, hd4;
  };
  // rows: rows per subgroup (0: the dtype's, or set_gemv_shape's); head: decode_head's pipeline
  // (1: the head's GEMV only, the block phases compiled out; 2: behind the final norm, llama's
  // module); llama: the llama module (decode_layer_llama) thus specialized, else MiniLLM's.
  const Kernel& layer_kernel(EdgeDType d, int64_t xs, uint32_t threads, bool multi, uint32_t loads,
                             uint32_t rows = 0, bool timeline = false, uint32_t head = 0,
                             const LlamaModule* llama = nullptr);
};

}  // namespace pylon::vk
