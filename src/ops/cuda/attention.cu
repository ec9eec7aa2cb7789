// Host API of the fused attention: argument checks, tile-shape choice, and the order of the passes.
#include <cstdint>
#include <initializer_list>

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

AttentionTiles default_attention_tiles(int /*head_dim*/) { return AttentionTiles{}; }

void attention_forward_tiled(const AttentionTiles& tiles, __nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                             int B, int T, int D, int H, bool causal, cudaStream_t stream) {
  const int hd = check_attention_args("attention_forward", B, T, D, H, {out, lse, qkv});
  PYLON_CHECK(launch_attention_forward(tiles, hd, out, lse, qkv, B, T, D, H, causal, stream),
              "attention_forward: no kernel for hd=", hd, " warps=", tiles.fwd_warps, " block_n=", tiles.fwd_block_n);
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
  PYLON_CHECK(launch_attention_backward_dkdv(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream),
              "attention_backward: no dk/dv kernel for hd=", hd, " warps=", tiles.dkdv_warps,
              " block_m=", tiles.dkdv_block_m);
  PYLON_CHECK(launch_attention_backward_dq(tiles, hd, dqkv, dout, qkv, lse, dsum, B, T, D, H, causal, stream),
              "attention_backward: no dq kernel for hd=", hd, " warps=", tiles.dq_warps, " block_n=", tiles.dq_block_n);
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
