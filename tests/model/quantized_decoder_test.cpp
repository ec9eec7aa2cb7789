// The CPU decoder reading an edge file in place (f16 / int8 / int4 matrices, no fp32 copy) against
// the same decoder over the file dequantized to fp32: logits within tolerance at every position
// (causal and seed presets, odd sizes), row scoring equal to feeding, greedy generation identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "io/edge_format.h"
#include "model/decoder.h"
#include "model/edge_model.h"
#include "model/edge_weights.h"
#include "model/params.h"
#include "core/half.h"
#include "ops/cpu/quantized.h"
#include "support/presets.h"
#include "support/temp_dir.h"
#include "support/varied_params.h"

namespace pylon {
namespace {

// linear() over each encoding against the plain fp32 loop over the dequantized weights: rows 130
// (three tiles of kLinearTileRows, the last one partial), odd columns, one token and several, with a
// bias. Same weight values, other summation order (BLAS): |got - want| <= 1e-5 + 1e-4 |want|.
TEST(WeightView, LinearOverEveryEncodingMatchesDequantized) {
  const int64_t rows = 130;
  // 53 columns: int4 groups end partway; 301: more than 8 int4 groups of 32 a row (the GEMV takes
  // those 8 at a time), then a whole group and a partial one.
  for (const int64_t cols : {int64_t{53}, int64_t{301}}) {
    std::mt19937 gen(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> w(static_cast<size_t>(rows * cols)), x(40 * cols), bias(rows);
    for (float& v : w) v = normal(gen);
    for (float& v : x) v = normal(gen);
    for (float& v : bias) v = normal(gen);
    struct Encoded {
      WeightView view;
      std::vector<float> deq;  // the values the view stands for
    };
    std::vector<uint16_t> half(w.size()), half_scales;
    std::vector<int8_t> q8(w.size());
    std::vector<float> s8(rows), s4_32, s4_64;
    std::vector<uint8_t> q4_32(static_cast<size_t>(rows * int4_row_bytes(cols))), q4_64(q4_32.size());
    std::vector<Encoded> cases;
    {
      Encoded e{f32_view(nullptr, rows, cols), std::vector<float>(w.size())};
      for (size_t i = 0; i < w.size(); ++i) e.deq[i] = half_to_float(half[i] = float_to_half(w[i]));
      e.view.dtype = EdgeDType::f16, e.view.values = half.data();
      cases.push_back(e);
    }
    {
      Encoded e{f32_view(nullptr, rows, cols), std::vector<float>(w.size())};
      quantize_int8_rows(w.data(), rows, cols, q8.data(), s8.data());
      dequantize_int8_rows(q8.data(), s8.data(), rows, cols, e.deq.data());
      e.view.dtype = EdgeDType::int8, e.view.values = q8.data(), e.view.scales = s8.data();
      cases.push_back(e);
    }
    for (int group : {32, 64}) {  // group 32 with f16 scales (the file's default), 64 with f32
      Encoded e{f32_view(nullptr, rows, cols), std::vector<float>(w.size())};
      std::vector<float>& s = group == 32 ? s4_32 : s4_64;
      std::vector<uint8_t>& q = group == 32 ? q4_32 : q4_64;
      s.resize(static_cast<size_t>(rows * int4_groups(cols, group)));
      quantize_int4_groups(w.data(), rows, cols, group, group == 32, q.data(), s.data());
      dequantize_int4_groups(q.data(), s.data(), rows, cols, group, e.deq.data());
      e.view.dtype = EdgeDType::int4, e.view.values = q.data(), e.view.group_size = group;
      if (group == 32) {
        for (float v : s) half_scales.push_back(float_to_half(v));
        e.view.scales = half_scales.data(), e.view.scale_dtype = EdgeDType::f16;
      } else {
        e.view.scales = s.data(), e.view.scale_dtype = EdgeDType::f32;
      }
      cases.push_back(e);
    }
    static_assert(kLinearGemvTokens < 40, "n = 40 is to take the fp32 tiles");
    for (const Encoded& e : cases)
      for (int64_t n : {1, 3, 6, 40}) {  // the GEMV: 1 token, 3, 4 + 2; the fp32 tiles
        std::vector<float> y(static_cast<size_t>(n * rows), std::numeric_limits<float>::quiet_NaN());
        linear(y.data(), x.data(), n, e.view, bias.data());
        for (int64_t i = 0; i < n; ++i)
          for (int64_t r = 0; r < rows; ++r) {
            float want = 0;
            for (int64_t c = 0; c < cols; ++c) want += x[i * cols + c] * e.deq[r * cols + c];
            want += bias[r];
            ASSERT_NEAR(y[i * rows + r], want, 1e-5f + 1e-4f * std::fabs(want))
                << edge_dtype_name(e.view.dtype) << " cols " << cols << " n " << n << " row " << r;
          }
        std::vector<float> row(cols);  // weight_rows: exactly the dequantized values
        weight_rows(e.view, 129, 1, row.data());
        for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(row[c], e.deq[129 * cols + c]);
      }
  }
}

// Odd sizes: causal D = 30 (int4 groups of 32 and 64 are partial, hd = 10); seed D = 27 (hd = 9,
// odd columns, so int4 rows end in half a byte); llama D = 30 with grouped-query heads (3 over 1 of
// head size 8, so Q = 24 columns into o_proj), an MLP of 51 (down_proj's int4 rows end in half a
// byte), q/k/v biases and a tied head.
ModelConfig odd_config(const Preset& p) {
  ModelConfig c;
  c.set_preset(p);
  c.layers = 2, c.heads = 3;
  c.vocab = p.positions == Positions::rope ? 41 : 37;  // rotary embeddings need an even head size
  c.dim = p.positions == Positions::rope ? 30 : 27;
  if (p.naming == Naming::hugging_face)
    c.kv_heads = 1, c.head_size = 8, c.ffn_dim = 51, c.qkv_bias = true, c.tied_head = true, c.norm_eps = 1e-5f;
  return c;
}

std::string export_model(const testing::TempDir& tmp, const ModelConfig& c, const EdgeQuant& q) {
  const ParamTable table = param_table(c);
  std::vector<float> flat(table.total);
  init_params(table, 11, flat.data());
  testing::vary_constant_params(table, flat.data());
  const std::string path = tmp.file(std::string(c.preset.name) + edge_dtype_name(q.matrices) +
                                    std::to_string(q.group_size) + edge_dtype_name(q.int4_scales) + ".edge");
  write_edge_model(path, c, encode_edge_tensors(table, flat.data(), q), "");
  return path;
}

std::vector<float> dequantized(const EdgeModel& m) {
  const ParamTable table = param_table(m.config);
  std::vector<float> flat(table.total);
  load_edge_weights(m.file, table, flat.data());
  return flat;
}

// Both decoders multiply by the same fp32 weight values (q * scale, or the f16 value) through the
// BLAS GEMM, in 64-row tiles against the whole matrix: the fp32 bound of decoder_test for a change
// of summation order, |got - want| <= 1e-5 + 1e-4 |want| (measured: identical).
float tolerance(float want) { return 1e-5f + 1e-4f * std::fabs(want); }

void expect_in_place_matches_dequantized(const Preset& preset, EdgeDType dtype, int group = 32,
                                         EdgeDType scales = EdgeDType::f16) {
  testing::TempDir tmp;
  const ModelConfig c = odd_config(preset);
  EdgeQuant q;
  q.matrices = dtype, q.group_size = group, q.int4_scales = scales;
  const EdgeModel file(export_model(tmp, c, q));
  const std::vector<float> flat = dequantized(file);
  const int T = 11, V = c.vocab;
  std::vector<int32_t> ids(T);
  for (int t = 0; t < T; ++t) ids[t] = (t * 13 + 5) % V;

  Decoder direct(file, 16), ref(c, flat.data(), 16);
  std::vector<float> fed(static_cast<size_t>(T) * V);  // direct's logits at every position
  const int prefill = 4;
  double worst = 0;
  for (int t = prefill - 1; t < T; ++t) {
    const float* got = t < prefill ? direct.feed(ids.data(), prefill) : direct.feed(&ids[t], 1);
    const float* want = t < prefill ? ref.feed(ids.data(), prefill) : ref.feed(&ids[t], 1);
    for (int v = 0; v < V; ++v) {
      ASSERT_NEAR(got[v], want[v], tolerance(want[v])) << edge_dtype_name(dtype) << " position " << t;
      worst = std::max(worst, static_cast<double>(std::fabs(got[v] - want[v])));
    }
    std::copy(got, got + V, fed.begin() + static_cast<size_t>(t) * V);
  }
  EXPECT_EQ(direct.position(), T);
  std::printf("[ decoder ] %s %s group %d: largest |logit difference| %.2e\n", preset.name,
              edge_dtype_name(dtype), group, worst);

  // score(): the whole row at once, the same logits as feeding it (same kernels, other batching).
  std::vector<float> scored(static_cast<size_t>(T) * V), scored_ref(scored.size());
  direct.score(ids.data(), T, scored.data());
  ref.score(ids.data(), T, scored_ref.data());
  EXPECT_EQ(direct.position(), 0);
  for (int t = 0; t < T; ++t)
    for (int v = 0; v < V; ++v) {
      const size_t i = static_cast<size_t>(t) * V + v;
      ASSERT_NEAR(scored[i], scored_ref[i], tolerance(scored_ref[i])) << "score, position " << t;
      // Seed: position t's logits see the whole row, feeding saw only tokens 0..t.
      if (t >= prefill - 1 && preset.mask == Mask::causal) {
        ASSERT_NEAR(scored[i], fed[i], tolerance(fed[i])) << "score vs feed, position " << t;
      }
    }
  if (preset.mask == Mask::bidirectional) {  // the last row saw the same tokens either way
    for (int v = 0; v < V; ++v) {
      const size_t i = static_cast<size_t>(T - 1) * V + v;
      ASSERT_NEAR(scored[i], fed[i], tolerance(fed[i]));
    }
  }
}

TEST(QuantizedDecoder, CausalF16MatchesDequantized) { expect_in_place_matches_dequantized(find_preset("causal"), EdgeDType::f16); }
TEST(QuantizedDecoder, CausalInt8MatchesDequantized) { expect_in_place_matches_dequantized(find_preset("causal"), EdgeDType::int8); }
TEST(QuantizedDecoder, CausalInt4MatchesDequantized) {
  expect_in_place_matches_dequantized(find_preset("causal"), EdgeDType::int4, 32, EdgeDType::f16);
  expect_in_place_matches_dequantized(find_preset("causal"), EdgeDType::int4, 64, EdgeDType::f32);
}
TEST(QuantizedDecoder, SeedF16MatchesDequantized) { expect_in_place_matches_dequantized(find_preset("seed"), EdgeDType::f16); }
TEST(QuantizedDecoder, SeedInt8MatchesDequantized) { expect_in_place_matches_dequantized(find_preset("seed"), EdgeDType::int8); }
TEST(QuantizedDecoder, SeedInt4MatchesDequantized) {
  expect_in_place_matches_dequantized(find_preset("seed"), EdgeDType::int4, 32, EdgeDType::f16);
  expect_in_place_matches_dequantized(find_preset("seed"), EdgeDType::int4, 64, EdgeDType::f32);
}
TEST(QuantizedDecoder, LlamaMatchesDequantizedAtEveryPrecision) {
  for (const EdgeDType d : {EdgeDType::f32, EdgeDType::f16, EdgeDType::int8})
    expect_in_place_matches_dequantized(find_preset("llama"), d);
  expect_in_place_matches_dequantized(find_preset("llama"), EdgeDType::int4, 32, EdgeDType::f16);
  expect_in_place_matches_dequantized(find_preset("llama"), EdgeDType::int4, 64, EdgeDType::f32);
}
TEST(QuantizedDecoder, F32FileMatchesFlatBuffer) { expect_in_place_matches_dequantized(find_preset("causal"), EdgeDType::f32); }

// Greedy decoding of a small f16 model: the same ids in place and through the fp32 copy.
TEST(QuantizedDecoder, GreedyIdenticalInF16) {
  for (const Preset& p : testing::multi_head_presets()) {
    testing::TempDir tmp;
    ModelConfig c;
    c.preset = p, c.vocab = 97, c.dim = 64, c.layers = 2, c.heads = 4;
    const EdgeModel file(export_model(tmp, c, EdgeQuant{}));
    const std::vector<float> flat = dequantized(file);
    auto greedy = [&](Decoder& d) {
      std::vector<int32_t> ids = {5, 17, 42, 7, 90};
      const float* l = d.feed(ids.data(), static_cast<int>(ids.size()));
      for (int i = 0; i < 40; ++i) {
        const int32_t next = static_cast<int32_t>(std::max_element(l, l + c.vocab) - l);
        ids.push_back(next);
        l = d.feed(&next, 1);
      }
      return ids;
    };
    Decoder direct(file, 64), ref(c, flat.data(), 64);
    EXPECT_EQ(greedy(direct), greedy(ref)) << p.name;
  }
}

}  // namespace
}  // namespace pylon
