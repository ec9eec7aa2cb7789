// Host API of the fused attention: argument checks, tile-shape choice, and the order of the passes.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "ops/cuda/attention.h"
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/check.h"

namespace pylon::cuda {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// User errors: shapes and pointers the kernels cannot take. Returns hd.
int check_attention_args(const char* op, int B, int T, int D, int H, std::initializer_list<const void*> ptrs) {
  PYLON_CHECK(B >= 1 && T >= 1 && H >= 1 && D >= 1, op, ": B, T, D, H must be positive, got B=", B, " T=", T,
              " D=", D, " H=", H);
  PYLON_CHECK(D % H == 0, op, ": D=", D, " is not a multiple of H=", H);
  const int hd = D / H;
  PYLON_CHECK(hd == 64 || hd == 128, op, ": head dim D/H=", hd, " has no kernel (64 or 128)");
  PYLON_CHECK(static_cast<int64_t>(B) * H <= 65535, op, ": B*H=", static_cast<int64_t>(B) * H,
              " exceeds the grid's y limit 65535");
  for (const void* p : ptrs) PYLON_CHECK(p != nullptr && aligned16(p), op, ": pointers must be 16-byte aligned");
  return hd;
}

}  // namespace

namespace detail {
namespace {

// The warp-specialised dk/dv pass with `stages` query tiles in flight; 3 by default (hd 128, B8 T1024:
// 0.531 ms for the whole backward against 0.548 with 2 stages; H200, 2026-11-30). dq_ws is set apart.
void use_backward_ws(AttentionTiles& tiles, int stages = 3) {
  tiles.bwd_ws = true;
  tiles.bwd_stages = stages;
}

// The warp-specialised forward, by default in its fastest measured shape: 128-key stages, 3 of them
// (hd 128 full: 478 TFLOP/s against 418 with 2 stages and 415 with 64-key stages; H200, 2026-11-30).
void use_forward_ws(AttentionTiles& tiles, int block_n = 128, int stages = 3) {
  tiles.fwd_ws = true;
  tiles.fwd_warps = 8;  // the consumers (for printing); the kernel adds a producer warpgroup
  tiles.fwd_block_n = block_n;
  tiles.fwd_stages = stages;
}

AttentionTiles measured_attention_tiles(int head_dim) {
  AttentionTiles tiles;  // 4 warps and tiles of 64 won every other pass (bench --sweep on the H200)
#if defined(PYLON_CUDA_SM90A)
  int device = 0, major = 0;
  PYLON_CUDA_CHECK(cudaGetDevice(&device));
  PYLON_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  tiles.wgmma = major == 9;
  if (tiles.wgmma && head_dim == 128) {  // two warpgroups per backward block: 19% faster at hd 128
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
  // Measured on the H200 (B8 T1024, bench/attention_notes.md): at hd 128 the warp-specialised forward
  // takes 0.144 ms full / 0.105 causal against the wgmma kernel's 0.203 / 0.131; at hd 64 it is level
  // full (0.208 both) and slower causal (0.139 vs 0.131), so the wgmma kernel stays there.
  // The backward's dk/dv pass likewise: at hd 128 the warp-specialised one takes the whole backward from
  // 0.577 to 0.531 ms full and 0.397 to 0.370 causal; at hd 64 it is level full (0.661 / 0.658 ms) and
  // slower causal (0.409 / 0.415).
  if (tiles.wgmma && head_dim == 128) use_forward_ws(tiles);
  // The dq pass too: with both passes warp-specialised the backward takes 0.507 ms full and 0.357 causal.
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

std::vector<AttentionTiles> compiled_attention_tiles(int head_dim) {
  // (warps, block) pairs of each pass, as compiled in attention_{forward,backward}{,_wgmma}.cu.
  using Pairs = std::vector<std::pair<int, int>>;
  struct Family {
    bool wgmma;
    Pairs fwd, dkdv, dq;
  };
  std::vector<Family> families;
  if (head_dim == 128)
    families.push_back({false, {{4, 64}, {4, 32}, {8, 64}, {8, 32}}, {{4, 64}, {4, 32}, {8, 64}, {8, 32}},
                        {{4, 64}, {4, 32}, {8, 64}, {8, 32}}});
  else
    families.push_back({false, {{4, 64}, {4, 128}, {8, 64}}, {{4, 64}, {8, 64}}, {{4, 64}, {8, 64}}});
  const bool wgmma = measured_attention_tiles(head_dim).wgmma;
  if (wgmma)
    families.push_back({true, {{4, 64}, {4, 128}, {8, 64}, {8, 128}}, {{4, 64}, {8, 64}}, {{4, 64}, {8, 64}}});
  std::vector<AttentionTiles> all;
  for (const Family& f : families) {
    const size_t n = std::max({f.fwd.size(), f.dkdv.size(), f.dq.size()});
    for (size_t i = 0; i < n; ++i) {
      const auto& [fw, fb] = f.fwd[i % f.fwd.size()];
      const auto& [kw, kb] = f.dkdv[i % f.dkdv.size()];
      const auto& [qw, qb] = f.dq[i % f.dq.size()];
      all.push_back({f.wgmma, fw, fb, kw, kb, qw, qb});
    }
  }
  if (wgmma)  // the warp-specialised forward's (block_n, stages), as compiled in attention_forward_ws.cu
    for (const auto& [block_n, stages] : Pairs{{64, 3}, {128, 2}, {128, 3}}) {
      AttentionTiles tiles = measured_attention_tiles(head_dim);
      use_forward_ws(tiles, block_n, stages);
      all.push_back(tiles);
    }
  if (wgmma)  // the warp-specialised dk/dv pass's stages, as compiled in attention_backward_ws.cu
    for (const bool dq_ws : {false, true})
      for (const int stages : {2, 3}) {
        AttentionTiles tiles = measured_attention_tiles(head_dim);
        use_backward_ws(tiles, stages);
        tiles.dq_ws = dq_ws;
        all.push_back(tiles);
      }
  return all;
}

void attention_forward_tiled(const AttentionTiles& tiles, __nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                             int B, int T, int D, int H, bool causal, cudaStream_t stream) {
  const int hd = check_attention_args("attention_forward", B, T, D, H, {out, lse, qkv});
  bool launched = false;
  if (tiles.fwd_ws)  // the warp-specialised kernel needs what wgmma needs (sm_90a build, Hopper device)
    launched = tiles.wgmma && launch_attention_forward_ws(tiles, hd, out, lse, qkv, B, T, D, H, causal, stream);
  else if (tiles.wgmma)
    launched = launch_attention_forward_wgmma(tiles, hd, out, lse, qkv, B, T, D, H, causal, stream);
  else
    launched = launch_attention_forward(tiles, hd, out, lse, qkv, B, T, D, H, causal, stream);
  PYLON_CHECK(launched, "attention_forward: no kernel for hd=", hd, " wgmma=", tiles.wgmma, " ws=", tiles.fwd_ws,
              " warps=", tiles.fwd_warps, " block_n=", tiles.fwd_block_n, " stages=", tiles.fwd_stages);
}

void attention_backward_tiled(const AttentionTiles& tiles, __nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse, int B, int T,
                              int D, int H, bool causal, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  const int hd = check_attention_args("attention_backward", B, T, D, H, {dqkv, dout, qkv, out, lse, workspace});
  PYLON_CHECK(workspace_bytes >= attention_backward_workspace_bytes(B, T, D, H),
              "attention_backward: workspace of ", workspace_bytes, " bytes, needs ",
              attention_backward_workspace_bytes(B, T, D, H));
  auto* dsum = static_cast<float*>(workspace);  // (B, H, T)
  launch_attention_backward_dsum(dsum, dout, out, B, T, D, H, stream);
  bool dkdv = false;
  if (tiles.bwd_ws)  // needs what wgmma needs (sm_90a build, Hopper device)
    dkdv = tiles.wgmma && launch_attention_backward_dkdv_ws(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream);
  else if (tiles.wgmma)
    dkdv = launch_attention_backward_dkdv_wgmma(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream);
  else
    dkdv = launch_attention_backward_dkdv(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream);
  PYLON_CHECK(dkdv,
              "attention_backward: no dk/dv kernel for hd=", hd, " wgmma=", tiles.wgmma, " ws=", tiles.bwd_ws,
              " warps=", tiles.dkdv_warps, " block_m=", tiles.dkdv_block_m, " stages=", tiles.bwd_stages);
  bool dq = false;
  if (tiles.dq_ws)
    dq = tiles.wgmma && launch_attention_backward_dq_ws(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream);
  else if (tiles.wgmma)
    dq = launch_attention_backward_dq_wgmma(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream);
  else
    dq = launch_attention_backward_dq(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream);
  PYLON_CHECK(dq,
              "attention_backward: no dq kernel for hd=", hd, " wgmma=", tiles.wgmma, " warps=", tiles.dq_warps, " block_n=", tiles.dq_block_n);
}

}  // namespace detail

void attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int D, int H,
                       bool causal, cudaStream_t stream) {
  detail::attention_forward_tiled(detail::default_attention_tiles(H > 0 ? D / H : 0), out, lse, qkv, B, T, D, H,
                                  causal, stream);
}

size_t attention_backward_workspace_bytes(int B, int T, int /*D*/, int H) {
  return static_cast<size_t>(B) * H * T * sizeof(float);
}

void attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                        const __nv_bfloat16* out, const float* lse, int B, int T, int D, int H, bool causal,
                        void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  detail::attention_backward_tiled(detail::default_attention_tiles(H > 0 ? D / H : 0), dqkv, dout, qkv, out, lse,
                                   B, T, D, H, causal, workspace, workspace_bytes, stream);
}

}  // namespace pylon::cuda
