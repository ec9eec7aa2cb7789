// The memory a CPU training rank needs, computed from the options before anything is allocated,
// and the check that refuses a run that cannot fit with one line naming the parts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace pylon {

struct MemoryPlan {
  std::vector<std::pair<std::string, int64_t>> parts;  // (what, bytes), each a lower bound
  int64_t total = 0;
  std::string describe() const;  // "812 GB (parameters 4 GB, activations 800 GB, ...)"
};

// Bytes one CPU rank of `world` keeps for training: its shards of the parameters, gradients and
// AdamW state, a gathered unit when sharded, the activations and logits of a batch x seq
// micro-step, and the token buffer of grad_accum micro-steps. Throws pylon::Error when a size
// overflows 64 bits or the rows of a micro-step overflow the CPU step's 32-bit row index.
MemoryPlan cpu_train_memory(const ModelConfig& model, int batch, int seq, int grad_accum, int world);
// Bytes a CPU forward of batch x seq needs beyond the loaded weights: its activations and logits.
MemoryPlan cpu_forward_memory(const ModelConfig& model, int batch, int seq);

// Bytes a CPU decoder (model/decoder.h) of `context` tokens needs beyond its weights: the KV cache
// where its spec keeps one, and with score_rows (eval) the logits of a row of `context` tokens.
MemoryPlan cpu_decode_memory(const ModelConfig& model, int context, bool score_rows);

// Bytes this machine can still give: /proc/meminfo's MemAvailable (sysinfo's free RAM where
int64_t available_host_bytes();

// Throws pylon::Error "WHO needs X GB (...) but this machine has Y GB available" when `ranks`
// copies of the plan exceed `available`; who: "--device cpu: the model".
void check_fits(const MemoryPlan& plan, int ranks, int64_t available, const std::string& who);

}  // namespace pylon
