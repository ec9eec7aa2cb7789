// The decoder's forward written once, over the inference op interface (ops/inference.h): the
// embedding, then each block (DESIGN §1) as the preset's traits say, leaving the last block's
// output in Act::x for the head. The CPU and Vulkan decoders both run it.
#pragma once

#include "model/config.h"
#include "ops/inference.h"

namespace pylon {

// Throws pylon::Error for a model the decoders cannot run yet (the llama preset's grouped-query
// heads, SwiGLU and final norm).
void check_decodable(const ModelConfig& config);

// What the backends need for this model and context length: sizes, traits, the weights' places in
// the parameter table (model/params.h). check_decodable first.
InferenceSpec inference_spec(const ModelConfig& config, int max_tokens);

// The forward of n tokens begun on `ops` (InferenceOps::begin), up to the head.
void forward_blocks(InferenceOps& ops, const ModelConfig& config, int n);

}  // namespace pylon
