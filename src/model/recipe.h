// The decoder's forward written once, over the inference op interface (ops/inference.h): the
// embedding, then each block (DESIGN §1) as the preset's traits say, leaving the head's input in
// Act::x (Act::h after a final norm). The CPU and Vulkan decoders both run it.
#pragma once

#include "model/config.h"
#include "ops/inference.h"

namespace pylon {

// What the backends need for this model and context length: sizes, traits, the weights' places in
// the parameter table (model/params.h).
InferenceSpec inference_spec(const ModelConfig& config, int max_tokens);

// The forward of n tokens begun on `ops` (InferenceOps::begin), up to the head's input.
void forward_blocks(InferenceOps& ops, const InferenceSpec& spec, int n);

}  // namespace pylon
