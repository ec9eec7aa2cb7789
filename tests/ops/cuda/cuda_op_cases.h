// The CUDA op rows' makers (one per op and form, in <op>_cases.cpp), listed with their shapes in
// cuda_op_table.cpp. A row skips where no CUDA device is (builds without a GPU still list every row).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/head_layout.h"
#include "core/rope_scaling.h"
#include "ops/op_harness.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda::testing {

using ::pylon::testing::Backend;
using ::pylon::testing::DType;
using ::pylon::testing::format_number;
using ::pylon::testing::kExact;
using ::pylon::testing::OpCase;
using ::pylon::testing::OpRun;
using ::pylon::testing::shape_of;
using ::pylon::testing::Tolerance;
using ::pylon::testing::torch_tolerance;

// A CUDA row; skips without a device.
OpCase cuda_case(std::string op, DType dtype, std::string shape, std::string variant,
                 std::function<void(const OpRun&)> run);

// elementwise_cases.cpp: residual_add (in_place: out aliases a), the fp32 <-> bf16 casts (offset 1:
// buffers 2- or 4-byte aligned only, the scalar path).
OpCase residual_add(DType d, size_t n, bool in_place, uint64_t seed);
OpCase cast_f32_to_bf16(size_t n, size_t offset, uint64_t seed);
OpCase cast_bf16_to_f32(size_t n, size_t offset, uint64_t seed);

// column_sum_cases.cpp: dbias (O) += Σ_rows dout (N, O) in dtype d, deterministic; the fp32 column sum.
OpCase bias_backward(DType d, int N, int O, uint64_t seed);
OpCase column_sum_accumulate(int64_t R, int C, uint64_t seed);

// rope_cases.cpp: in place on qkv (B, T, 3D).
// scaling: Llama 3's (core/rope_scaling.h), or none ({})
OpCase rope_forward(DType d, int B, int T, HeadLayout heads, float theta, int pos0, uint64_t seed,
                    RopeScaling scaling);
OpCase rope_backward(DType d, int B, int T, HeadLayout heads, float theta, int pos0, uint64_t seed,
                     RopeScaling scaling);
OpCase rope_backward_inverts_forward(int B, int T, HeadLayout heads, float theta, int pos0, uint64_t seed);

// cross_entropy_cases.cpp: losses (N) and dlogits (N, V) in place over the logits; the mean loss.
OpCase cross_entropy_forward_backward(DType d, int N, int V, float scale, uint64_t seed);
OpCase loss_mean(int N, uint64_t seed);

// embedding_cases.cpp: out (N, D) = table (V, D)[ids]; dtable += scatter of dout. hot_id >= 0: that
// id at every even position (one long run).
OpCase embedding_forward(DType d, int N, int D, int V, uint64_t seed);
OpCase embedding_backward(DType d, int N, int D, int V, uint64_t seed, int hot_id = -1);

// silu_cases.cpp: offset 1 leaves bf16 buffers 2-byte, fp32 4-byte aligned (the scalar path);
// in_place: the gradient (and for the recompute the activation) overwrites its input.
OpCase silu_forward(DType d, size_t n, size_t offset, uint64_t seed);
OpCase silu_backward(DType d, size_t n, size_t offset, bool in_place, uint64_t seed);
OpCase silu_recompute_backward(DType d, size_t n, size_t offset, bool in_place, uint64_t seed);
OpCase swiglu(DType d, int64_t N, int64_t F, bool in_place, uint64_t seed);

// rmsnorm_cases.cpp: the fused residual add + RMSNorm (residual: x_out = x + delta) and its backward
// (residual: + dresidual; and its dx column sums).
OpCase residual_rmsnorm_forward(DType d, int N, int C, bool residual, uint64_t seed);
OpCase rmsnorm_backward(DType d, int N, int C, bool residual, uint64_t seed);
OpCase rmsnorm_backward_in_place_residual(int N, int C);

// gemm_cases.cpp: C (M, N) = alpha·op(A)·op(B) + beta·C through cuBLASLt, out_dtype the output's
// (bf16 operands) or fp32 operands throughout (d f32, optionally a bias); the linear layer.
OpCase gemm(DType operands, DType out_dtype, bool ta, bool tb, int M, int N, int K, float beta, bool bias,
            uint64_t seed);
OpCase linear_forward(int N, int I, int O);
OpCase linear_backward(int N, int I, int O, float dW_beta);

// adamw_cases.cpp: the update against ops/cpu/adamw.cpp (scaled: by a device grad scale; bf16_copy:
// the bf16 parameter copy), with the grad-norm sum folded in; the sum of squares; the clip
// coefficient.
OpCase adamw_update(size_t n, size_t offset, int64_t step, bool scaled, bool bf16_copy, uint64_t seed);
OpCase adamw_update_folded_norm(size_t n, size_t offset, bool scaled, uint64_t seed);
OpCase sum_of_squares(size_t n, size_t offset);
OpCase sum_of_squares_accumulate(size_t n);
OpCase clip_coefficient(float sumsq, float max_norm);

// attention_cases.cpp: flash attention over qkv (B, T, heads.row()) (multi-head, grouped-query,
// multi-query); the kernels a row takes (head dims other than 64 and 128: the row-per-warp kernel,
// whatever k says).
enum class AttentionKernels { default_path, mma, ws };
OpCase attention_forward(DType d, int B, int T, HeadLayout heads, bool causal, AttentionKernels k);
OpCase attention_backward(DType d, int B, int T, HeadLayout heads, bool causal, AttentionKernels k);
OpCase attention_every_compiled_tile(HeadLayout heads, bool causal);
OpCase attention_backward_large_grid(bool causal, int kv_heads);
OpCase attention_forward_ws_against_wgmma(int hd, bool causal, int kv_heads);

}  // namespace pylon::cuda::testing
