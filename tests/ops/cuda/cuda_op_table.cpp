// The CUDA table of the op harness: every kernel of src/ops/cuda by dtype and shape (odd sizes, the
// scalar and vector paths, the seed preset's sizes), each against its CPU reference. Seeds are the
// rows' last argument. A row per line; the makers are in <op>_cases.cpp.
#include "ops/cuda/cuda_op_cases.h"

namespace pylon::cuda::testing {

using ::pylon::testing::OpHarness;

namespace {

constexpr DType bf16 = DType::bf16, f32 = DType::f32;
constexpr size_t kOdd = 1000003;               // a tail past every vector width
constexpr size_t kMlp = size_t{8192} * 8192;  // the seed preset's (N, 4D)
constexpr bool kCausal = true, kFull = false;
constexpr bool kResidual = true, kNoResidual = false;
constexpr bool kInPlace = true, kApart = false;

std::vector<OpCase> cuda_op_table() {
  std::vector<OpCase> t;
  auto add = [&](OpCase c) { t.push_back(std::move(c)); };

  // elementwise.h, cast.h
  add(residual_add(bf16, 7, kApart, 1));
  add(residual_add(f32, 7, kApart, 3));
  add(residual_add(bf16, kOdd, kApart, 1));  // a tail of 3 past the 8-wide part
  add(residual_add(f32, kOdd, kApart, 3));
  add(residual_add(f32, 1001, kInPlace, 5));  // out aliases a, as the contract allows
  add(cast_f32_to_bf16(7, 0, 1));
  add(cast_f32_to_bf16(kOdd, 0, 2));
  add(cast_f32_to_bf16(size_t{8192} * 2048, 0, 3));
  add(cast_f32_to_bf16(kOdd, 1, 4));
  add(cast_bf16_to_f32(7, 0, 1));
  add(cast_bf16_to_f32(kOdd, 0, 2));
  add(cast_bf16_to_f32(size_t{8192} * 2048, 0, 3));
  add(cast_bf16_to_f32(kOdd, 1, 4));

  // column_sum.h
  add(bias_backward(bf16, 7, 2051, 1));
  add(bias_backward(bf16, 33, 5, 2));
  add(bias_backward(bf16, 100003, 3, 3));  // three levels
  add(bias_backward(bf16, 8192, 6144, 4));  // in_proj
  add(bias_backward(bf16, 8192, 2048, 5));  // out_proj
  add(bias_backward(f32, 7, 2051, 40));
  add(bias_backward(f32, 1000, 45, 40));
  add(bias_backward(f32, 4099, 384, 40));
  add(column_sum_accumulate(1031, 77, 6));

  // rope.h: hd 12 (the scalar path), 128 (the 8-wide path), the seed preset; grouped-query heads
  // (8 over 2 at hd 128 and 64, one KV head of 10: the q and k heads rotated, v untouched); Llama
  // 3's rope scaling (Llama 3.1's, and one whose original context of 16 puts hd 10's frequencies
  // in all three bands)
  using MHA = HeadLayout;
  const RopeScaling llama31{8.f, 1.f, 4.f, 8192}, short_context{32.f, 1.f, 4.f, 16};
  for (const auto& make : {rope_forward, rope_backward}) {
    add(make(bf16, 2, 33, HeadLayout{8, 2, 128}, 500000.f, 1000, 8, llama31));
    add(make(f32, 2, 5, HeadLayout{6, 1, 10}, 500000.f, 3, 15, short_context));
    add(make(bf16, 2, 7, MHA::multi_head(36, 3), 10000.f, 5, 1, {}));
    add(make(bf16, 1, 3, MHA::multi_head(256, 2), 500000.f, 1000, 2, {}));
    add(make(bf16, 8, 1024, MHA::multi_head(2048, 16), 10000.f, 0, 3, {}));
    add(make(bf16, 2, 33, HeadLayout{8, 2, 128}, 500000.f, 7, 6, {}));
    add(make(bf16, 2, 9, HeadLayout{6, 1, 10}, 10000.f, 2, 7, {}));
    add(make(f32, 2, 7, MHA::multi_head(36, 3), 10000.f, 5, 11, {}));
    add(make(f32, 3, 9, MHA::multi_head(256, 2), 500000.f, 3, 12, {}));
    add(make(f32, 2, 5, HeadLayout{8, 2, 64}, 10000.f, 3, 13, {}));
    add(make(f32, 2, 5, HeadLayout{6, 1, 10}, 10000.f, 3, 14, {}));
  }
  add(rope_backward_inverts_forward(2, 64, MHA::multi_head(256, 4), 10000.f, 3, 4));

  // cross_entropy.h: the scalar path and the 16-byte one, rows re-read or in shared memory
  add(cross_entropy_forward_backward(bf16, 5, 40, 1.f, 1));
  add(cross_entropy_forward_backward(bf16, 7, 32003, 1.f, 2));    // scalar path, part of the row re-read
  add(cross_entropy_forward_backward(bf16, 3, 50304, 0.5f, 3));   // 16-byte path, part of the row re-read
  add(cross_entropy_forward_backward(bf16, 8192, 32000, 1.f / 8192, 4));
  add(cross_entropy_forward_backward(f32, 5, 40, 1.f, 11));
  add(cross_entropy_forward_backward(f32, 7, 32003, 1.f, 12));    // scalar path, the row in shared memory
  add(cross_entropy_forward_backward(f32, 3, 60000, 0.5f, 13));   // 8-wide path, too long for shared memory
  add(cross_entropy_forward_backward(f32, 64, 32000, 1.f / 64, 14));
  for (const int N : {7, 8192, 100003}) add(loss_mean(N, 5));

  // embedding.h
  add(embedding_forward(bf16, 7, 2051, 13, 1));
  add(embedding_forward(bf16, 8192, 2048, 32000, 2));
  add(embedding_forward(f32, 7, 2051, 13, 21));
  add(embedding_forward(f32, 1000, 77, 3, 22));
  add(embedding_forward(f32, 999, 136, 37, 23));
  add(embedding_backward(bf16, 7, 2051, 13, 3));
  add(embedding_backward(bf16, 1000, 77, 3, 4));        // runs of ~333 rows, scalar path
  add(embedding_backward(bf16, 8192, 2048, 32000, 5));
  add(embedding_backward(bf16, 8192, 2048, 37, 6));     // ~220 rows per id: runs across 16-row segments
  add(embedding_backward(bf16, 17, 8, 2, 7));           // runs ending on and crossing the segment boundary
  add(embedding_backward(bf16, 8192, 2048, 32000, 9, 17));
  add(embedding_backward(f32, 7, 2051, 13, 21));
  add(embedding_backward(f32, 1000, 77, 3, 22));        // long runs, scalar path
  add(embedding_backward(f32, 999, 136, 37, 23));       // 8-wide path, runs across segments

  // silu.h: offset 1 is the scalar path
  add(silu_forward(bf16, 7, 0, 1));
  add(silu_forward(bf16, kOdd, 0, 2));
  add(silu_forward(bf16, kOdd, 1, 3));
  add(silu_forward(bf16, kMlp, 0, 5));
  add(silu_forward(f32, 7, 0, 21));
  add(silu_forward(f32, kOdd, 0, 22));
  add(silu_forward(f32, kOdd, 1, 23));
  add(silu_backward(bf16, 7, 0, kApart, 1));
  add(silu_backward(bf16, kOdd, 0, kApart, 2));
  add(silu_backward(bf16, kOdd, 1, kApart, 3));
  add(silu_backward(bf16, kOdd, 0, kInPlace, 4));
  add(silu_backward(bf16, kMlp, 0, kApart, 5));
  add(silu_backward(f32, 7, 0, kApart, 21));
  add(silu_backward(f32, kOdd, 0, kApart, 22));
  add(silu_backward(f32, kOdd, 1, kApart, 23));
  add(silu_recompute_backward(bf16, 7, 0, kApart, 11));
  add(silu_recompute_backward(bf16, kOdd, 0, kApart, 12));
  add(silu_recompute_backward(bf16, kOdd, 1, kApart, 13));
  add(silu_recompute_backward(bf16, kOdd, 0, kInPlace, 14));
  add(silu_recompute_backward(bf16, kOdd, 1, kInPlace, 15));
  add(silu_recompute_backward(bf16, kMlp, 0, kInPlace, 16));  // in place, as the model does
  add(silu_recompute_backward(f32, 7, 0, kApart, 21));
  add(silu_recompute_backward(f32, kOdd, 0, kApart, 22));
  add(silu_recompute_backward(f32, kOdd, 1, kApart, 23));
  add(swiglu(bf16, 5, 13, kApart, 31));     // F % 8 != 0: the scalar path
  add(swiglu(bf16, 64, 344, kInPlace, 32));  // 8-wide, in place as the model does
  add(swiglu(bf16, 4, 5632, kApart, 33));
  add(swiglu(f32, 5, 13, kApart, 34));
  add(swiglu(f32, 33, 72, kInPlace, 35));

  // rmsnorm.h: C = 8 is the 8-wide path in one chunk, 2051 the scalar path
  add(residual_rmsnorm_forward(bf16, 7, 2051, kResidual, 1));
  add(residual_rmsnorm_forward(bf16, 7, 2051, kNoResidual, 2));
  add(residual_rmsnorm_forward(bf16, 33, 8, kNoResidual, 3));
  add(residual_rmsnorm_forward(bf16, 8192, 2048, kResidual, 4));
  add(residual_rmsnorm_forward(bf16, 8192, 2048, kNoResidual, 5));
  add(rmsnorm_backward(bf16, 7, 2051, kResidual, 6));
  add(rmsnorm_backward(bf16, 37, 2051, kNoResidual, 7));
  add(rmsnorm_backward(bf16, 1000, 8, kResidual, 8));
  add(rmsnorm_backward(bf16, 8192, 2048, kResidual, 9));
  add(rmsnorm_backward(bf16, 8192, 2048, kNoResidual, 10));
  add(rmsnorm_backward_in_place_residual(64, 512));
  for (const auto& make : {residual_rmsnorm_forward, rmsnorm_backward}) {
    add(make(f32, 7, 2051, kResidual, 31));
    add(make(f32, 37, 2051, kNoResidual, 32));
    add(make(f32, 33, 8, kResidual, 33));
    add(make(f32, 100, 1024, kResidual, 34));
  }

  // gemm.h: every transpose, output and beta at 96x80x136 and odd strides (67x45x129)
  uint64_t seed = 1;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const DType out : {bf16, f32})
        for (const float beta : {0.f, 1.f}) {
          add(gemm(bf16, out, ta, tb, 96, 80, 136, beta, false, seed += 3));
          add(gemm(bf16, out, ta, tb, 67, 45, 129, beta, false, seed += 3));
        }
  seed = 100;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      for (const float beta : {0.f, 1.f}) {
        add(gemm(f32, f32, ta, tb, 96, 80, 136, beta, false, seed += 4));
        add(gemm(f32, f32, ta, tb, 67, 45, 129, beta, false, seed += 4));
      }
      add(gemm(f32, f32, ta, tb, 67, 45, 129, 0.f, true, seed += 4));
    }
  // linear.h
  add(linear_forward(7, 129, 45));
  add(linear_forward(256, 2048, 6144));
  add(linear_backward(7, 129, 45, 1.f));
  add(linear_backward(8192, 2048, 256, 0.f));
  add(linear_backward(512, 256, 2048, 1.f));

