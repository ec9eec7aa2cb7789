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

// The backward's scratch, 256-byte aligned slices: dsum (B, H, T) fp32, then for the one-pass schemes
// dq's fp32 sum (B, H, T, hd) and the turn counters (B*H, ceil(T/64)).
struct BackwardWorkspace {
  float* dsum;
  float* dq_acc;
  int* dq_turns;
  size_t total_bytes;
};
BackwardWorkspace carve_backward_workspace(const detail::AttentionTiles& tiles, void* base, int B, int T, int D,
                                           int H) {
  auto round_up = [](size_t n) { return (n + 255) & ~size_t{255}; };
  const size_t dsum_bytes = round_up(static_cast<size_t>(B) * H * T * sizeof(float));
  const bool one_pass = tiles.dq_scheme != detail::DqScheme::second_pass;
  const size_t acc_bytes = one_pass ? round_up(static_cast<size_t>(B) * T * D * sizeof(float)) : 0;
  const size_t turn_bytes = one_pass ? round_up(static_cast<size_t>(B) * H * ((T + 63) / 64) * sizeof(int)) : 0;
  char* p = static_cast<char*>(base);  // null when only the size is asked for
  if (!p || !one_pass) return {reinterpret_cast<float*>(p), nullptr, nullptr, dsum_bytes + acc_bytes + turn_bytes};
  return {reinterpret_cast<float*>(p), reinterpret_cast<float*>(p + dsum_bytes),
          reinterpret_cast<int*>(p + dsum_bytes + acc_bytes), dsum_bytes + acc_bytes + turn_bytes};
}

}  // namespace

namespace detail {

AttentionTiles default_attention_tiles(int head_dim) {
  AttentionTiles tiles;  // 4 warps and tiles of 64 won every other pass (bench --sweep on the H200)
#if defined(PYLON_CUDA_SM90A)
  int device = 0, major = 0;
  PYLON_CUDA_CHECK(cudaGetDevice(&device));
  PYLON_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  tiles.wgmma = major == 9;
  if (tiles.wgmma && head_dim == 128) {  // two warpgroups per backward block: 19% faster at hd 128
    tiles.dkdv_warps = 8;
    tiles.dq_warps = 8;
    tiles.dq_scheme = DqScheme::one_pass_ordered_add;
  }
#else
  (void)head_dim;
#endif
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
  if (default_attention_tiles(head_dim).wgmma)
    families.push_back({true, {{4, 64}, {4, 128}, {8, 64}, {8, 128}}, {{4, 64}, {8, 64}}, {{4, 64}, {8, 64}}});
  std::vector<AttentionTiles> all;
  for (const Family& f : families) {
    const size_t n = std::max({f.fwd.size(), f.dkdv.size(), f.dq.size()});
    for (size_t i = 0; i < n; ++i) {
      const auto& [fw, fb] = f.fwd[i % f.fwd.size()];
      const auto& [kw, kb] = f.dkdv[i % f.dkdv.size()];
      const auto& [qw, qb] = f.dq[i % f.dq.size()];
      all.push_back({f.wgmma, fw, fb, kw, kb, qw, qb, DqScheme::second_pass});
    }
  }
  if (families.back().wgmma)  // the one-pass backward: 1 warpgroup (both head dims), 2 (hd 128)
    for (DqScheme scheme : {DqScheme::one_pass_ordered_add, DqScheme::one_pass_bulk_add})
      for (int warps : {4, 8})
        if (warps == 4 || head_dim == 128) all.push_back({true, 4, 64, warps, 64, 4, 64, scheme});
  return all;
}

size_t attention_backward_workspace_bytes_tiled(const AttentionTiles& tiles, int B, int T, int D, int H) {
  return carve_backward_workspace(tiles, nullptr, B, T, D, H).total_bytes;
}

void attention_forward_tiled(const AttentionTiles& tiles, __nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                             int B, int T, int D, int H, bool causal, cudaStream_t stream) {
  const int hd = check_attention_args("attention_forward", B, T, D, H, {out, lse, qkv});
  const bool launched = tiles.wgmma ? launch_attention_forward_wgmma(tiles, hd, out, lse, qkv, B, T, D, H, causal, stream)
                                    : launch_attention_forward(tiles, hd, out, lse, qkv, B, T, D, H, causal, stream);
  PYLON_CHECK(launched,
              "attention_forward: no kernel for hd=", hd, " wgmma=", tiles.wgmma, " warps=", tiles.fwd_warps, " block_n=", tiles.fwd_block_n);
}

void attention_backward_tiled(const AttentionTiles& tiles, __nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse, int B, int T,
                              int D, int H, bool causal, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  const int hd = check_attention_args("attention_backward", B, T, D, H, {dqkv, dout, qkv, out, lse, workspace});
  const BackwardWorkspace ws = carve_backward_workspace(tiles, workspace, B, T, D, H);
  PYLON_CHECK(workspace_bytes >= ws.total_bytes, "attention_backward: workspace of ", workspace_bytes,
              " bytes, needs ", ws.total_bytes);
  float* dsum = ws.dsum;  // (B, H, T)
  launch_attention_backward_dsum(dsum, dout, out, B, T, D, H, stream);
  if (tiles.dq_scheme != DqScheme::second_pass) {
    PYLON_CHECK(tiles.wgmma &&
                    launch_attention_backward_one_pass_wgmma(tiles, hd, dqkv, ws.dq_acc, ws.dq_turns, dout, qkv, lse,
                                                             dsum, B, T, D, H, causal, stream),
                "attention_backward: no one-pass kernel for hd=", hd, " wgmma=", tiles.wgmma,
                " warps=", tiles.dkdv_warps, " block_m=", tiles.dkdv_block_m);
    return;
  }
  const bool dkdv = tiles.wgmma
                        ? launch_attention_backward_dkdv_wgmma(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream)
                        : launch_attention_backward_dkdv(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream);
  PYLON_CHECK(dkdv,
              "attention_backward: no dk/dv kernel for hd=", hd, " wgmma=", tiles.wgmma, " warps=", tiles.dkdv_warps,
              " block_m=", tiles.dkdv_block_m);
  const bool dq = tiles.wgmma
                      ? launch_attention_backward_dq_wgmma(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream)
                      : launch_attention_backward_dq(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream);
  PYLON_CHECK(dq,
              "attention_backward: no dq kernel for hd=", hd, " wgmma=", tiles.wgmma, " warps=", tiles.dq_warps, " block_n=", tiles.dq_block_n);
}

}  // namespace detail

void attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int D, int H,
                       bool causal, cudaStream_t stream) {
  detail::attention_forward_tiled(detail::default_attention_tiles(H > 0 ? D / H : 0), out, lse, qkv, B, T, D, H,
                                  causal, stream);
}

size_t attention_backward_workspace_bytes(int B, int T, int D, int H) {
  return detail::attention_backward_workspace_bytes_tiled(detail::default_attention_tiles(H > 0 ? D / H : 0), B, T,
                                                          D, H);
}

void attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                        const __nv_bfloat16* out, const float* lse, int B, int T, int D, int H, bool causal,
                        void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  detail::attention_backward_tiled(detail::default_attention_tiles(H > 0 ? D / H : 0), dqkv, dout, qkv, out, lse,
                                   B, T, D, H, causal, workspace, workspace_bytes, stream);
}

}  // namespace pylon::cuda
