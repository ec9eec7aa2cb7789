// Host API of the fused attention: argument checks, tile-shape choice, and the order of the passes; head
// dims without tensor-core kernels go to the row-per-warp kernels (attention_rowwise.cu).
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>

#include "ops/cuda/attention.h"
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/attention_tiles.h"
#include "ops/cuda/check.h"

namespace pylon::cuda {

void check_attention_args(const char* op, int B, int T, const HeadLayout& heads, size_t alignment,
                          std::initializer_list<const void*> ptrs) {
  PYLON_CHECK(B >= 1 && T >= 1, op, ": B and T must be positive, got B=", B, " T=", T);
  PYLON_CHECK(heads.heads >= 1 && heads.kv_heads >= 1 && heads.head_dim >= 1, op,
              ": heads, kv_heads and head_dim must be positive, got heads=", heads.heads, " kv_heads=",
              heads.kv_heads, " head_dim=", heads.head_dim);
  PYLON_CHECK(heads.heads % heads.kv_heads == 0, op, ": kv_heads=", heads.kv_heads, " does not divide heads=",
              heads.heads);
  PYLON_CHECK(heads.head_dim % 2 == 0 && heads.head_dim <= 256, op, ": head_dim=", heads.head_dim,
              " has no kernel (even, at most 256)");
  PYLON_CHECK(static_cast<int64_t>(B) * heads.heads <= 65535, op, ": B*heads=",
              static_cast<int64_t>(B) * heads.heads, " exceeds the grid's y limit 65535");
  for (const void* p : ptrs)
    PYLON_CHECK(p != nullptr && reinterpret_cast<uintptr_t>(p) % alignment == 0, op, ": pointers must be ",
                alignment, "-byte aligned");
}

namespace detail {
namespace {

// The warp-specialised dk/dv pass with `stages` query tiles in flight, by default the fastest measured
// count (bench/attention_notes.md, "Warp-specialised backward passes"). dq_ws is set apart.
void use_backward_ws(AttentionTiles& tiles, int stages = 3, bool pingpong = true) {
  tiles.bwd_ws = true;
  tiles.bwd_stages = stages;
  tiles.bwd_pingpong = pingpong;
}

// The warp-specialised forward, by default in its fastest measured shape (bench/attention_notes.md,
// "Warp-specialised forward").
void use_forward_ws(AttentionTiles& tiles, int block_n = 128, int stages = 3) {
  tiles.fwd_ws = true;
  tiles.fwd_warps = 8;  // the consumers (for printing); the kernel adds a producer warpgroup
  tiles.fwd_block_n = block_n;
  tiles.fwd_stages = stages;
}

AttentionTiles measured_attention_tiles(int head_dim) {
  AttentionTiles tiles;  // 4 warps and tiles of 64: the tile sweep's choice (bench --sweep) where not set below
#if defined(PYLON_CUDA_SM90A)
  int device = 0, major = 0;
  PYLON_CUDA_CHECK(cudaGetDevice(&device));
  PYLON_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  tiles.wgmma = major == 9;
  if (tiles.wgmma && head_dim == 128) {  // two warpgroups per backward block: faster at hd 128
    tiles.dkdv_warps = 8;
    tiles.dq_warps = 8;
  }
#else
  (void)head_dim;
#endif
  return tiles;
}

}  // namespace

AttentionTiles default_attention_tiles(int head_dim) {
  AttentionTiles tiles = measured_attention_tiles(head_dim);
  // The warp-specialised forward and backward passes where they were measured faster (hd 128); at hd 64
  // they are level (full) or slower (causal) than the wgmma kernels, which stay there. The figures are in
  // bench/attention_notes.md ("Warp-specialised forward", "Warp-specialised backward passes").
  if (tiles.wgmma && head_dim == 128) use_forward_ws(tiles);
  if (tiles.wgmma && head_dim == 128) {
    use_backward_ws(tiles);
    tiles.dq_ws = true;
  }
  return tiles;
}

AttentionTiles warp_specialized_tiles(int head_dim) {
  AttentionTiles tiles = measured_attention_tiles(head_dim);
  use_forward_ws(tiles);
  use_backward_ws(tiles);
  tiles.dq_ws = true;
  return tiles;
}

namespace {

// One entry of a list of attention_tiles.h: the head dim and the list's two other numbers (b = 0 for
// the warp-specialised backward's one-number entries).
struct CompiledShape {
  int head_dim, a, b;
};
#define PYLON_SHAPE(HD, A, B) CompiledShape{HD, A, B},
#define PYLON_STAGES(HD, STAGES) CompiledShape{HD, STAGES, 0},
constexpr CompiledShape kMmaForward[] = {PYLON_ATTENTION_MMA_FORWARD_TILES(PYLON_SHAPE)};
constexpr CompiledShape kMmaDkdv[] = {PYLON_ATTENTION_MMA_DKDV_TILES(PYLON_SHAPE)};
constexpr CompiledShape kMmaDq[] = {PYLON_ATTENTION_MMA_DQ_TILES(PYLON_SHAPE)};
constexpr CompiledShape kWgmmaForward[] = {PYLON_ATTENTION_WGMMA_FORWARD_TILES(PYLON_SHAPE)};
constexpr CompiledShape kWgmmaDkdv[] = {PYLON_ATTENTION_WGMMA_DKDV_TILES(PYLON_SHAPE)};
constexpr CompiledShape kWgmmaDq[] = {PYLON_ATTENTION_WGMMA_DQ_TILES(PYLON_SHAPE)};
constexpr CompiledShape kWsForward[] = {PYLON_ATTENTION_WS_FORWARD_TILES(PYLON_SHAPE)};
constexpr CompiledShape kWsBackward[] = {PYLON_ATTENTION_WS_BACKWARD_TILES(PYLON_STAGES)};
#undef PYLON_SHAPE
#undef PYLON_STAGES

constexpr bool has_head_dim(std::span<const CompiledShape> list, int head_dim) {
  for (const CompiledShape& s : list)
    if (s.head_dim == head_dim) return true;
  return false;
}
// Every head dim of `a` is in `b` and the other way round.
constexpr bool same_head_dims(std::span<const CompiledShape> a, std::span<const CompiledShape> b) {
  for (const CompiledShape& s : a)
    if (!has_head_dim(b, s.head_dim)) return false;
  for (const CompiledShape& s : b)
    if (!has_head_dim(a, s.head_dim)) return false;
  return true;
}
// compiled_attention_tiles runs each forward shape with a backward of its own family, and back.
static_assert(same_head_dims(kMmaForward, kMmaDkdv) && same_head_dims(kMmaForward, kMmaDq),
              "attention_tiles.h: each head dim of the mma.sync kernels needs a shape in every pass");
static_assert(same_head_dims(kWgmmaForward, kWgmmaDkdv) && same_head_dims(kWgmmaForward, kWgmmaDq),
              "attention_tiles.h: each head dim of the wgmma kernels needs a shape in every pass");

// The (a, b) pairs of `list` at this head dim, in the list's order.
std::vector<std::pair<int, int>> shapes_of(std::span<const CompiledShape> list, int head_dim) {
  std::vector<std::pair<int, int>> pairs;
  for (const CompiledShape& s : list)
    if (s.head_dim == head_dim) pairs.emplace_back(s.a, s.b);
  return pairs;
}

}  // namespace

std::vector<AttentionTiles> compiled_attention_tiles(int head_dim) {
  // Each family's (warps, block) shapes zipped pass by pass, shorter lists repeating, so every shape
  // of every pass runs at least once; then the warp-specialised shapes one at a time, the other passes
  // at their measured default.
  using Pairs = std::vector<std::pair<int, int>>;
  struct Family {
    bool wgmma;
    Pairs fwd, dkdv, dq;
  };
  std::vector<Family> families{
      {false, shapes_of(kMmaForward, head_dim), shapes_of(kMmaDkdv, head_dim), shapes_of(kMmaDq, head_dim)}};
  const bool wgmma = measured_attention_tiles(head_dim).wgmma;
  if (wgmma)
    families.push_back({true, shapes_of(kWgmmaForward, head_dim), shapes_of(kWgmmaDkdv, head_dim),
                        shapes_of(kWgmmaDq, head_dim)});
  std::vector<AttentionTiles> all;
  for (const Family& f : families) {
    if (f.fwd.empty()) continue;  // no kernel of this family at this head dim (then no pass has one)
    const size_t n = std::max({f.fwd.size(), f.dkdv.size(), f.dq.size()});
    for (size_t i = 0; i < n; ++i) {
      const auto& [fw, fb] = f.fwd[i % f.fwd.size()];
      const auto& [kw, kb] = f.dkdv[i % f.dkdv.size()];
      const auto& [qw, qb] = f.dq[i % f.dq.size()];
      all.push_back({f.wgmma, fw, fb, kw, kb, qw, qb});
    }
  }
  if (wgmma) {
    for (const auto& [block_n, stages] : shapes_of(kWsForward, head_dim)) {
      AttentionTiles tiles = measured_attention_tiles(head_dim);
      use_forward_ws(tiles, block_n, stages);
      all.push_back(tiles);
    }
    for (const bool dq_ws : {false, true})  // the dk/dv pass alone, then both passes
      for (const auto& stages : shapes_of(kWsBackward, head_dim))
        for (const bool pingpong : {false, true}) {
          AttentionTiles tiles = measured_attention_tiles(head_dim);
          use_backward_ws(tiles, stages.first, pingpong);
          tiles.dq_ws = dq_ws;
          all.push_back(tiles);
        }
  }
  return all;
}

void attention_forward_tiled(const AttentionTiles& tiles, __nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                             int B, int T, const HeadLayout& heads, bool causal, cudaStream_t stream) {
  check_attention_args("attention_forward", B, T, heads, 16, {out, lse, qkv});
  const QkvLayout L = qkv_layout(heads);
  if (!has_tensor_core_kernels(L.head_dim))
    return launch_attention_rowwise_forward(out, lse, qkv, B, T, L, causal, stream);
  bool launched = false;
  if (tiles.fwd_ws)  // the warp-specialised kernel needs what wgmma needs (sm_90a build, Hopper device)
    launched = tiles.wgmma && launch_attention_forward_ws(tiles, out, lse, qkv, B, T, L, causal, stream);
  else if (tiles.wgmma)
    launched = launch_attention_forward_wgmma(tiles, out, lse, qkv, B, T, L, causal, stream);
  else
    launched = launch_attention_forward(tiles, out, lse, qkv, B, T, L, causal, stream);
  PYLON_CHECK(launched, "attention_forward: no kernel for hd=", L.head_dim, " wgmma=", tiles.wgmma, " ws=",
              tiles.fwd_ws, " warps=", tiles.fwd_warps, " block_n=", tiles.fwd_block_n, " stages=", tiles.fwd_stages);
}

void attention_backward_tiled(const AttentionTiles& tiles, __nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse, int B, int T,
                              const HeadLayout& heads, bool causal, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  check_attention_args("attention_backward", B, T, heads, 16, {dqkv, dout, qkv, out, lse, workspace});
  PYLON_CHECK(workspace_bytes >= attention_backward_workspace_bytes(B, T, heads),
              "attention_backward: workspace of ", workspace_bytes, " bytes, needs ",
              attention_backward_workspace_bytes(B, T, heads));
  const QkvLayout L = qkv_layout(heads);
  auto* dsum = static_cast<float*>(workspace);  // (B, heads, T)
  if (!has_tensor_core_kernels(L.head_dim))
    return launch_attention_rowwise_backward(dqkv, dsum, dout, qkv, out, lse, B, T, L, causal, stream);
  launch_attention_backward_dsum(dsum, dout, out, B, T, L, stream);
  bool dkdv = false;
  if (tiles.bwd_ws)  // needs what wgmma needs (sm_90a build, Hopper device)
    dkdv = tiles.wgmma && launch_attention_backward_dkdv_ws(tiles, dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream);
  else if (tiles.wgmma)
    dkdv = launch_attention_backward_dkdv_wgmma(tiles, dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream);
  else
    dkdv = launch_attention_backward_dkdv(tiles, dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream);
  PYLON_CHECK(dkdv, "attention_backward: no dk/dv kernel for hd=", L.head_dim, " wgmma=", tiles.wgmma, " ws=",
              tiles.bwd_ws, " warps=", tiles.dkdv_warps, " block_m=", tiles.dkdv_block_m, " stages=",
              tiles.bwd_stages);
  bool dq = false;
  if (tiles.dq_ws)
    dq = tiles.wgmma && launch_attention_backward_dq_ws(tiles, dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream);
  else if (tiles.wgmma)
    dq = launch_attention_backward_dq_wgmma(tiles, dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream);
  else
    dq = launch_attention_backward_dq(tiles, dqkv, dout, qkv, lse, dsum, B, T, L, causal, stream);
  PYLON_CHECK(dq, "attention_backward: no dq kernel for hd=", L.head_dim, " wgmma=", tiles.wgmma, " warps=",
              tiles.dq_warps, " block_n=", tiles.dq_block_n);
}

}  // namespace detail

void attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                       const HeadLayout& heads, bool causal, cudaStream_t stream) {
  detail::attention_forward_tiled(detail::default_attention_tiles(heads.head_dim), out, lse, qkv, B, T, heads, causal,
                                  stream);
}

size_t attention_backward_workspace_bytes(int B, int T, const HeadLayout& heads) {
  return static_cast<size_t>(B) * static_cast<size_t>(heads.heads) * static_cast<size_t>(T) * sizeof(float);
}

void attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                        const __nv_bfloat16* out, const float* lse, int B, int T, const HeadLayout& heads,
                        bool causal, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  detail::attention_backward_tiled(detail::default_attention_tiles(heads.head_dim), dqkv, dout, qkv, out, lse, B, T,
                                   heads, causal, workspace, workspace_bytes, stream);
}

}  // namespace pylon::cuda
