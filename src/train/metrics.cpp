#include "train/metrics.h"

namespace pylon {

const std::vector<MetricField>& metrics_schema() {
  static const std::vector<MetricField> schema = {
      {"step", "always", "optimizer steps done (1-based)"},
      {"loss", "always", "mean training loss of the step over the global batch (all ranks, all micro-steps)"},
      {"lr", "always", "learning rate of the step"},
      {"grad_norm", "always", "global gradient norm before clipping"},
      {"tokens_per_s", "always", "tokens of the global batch / step_ms"},
      {"step_ms", "always",
       "the step's time in ms: wall clock on CPU ranks; on GPUs device events from the step's start on the "
       "compute stream to its end on every stream"},
      {"peak_mem_bytes", "always",
       "the largest of the ranks' peak memory so far: the process's resident set on CPU ranks; on GPUs the device "
       "memory in use beyond what was in use at the start (cudaMemGetInfo)"},
      {"world", "always", "ranks"},
      {"peak_mem_bytes_per_rank", "world > 1", "each rank's peak memory so far, as peak_mem_bytes counts it"},
      {"val_loss", "validation", "mean validation loss after the step's update (--val-data with --eval-every)"},
      {"allocated_bytes", "cuda", "device memory Pylon allocated on each rank (weights, shards, activations)"},
      {"gather_ms", "cuda", "the step's all-gather stream time, casts included (0 with --cuda-graph)"},
      {"reduce_ms", "cuda", "the step's reduce-scatter stream time (0 with --cuda-graph)"},
      {"exposed_wait_ms", "cuda", "time the compute stream waited on collectives (0 with --cuda-graph)"},
      {"tail_ms", "cuda", "the reduce stream's time after the last compute kernel (0 with --cuda-graph)"},
      {"cuda_graph", "cuda", "whether the step was a replayed CUDA graph"},
      {"energy_j", "nvml",
       "joules per step, summed over the ranks' GPUs, over the steps of about the "
       "last second (the first row: since the GPU monitor started): the driver's energy counter, or the power "
       "samples integrated when the window is shorter than a second"},
      {"tokens_per_j", "nvml", "tokens of the global batch / energy_j"},
      {"power_w", "nvml", "mean board power per GPU over the same steps (W)"},
      {"sm_clock_mhz", "nvml", "mean SM clock per GPU over the same steps, from samples every 20 ms (MHz)"},
      {"power_capped_frac", "nvml",
       "share of those samples in which the driver held the clocks down for the power cap (NVML's SW power cap "
       "reason), mean over the GPUs"},
  };
  return schema;
}

}  // namespace pylon
