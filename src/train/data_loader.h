// The sequential data order of DESIGN §2 (llm.c's): with G = world·B rows of T tokens per
// micro-step, row j of micro-step m is tokens [(m·G + j)·T, (m·G + j)·T + T + 1) of the file
// taken cyclically (it wraps to the start). Rank r owns rows r·B .. r·B + B − 1.
#pragma once

#include <cstdint>

#include "io/token_file.h"

namespace pylon {

class DataLoader {
 public:
  DataLoader(const TokenFile& file, int batch, int seq, int rank = 0, int world = 1);
  // inputs, targets: (B, T). Pure function of micro_step: resuming needs no loader state.
  void load(int64_t micro_step, int32_t* inputs, int32_t* targets) const;
  int64_t tokens_per_micro_step() const { return static_cast<int64_t>(B_) * T_ * world_; }

 private:
  const TokenFile& file_;
  int B_, T_, rank_, world_;
};

// One optimizer step's micro-batches on this rank, as the training loop hands them to a step:
// micro-batch a (0 ≤ a < count()) of step t (1-based) is the loader's micro-step (t − 1)·count() + a.
// A step loads each when it needs it, so what it holds of the data need not grow with --grad-accum.
class StepBatches {
 public:
  StepBatches(const DataLoader& loader, int64_t step, int count) : loader_(loader), step_(step), count_(count) {}
  int64_t step() const { return step_; }
  int count() const { return count_; }
  // inputs, targets: (B, T). In a "data_load" profile range.
  void load(int micro, int32_t* inputs, int32_t* targets) const;

 private:
  const DataLoader& loader_;
  int64_t step_;
  int count_;
};

}  // namespace pylon
