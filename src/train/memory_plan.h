// The memory a training rank needs, computed from the options before anything is allocated (on
// the CPU: its RAM; on a GPU: its device memory), and the check that refuses a run that cannot fit
// with one line naming the biggest parts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dist/fsdp_cuda_buffers.h"
#include "model/config.h"
#include "train/trainer.h"

namespace pylon {

struct MemoryPlan {
  std::vector<std::pair<std::string, int64_t>> parts;  // (what, bytes), each a lower bound
  int64_t total = 0;
  int64_t part(const std::string& what) const;  // 0 when the plan has no such part
  // "812 GB (activations 800 GB, parameters 4 GB, ...)": the parts largest first.
  std::string describe() const;
};

// Bytes one CPU rank of `world` keeps for training: its shards of the parameters, gradients and
// AdamW state, a gathered unit when sharded, the activations and logits of a batch x seq
// micro-step, and the tokens of one micro-step (the step loads each micro-batch when it needs it,
// so --grad-accum does not enter). Throws pylon::Error when a size overflows 64 bits or the rows
// of a micro-step overflow the CPU step's 32-bit row index.
MemoryPlan cpu_train_memory(const ModelConfig& model, int batch, int seq, int world);
// Bytes a CPU forward of batch x seq needs beyond the loaded weights: its activations and logits.
MemoryPlan cpu_forward_memory(const ModelConfig& model, int batch, int seq);

// Bytes a CPU decoder (model/decoder.h) of `context` tokens needs beyond its weights: the KV cache
// where its spec keeps one, and with score_rows (eval) the logits of a row of `context` tokens.
MemoryPlan cpu_decode_memory(const ModelConfig& model, int context, bool score_rows);

// What only CUDA code can size, given by train/cuda (null or 0 here: not counted, for the checks
// that run without a GPU).
struct CudaScratch {
  size_t (*model)(const ModelConfig& config, int B, int T) = nullptr;  // the kernels' (MiniLLMCuda::workspace_bytes)
  FsdpScratchBytes fsdp = nullptr;                                     // FsdpCuda::scratch_bytes
  int64_t gemm = 0;                                                    // cuBLASLt's workspace (cuda::Gemm)
};
// The FSDP options the CUDA step runs with o (train/cuda/trainer_cuda.cpp).
FsdpCudaOptions cuda_fsdp_options(const TrainOptions& o);
// Bytes one GPU rank of `world` allocates to train with o, the CUDA step's buffers: FSDP's shards
// of the fp32 master weights, AdamW state and gradients, its bf16 weights (world 1) or gathered
// slots and gradient slots (dist/fsdp_cuda_buffers.h), the model's activation arena
// (model/activation_arena.h), the tokens of a step per step parity, the validation batches, and
// the workspaces. Throws pylon::Error when a size overflows 64 bits or a micro-step's rows
// overflow the step's 32-bit row index.
MemoryPlan cuda_train_memory(const TrainOptions& o, int world, const CudaScratch& scratch = {});

// Bytes this machine can still give: /proc/meminfo's MemAvailable (sysinfo's free RAM where that
// cannot be read).
int64_t available_host_bytes();

// Throws pylon::Error "WHO needs X GB (...) but WHERE has Y GB KIND[; HINT]" when `ranks` copies of
// the plan exceed `available`; e.g. who "--device cpu: the model", where "this machine", kind
// "available".
void check_fits(const MemoryPlan& plan, int ranks, int64_t available, const std::string& who,
                const std::string& where = "this machine", const std::string& kind = "available",
                const std::string& hint = "");
// check_fits for the CUDA plan of o on GPU `gpu` with `free` bytes free (cudaMemGetInfo), with a
// hint for the biggest part ("try --recompute full or a smaller --batch").
void check_fits_on_gpu(const MemoryPlan& plan, const TrainOptions& o, int gpu, int64_t free);

}  // namespace pylon
