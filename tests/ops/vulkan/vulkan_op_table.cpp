// The Vulkan table of the op harness: every shader of src/ops/vulkan by weight dtype, shape (odd
// rows and columns, rows of many 16-byte words, long contexts) and kernel path (both GEMVs and
// their shapes, storage and texel reads, the GEMMs, tiled / plain / coopmat attention, weights
// split over several buffers), each against its CPU reference. A row per line; the makers are in
// vulkan_op_cases.cpp.
#include "ops/vulkan/vulkan_op_cases.h"

namespace pylon::vk::testing {

using ::pylon::testing::OpHarness;

namespace {

constexpr EdgeDType f32 = EdgeDType::f32, f16 = EdgeDType::f16, int8 = EdgeDType::int8, int4 = EdgeDType::int4;
constexpr bool kCausal = true, kFull = false;

// Every path a matmul of c takes: one token: the subgroup GEMV in three shapes (3 rows leave a
// partial set at most sizes) and the automatic one, the row-per-invocation GEMV through storage and
// texel buffers; several tokens: the GEMM and gemm_rows_texel.
void add_matmul_paths(std::vector<OpCase>& t, const MatmulCase& c, MatmulMode m, uint64_t max_buffer_bytes = 0) {
  using P = MatmulPath;
  if (c.n == 1) {
    for (const vk::Ops::GemvShape s : {vk::Ops::GemvShape{1, 1}, vk::Ops::GemvShape{3, 1}, vk::Ops::GemvShape{2, 4},
                                       vk::Ops::GemvShape{}})
      t.push_back(matmul(c, m, P::gemv_subgroup, s, max_buffer_bytes));
    t.push_back(matmul(c, m, P::gemv_rows, {}, max_buffer_bytes));
    t.push_back(matmul(c, m, P::gemv_rows_texel, {}, max_buffer_bytes));
  } else {
    t.push_back(matmul(c, m, P::gemm, {}, max_buffer_bytes));
    t.push_back(matmul(c, m, P::gemm_texel, {}, max_buffer_bytes));
  }
}

std::vector<OpCase> vulkan_op_table() {
  std::vector<OpCase> t;
  auto add = [&](OpCase c) { t.push_back(std::move(c)); };

  // matmul, each without bias (x at offset 3), with bias and the residual accumulate (offset 4) and
  // with bias and SiLU (offset 0).
  const MatmulCase matmuls[] = {
      {f32, 37, 71, 1},   {f32, 37, 71, 5},   {f32, 65, 128, 1},
      {f16, 37, 71, 1},   {f16, 130, 256, 1}, {f16, 130, 256, 67},
      {int8, 37, 71, 1},  {int8, 70, 96, 1},  {int8, 70, 96, 3},
      {int8, 135, 160, 20},  // past one 128-row coopmat tile, the epilogue on int8 words
      {int4, 37, 71, 1},  {int4, 70, 96, 1},  {int4, 70, 96, 66},
      {int4, 33, 128, 1, 64, false}, {int4, 33, 128, 9, 64, false},
      // GEMV rows of many 16-byte words (the four-words-in-flight loop and its remainder).
      {f32, 9, 1028, 1},  {f16, 19, 4104, 1}, {int8, 23, 2064, 1},
      {int4, 21, 4160, 1}, {int4, 6, 4224, 1, 64, false},
      {int4, 7, 576, 1, 96, true},  // 3 words a group: a division, not a shift
      // gemm_coopmat2 (where it runs) with K split over 2 workgroups a tile: few tiles, long rows.
      {f16, 70, 1024, 24}, {int4, 64, 1024, 20, 32, true},
  };
  for (const MatmulCase& c : matmuls)
    for (const MatmulMode m : {kNoBias, kBiasAccumulate, kBiasSilu}) add_matmul_paths(t, c, m);
  // Weights split into several buffers (bindings capped at 256 rows of int8 x 96); several tokens
  // too: the GEMMs' chunks (coopmat and coopmat2 where they run, with row_base).
  for (const MatmulCase& c : {MatmulCase{int8, 600, 96, 1}, MatmulCase{int8, 600, 96, 4}, MatmulCase{f16, 700, 40, 1},
                              MatmulCase{int4, 600, 64, 2}, MatmulCase{f16, 700, 32, 40}, MatmulCase{int8, 600, 96, 20}})
    add_matmul_paths(t, c, kBias, 300 * 96);

  // The cooperative-matrix GEMMs against matmul_plain: whole-word loads and element-by-element
  // ones (71 columns, an f16 K step that ends mid-step, int4 groups of 96); tiles cut by the rows
  // and tokens; K split where the tiles are few and the rows long (H200: 8 shares of 32 K steps, 2
  // of 9 with the last step cut, 2 of 12 int8 decoded; 64 x 2048: 4 of 16).
  for (const uint32_t mode : {0u, 1u, 3u})
    for (const MatmulCase& c : {MatmulCase{f16, 130, 256, 67}, MatmulCase{int8, 70, 96, 33},
                                MatmulCase{int4, 200, 128, 128}, MatmulCase{f16, 64, 2048, 128},
                                MatmulCase{f32, 37, 71, 20}, MatmulCase{f32, 65, 128, 16}, MatmulCase{f16, 40, 40, 17},
                                MatmulCase{int8, 23, 2064, 16}, MatmulCase{int4, 7, 576, 18, 96, true},
                                MatmulCase{int8, 300, 160, 260}, MatmulCase{int4, 129, 512, 40, 64, false},
                                MatmulCase{f16, 300, 160, 260}, MatmulCase{f16, 256, 512, 256},
                                MatmulCase{int8, 600, 64, 40}, MatmulCase{int4, 520, 96, 33, 32, false},
                                MatmulCase{f16, 40, 4096, 16}, MatmulCase{f16, 100, 1056, 40},
                                MatmulCase{int8, 300, 1536, 20}})
      add(coopmat_gemm(c, mode));

  // decode_head: rows of one step of words a lane or several (the last partial: f16 2056 columns
  // are 257 words), row sets that leave the last partial (3 rows a set, 37 rows), one row, and
  // grids of one and three workgroups (so subgroups with several, one or no row sets).
  for (const MatmulCase& c : {MatmulCase{f32, 37, 36, 1}, MatmulCase{f32, 9, 1028, 1}, MatmulCase{f16, 37, 72, 1},
                              MatmulCase{f16, 19, 2056, 1}, MatmulCase{f16, 1, 256, 1}, MatmulCase{int8, 70, 96, 1},
                              MatmulCase{int8, 23, 2064, 1}, MatmulCase{int4, 33, 128, 1, 64, false},
                              MatmulCase{int4, 21, 2080, 1}, MatmulCase{int4, 7, 576, 1, 96, true}})
    for (const uint32_t rows_a_set : {0u, 3u})
      for (const uint32_t groups : {1u, 3u})
        if (rows_a_set == 0 || c.rows == 37) add(decode_head(c, rows_a_set, groups));
  // Behind a final norm (a llama model's head on the persistent path), norm weights f16 and f32.
  for (const MatmulCase& c : {MatmulCase{f16, 37, 72, 1}, MatmulCase{int8, 23, 2064, 1}, MatmulCase{int4, 7, 576, 1, 96, true}})
    for (const EdgeDType norm : {f16, f32}) add(decode_head(c, 0, 3, norm));

  // normed_gemv: norm weights in f16 and f32, odd and long rows, both x layouts.
  struct Normed {
    MatmulCase m;
    EdgeDType norm;
    uint32_t x_off;
    bool silu, accumulate;
  };
  for (const Normed& n : {Normed{{f16, 37, 71, 1}, f16, 3, false, false}, Normed{{f16, 19, 4104, 1}, f32, 0, true, false},
                          Normed{{int8, 23, 2064, 1}, f16, 4, false, true}, Normed{{int4, 21, 4160, 1}, f16, 0, true, true},
                          Normed{{int4, 33, 128, 1, 64, false}, f32, 3, false, false},
                          Normed{{f32, 9, 1028, 1}, f32, 5, false, false}})
    for (const vk::Ops::GemvShape s : {vk::Ops::GemvShape{1, 1}, vk::Ops::GemvShape{3, 2}, vk::Ops::GemvShape{}})
      add(normed_gemv(n.m, n.norm, n.x_off, n.silu, n.accumulate, s));

  // qkv_rope_gemv: head dims 12 and 32; rows per subgroup 1 .. 4 over 1, 2 and 4 subgroups.
  for (const auto& [D, H] : {std::pair{48, 4}, std::pair{64, 2}})
    for (const EdgeDType d : {f16, int8, int4})
      for (const vk::Ops::GemvShape s : {vk::Ops::GemvShape{1, 1}, vk::Ops::GemvShape{4, 2}, vk::Ops::GemvShape{3, 4},
                                         vk::Ops::GemvShape{}})
        add(qkv_rope_gemv(D, H, d, s));

  // embedding, rmsnorm (rows of 77: element by element; 12 and 1028: vec4s, fewer and more columns
  // than the workgroup's 256 invocations), silu.
  add(embedding(50, 77, {3, 49, 0, 3, 17}));
  add(rmsnorm(f16, 5, 77, 2));
  for (const int cols : {12, 1028})
    for (const EdgeDType d : {f16, f32}) add(rmsnorm(d, 3, cols, 6));
  add(silu(1001));
  add(swiglu(3, 37));  // an odd width
  add(swiglu(1, 1100));

  // rope with its KV append: the position split between the push constant and the device buffer;
  // an odd token count at head dim 20; one token, its position all in the push constant; grouped
  // key/value heads (2 of 4, 1 of 6 at head dim 10).
  using Heads = HeadLayout;
  add(rope(6, Heads::multi_head(48, 4), 7, 2, 20));
  add(rope(5, Heads::multi_head(60, 3), 11, 0, 16));
  add(rope(1, Heads::multi_head(48, 4), 19, 19, 20));
  add(rope(5, Heads{4, 2, 12}, 7, 2, 20));
  add(rope(1, Heads{6, 1, 10}, 9, 9, 12));

  // attention: a causal cache at position 7 (2 in the push constant) and the packed rows, tiled and
  // plain, with every head its own key/value head and in groups (2 of 4; 1 of 4 at head dim 10:
  // element by element); several blocks of 16 queries, the last partial, head dims 8 and 128, keys
  // over several chunks of 32; cooperative matrices at head dims 16, 64 and 128 (one block,
  // several, partial), with grouped heads at 64.
  for (const AttentionPath p : {AttentionPath::tiled, AttentionPath::plain})
    for (const bool causal : {kCausal, kFull}) {
      add(attention(6, Heads{4, 4, 12}, 20, 7, 2, causal, p));
      add(attention(6, Heads{4, 2, 12}, 20, 7, 2, causal, p));
      add(attention(5, Heads{4, 1, 10}, 20, 7, 2, causal, p));
    }
  for (const int hd : {8, 128})
    for (const bool causal : {kCausal, kFull}) add(attention(37, Heads{3, 3, hd}, 80, 30, 4, causal, AttentionPath::tiled));
  for (const auto& [hd, n] : {std::pair{16, 16}, std::pair{64, 77}, std::pair{128, 130}})
    for (const bool causal : {kCausal, kFull})
      add(attention(n, Heads{3, 3, hd}, 30 + n + 9, 30, 4, causal, AttentionPath::coopmat));
  for (const bool causal : {kCausal, kFull}) add(attention(77, Heads{4, 2, 64}, 116, 30, 4, causal, AttentionPath::coopmat));
  // Long contexts, head dims 16 and 128 (vec4 loads) and 18 (element by element): the prefill form
  // past 3072 scores, the decode form at positions 0 (one key), 40 (two chunks, the second partial,
  // the rest empty), 3100 and 4190 (131 chunks: two batches in the combine); grouped heads (3 of 6).
  for (const int D : {32, 36, 256}) {
    add(attention_long_context(Heads::multi_head(D, 2)));
    for (const uint32_t p : {0u, 40u, 3100u, 4190u}) add(attention_decode(Heads::multi_head(D, 2), p));
  }
  add(attention_long_context(Heads{6, 3, 16}));
  for (const uint32_t p : {40u, 3100u}) add(attention_decode(Heads{6, 2, 16}, p));
  return t;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Vulkan, OpHarness, ::testing::ValuesIn(vulkan_op_table()), ::pylon::testing::op_case_name);

}  // namespace pylon::vk::testing
