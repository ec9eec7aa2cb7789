// The generation path against the training forward: KV-cached decoding (causal) and full
// recompute (seed) give the same logits as MiniLLM::forward at every position.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "model/decoder.h"
#include "model/minillm.h"
#include "model/sampler.h"
#include "support/presets.h"
#include "support/varied_params.h"

namespace pylon {
namespace {

void expect_decoder_matches_forward(const ModelConfig& c, int prefill) {
  MiniLLM model(c);
  std::vector<float> params(model.table().total);
  init_params(model.table(), 7, params.data());
  testing::vary_constant_params(model.table(), params.data());
  const int T = 11;
  std::vector<int32_t> ids(T);
  for (int t = 0; t < T; ++t) ids[t] = (t * 13 + 5) % c.vocab;

  Decoder decoder(c, params.data(), 16);
  const float* logits = decoder.feed(ids.data(), prefill);
  for (int t = prefill - 1; t < T; ++t) {
    if (t >= prefill) logits = decoder.feed(&ids[t], 1);
    model.forward(params.data(), ids.data(), nullptr, 1, t + 1);  // the first t+1 tokens
    const float* want = model.logits() + static_cast<size_t>(t) * c.vocab;
    for (int v = 0; v < c.vocab; ++v)  // fp32, different summation order: 1e-4 relative
      ASSERT_NEAR(logits[v], want[v], 1e-5f + 1e-4f * std::fabs(want[v])) << "position " << t;
  }
  EXPECT_EQ(decoder.position(), T);
}

ModelConfig small(const Preset& preset) {
  ModelConfig c;
  c.set_preset(preset);
  c.vocab = 37, c.dim = 24, c.layers = 2, c.heads = 3;
  return c;
}

TEST(Decoder, CausalKvCacheMatchesForward) { expect_decoder_matches_forward(small(find_preset("causal")), 1); }
TEST(Decoder, CausalPrefillThenDecodeMatchesForward) {
  expect_decoder_matches_forward(small(find_preset("causal")), 6);
}
TEST(Decoder, SeedRecomputeMatchesForward) { expect_decoder_matches_forward(small(find_preset("seed")), 3); }

// The llama preset: a KV cache of the key/value heads only (grouped-query and multi-query), a
// head size apart from dim/heads, SwiGLU, the final norm, biases and a tied head.
TEST(Decoder, LlamaMatchesForward) {
  for (const ModelConfig& c : testing::llama_variants(small(find_preset("llama")))) {
    SCOPED_TRACE(c.describe());
    expect_decoder_matches_forward(c, 1);
    expect_decoder_matches_forward(c, 5);
  }
}

// The paths read a preset's traits, not its name: every combination of mask and positions (two of
// them in no preset today) decodes as the training forward computes.
TEST(Decoder, EveryTraitCombinationMatchesForward) {
  for (const Mask mask : {Mask::bidirectional, Mask::causal})
    for (const Positions positions : {Positions::none, Positions::rope}) {
      SCOPED_TRACE(std::string(mask_name(mask)) + " mask, positions " + positions_name(positions));
      expect_decoder_matches_forward(small({"traits", "a combination of traits", mask, positions, Ffn::silu, false,
                                            Naming::torch, true}),
                                     4);
    }
}

TEST(Sampler, GreedyTopKAndTopP) {
  const std::vector<float> logits = {0.f, 3.f, 1.f, 2.9f, -1.f};
  Rng rng(1);
  EXPECT_EQ(sample_token(logits.data(), 5, {0.f, 0, 1.f}, rng), 1);
  for (int i = 0; i < 200; ++i) {  // top-k 2: only the two best can appear
    const int t = sample_token(logits.data(), 5, {1.f, 2, 1.f}, rng);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  for (int i = 0; i < 200; ++i)  // top-p 0.3: the best token alone already holds that mass
    EXPECT_EQ(sample_token(logits.data(), 5, {1.f, 0, 0.3f}, rng), 1);
}

}  // namespace
}  // namespace pylon
