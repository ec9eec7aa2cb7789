// The Vulkan op rows' makers (vulkan_op_cases.cpp), listed with their shapes in
// vulkan_op_table.cpp. Rows share one device (a Vulkan context and its vk::Ops, every knob set back
// to its default before each row) and skip where no Vulkan device opens.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/edge_format.h"
#include "ops/op_harness.h"
#include "ops/vulkan/ops.h"

namespace pylon::vk::testing {

using ::pylon::testing::DType;
using ::pylon::testing::OpCase;
using ::pylon::testing::OpRun;
using ::pylon::testing::Tolerance;

// A weight of (rows, cols) in an edge encoding, multiplied by n tokens (int4: groups of `group`,
// scales in f16 or f32).
struct MatmulCase {
  EdgeDType dtype;
  int64_t rows, cols;
  uint32_t n;
  int group = 32;
  bool scale_f16 = true;
};

// y [+]= act(x·Wᵀ [+ bias]), x starting at element x_off of its buffer (a row offset, as the head
// uses for the last token; the GEMV reads x as vec4 when it is a multiple of 4, else element by
// element).
struct MatmulMode {
  bool bias = false, accumulate = false;
  uint32_t x_off = 0;
  bool silu = false;
};
inline constexpr MatmulMode kNoBias{false, false, 3, false};
inline constexpr MatmulMode kBiasAccumulate{true, true, 4, false};
inline constexpr MatmulMode kBiasSilu{true, false, 0, true};
inline constexpr MatmulMode kBias{true, false, 3, false};

// The kernel a matmul row selects. One token: the subgroup GEMV (gemv_subgroup: rows per subgroup x
// subgroups per set; {0, 0} the automatic shape), a row per invocation through storage buffers or,
// where the device offers them, texel buffers. Several tokens: the GEMM (tiled, or coopmat where
// it runs) or, with texels, gemm_rows_texel (4 tokens an invocation).
enum class MatmulPath { gemv_subgroup, gemv_rows, gemv_rows_texel, gemm, gemm_texel };

// vk::Ops::matmul against the fp32 CPU product of the decoded weights; max_buffer_bytes caps the
// device's storage bindings (0: its limits) so that weights split into several buffers.
OpCase matmul(const MatmulCase& c, MatmulMode m, MatmulPath path, vk::Ops::GemvShape shape = {},
              uint64_t max_buffer_bytes = 0);
// The decode head's GEMV (decode_layer.comp's HEAD pipeline): rows_a_set rows a subgroup (0: the
// dtype's), a grid of `groups` workgroups; norm: behind a final RMSNorm of weights in that dtype.
OpCase decode_head(const MatmulCase& c, uint32_t rows_a_set, uint32_t groups, std::optional<EdgeDType> norm = {});
// The GEMV with RMSNorm fused in front: norm weights of dtype `norm`; shape {0, 0}: the row per
// invocation GEMV.
OpCase normed_gemv(const MatmulCase& c, EdgeDType norm, uint32_t x_off, bool silu, bool accumulate,
                   vk::Ops::GemvShape shape);
// gemm_coopmat (mode 0), gemm_coopmat2 with its own K split (1) or every K split 3 ways (3)
// against matmul_plain; skip where the device has no such GEMM.
OpCase coopmat_gemm(const MatmulCase& c, uint32_t mode);

// x (n, D) = table (V, D, f16)[tokens].
OpCase embedding(int V, int D, const std::vector<uint32_t>& tokens);
// y (n, cols) = rmsnorm(x)·g, g of dtype `weights`.
OpCase rmsnorm(EdgeDType weights, int n, int cols, uint64_t seed);
// In place over n values.
OpCase silu(int n);
// y (n, width) = SiLU(gate)·up of x (n, 2·width), against cpu::swiglu_forward.
OpCase swiglu(int n, int width);
// qkv (n, heads.row()) rotated at positions pos0 + i, pos0 split between the push constant (push)
// and the device's position buffer; the rotated k and the v appended to rows pos0 .. of a cache of
// T rows; against cpu::rope_forward.
OpCase rope(int n, HeadLayout heads, int pos0, int push, int T);
// n queries in packed qkv rows, query and key/value heads as `heads` says; causal: keys and values from a cache of T rows, the
// first query at position pos0 (push of it in the push constant, the rest from the device's
// position buffer), else the packed rows' own k and v thirds. path: attention_tiled.comp (coopmat
// off), attention.comp, or attention_coopmat.comp with attention_halves.comp's fp16 operands (skips
// where it does not run).
enum class AttentionPath { tiled, plain, coopmat };
OpCase attention(int n, HeadLayout heads, int T, int pos0, int push, bool causal, AttentionPath path);
// Past the shader's 3072 scores in shared memory (through the scratch buffer): two causal queries at
// position 3100 over a cache of 4200 rows.
OpCase attention_long_context(HeadLayout heads);
// The decode form at position p over a cache of 4200 rows (chunks of 32 keys combined by each
// head's last workgroup; past 128 chunks the combine takes them in batches).
OpCase attention_decode(HeadLayout heads, uint32_t p);
// The qkv GEMV with RoPE and the KV append in its store, against the same work unfused
// (normed_gemv on the row-per-invocation GEMV, then rope with its append).
OpCase qkv_rope_gemv(int D, int H, EdgeDType dtype, vk::Ops::GemvShape shape);

}  // namespace pylon::vk::testing