  // adamw.h, reduce.h: offset 1 is the scalar path
  add(adamw_update(7, 0, 1, false, true, 1));
  add(adamw_update(kOdd, 0, 1, true, true, 2));
  add(adamw_update(kOdd, 0, 10, false, false, 3));
  add(adamw_update(kOdd, 1, 3, true, true, 4));
  add(adamw_update(size_t{1} << 24, 0, 100, true, true, 5));
  add(adamw_update_folded_norm(7, 0, false, 21));
  add(adamw_update_folded_norm(kOdd, 0, true, 22));
  add(adamw_update_folded_norm(kOdd, 1, false, 23));
  add(adamw_update_folded_norm(size_t{1} << 26, 0, false, 24));  // more than 1024 blocks' worth: grid-strided
  for (const size_t n : {size_t{7}, kOdd, size_t{1} << 26}) {
    add(sum_of_squares(n, 0));
    add(sum_of_squares(n, 1));
    add(sum_of_squares_accumulate(n));
  }
  add(clip_coefficient(4.f, 1.f));
  add(clip_coefficient(0.25f, 1.f));
  add(clip_coefficient(4.f, 0.f));
  add(clip_coefficient(1e6f, 5.f));

  // attention.h (bf16): the default (wgmma on Hopper) and mma.sync kernels, T from one key to
  // partial and several tiles; the warp-specialised kernels at B·H = 15 (the tensor maps' batch
  // dimension and head offsets past the first), backward where the CPU reference is cheap; the
  // seed preset's shape, forward.
  using K = AttentionKernels;
  auto mha = [](int heads, int hd) { return HeadLayout{heads, heads, hd}; };
  for (const K k : {K::default_path, K::mma})
    for (const int hd : {64, 128})
      for (const bool causal : {kFull, kCausal})
        for (const int T : {1, 77, 128, 1024}) {
          add(attention_forward(bf16, 2, T, mha(2, hd), causal, k));
          add(attention_backward(bf16, 2, T, mha(2, hd), causal, k));
        }
  for (const int hd : {64, 128})
    for (const bool causal : {kFull, kCausal})
      for (const int T : {1, 77, 128, 1024}) {
        add(attention_forward(bf16, 3, T, mha(5, hd), causal, K::ws));
        if (T <= 128) add(attention_backward(bf16, 3, T, mha(5, hd), causal, K::ws));
      }
  add(attention_forward(bf16, 2, 1024, mha(16, 128), kFull, K::default_path));
  add(attention_forward(bf16, 2, 1024, mha(16, 128), kCausal, K::default_path));
  // Grouped-query (8 query heads over 2 key/value heads) and multi-query (4 over 1) in every kernel
  // family: T = 77 and 200 leave partial tiles of 32, 64 and 128 and 200 > 128 makes dk/dv blocks loop
  // over several query tiles of each head of the group; B·heads = 18 and 15 for the ws kernels.
  for (const int hd : {64, 128})
    for (const bool causal : {kFull, kCausal}) {
      for (const K k : {K::default_path, K::mma})
        for (const int T : {77, 200}) {
          add(attention_forward(bf16, 2, T, HeadLayout{8, 2, hd}, causal, k));
          add(attention_backward(bf16, 2, T, HeadLayout{8, 2, hd}, causal, k));
          add(attention_forward(bf16, 2, T, HeadLayout{4, 1, hd}, causal, k));
          add(attention_backward(bf16, 2, T, HeadLayout{4, 1, hd}, causal, k));
        }
      for (const int T : {77, 300}) {
        add(attention_forward(bf16, 3, T, HeadLayout{6, 2, hd}, causal, K::ws));
        add(attention_backward(bf16, 3, T, HeadLayout{6, 2, hd}, causal, K::ws));
        add(attention_forward(bf16, 3, T, HeadLayout{5, 1, hd}, causal, K::ws));
        add(attention_backward(bf16, 3, T, HeadLayout{5, 1, hd}, causal, K::ws));
      }
    }
  // Other head dims (the row-per-warp kernel): a pair per lane or fewer (10, 32), partial pairs past
  // 64 (80, 96, 200), the largest (256); grouped-query and multi-query.
  for (const HeadLayout heads : {HeadLayout{6, 2, 10}, HeadLayout{8, 2, 32}, HeadLayout{8, 2, 80},
                                 HeadLayout{4, 1, 96}, HeadLayout{3, 3, 48}, HeadLayout{4, 2, 200},
                                 HeadLayout{2, 2, 256}})
    for (const bool causal : {kFull, kCausal})
      for (const int T : {1, 77}) {
        add(attention_forward(bf16, 2, T, heads, causal, K::default_path));
        add(attention_backward(bf16, 2, T, heads, causal, K::default_path));
      }
  for (const int hd : {64, 128})
    for (const bool causal : {kFull, kCausal}) {
      add(attention_every_compiled_tile(mha(2, hd), causal));
      add(attention_every_compiled_tile(HeadLayout{4, 2, hd}, causal));
      add(attention_forward_ws_against_wgmma(hd, causal, 5));
      add(attention_forward_ws_against_wgmma(hd, causal, 1));
    }
  for (const int kv_heads : {16, 4})
    for (const bool causal : {kFull, kCausal}) add(attention_backward_large_grid(causal, kv_heads));
  // attention_fp32.h: T = 77 leaves partial blocks of 4 rows; grouped-query and multi-query at the
  // tensor-core head dims and at others
  for (const int hd : {64, 128})
    for (const bool causal : {kFull, kCausal})
      for (const int T : {1, 77, 128}) {
        add(attention_forward(f32, 2, T, mha(2, hd), causal, K::default_path));
        add(attention_backward(f32, 2, T, mha(2, hd), causal, K::default_path));
      }
  for (const HeadLayout heads : {HeadLayout{8, 2, 64}, HeadLayout{4, 1, 128}, HeadLayout{6, 3, 10},
                                 HeadLayout{4, 1, 96}})
    for (const bool causal : {kFull, kCausal})
      for (const int T : {1, 77}) {
        add(attention_forward(f32, 2, T, heads, causal, K::default_path));
        add(attention_backward(f32, 2, T, heads, causal, K::default_path));
      }
  return t;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Cuda, OpHarness, ::testing::ValuesIn(cuda_op_table()), ::pylon::testing::op_case_name);

}  // namespace pylon::cuda::testing
