#include "train/data_loader.h"

#include "core/error.h"
#include "profile/tracer.h"

namespace pylon {

DataLoader::DataLoader(const TokenFile& file, int batch, int seq, int rank, int world)
    : file_(file), B_(batch), T_(seq), rank_(rank), world_(world) {
  PYLON_CHECK(batch > 0 && seq > 0, "batch and seq must be positive");
  PYLON_ASSERT(rank >= 0 && rank < world);
  PYLON_CHECK(file.size() >= 2, file.path(), ": needs at least 2 tokens, has ", file.size());
}

void DataLoader::load(int64_t micro_step, int32_t* inputs, int32_t* targets) const {
  const int64_t n = file_.size(), G = static_cast<int64_t>(world_) * B_;
  for (int b = 0; b < B_; ++b) {
    const int64_t row = micro_step * G + static_cast<int64_t>(rank_) * B_ + b;
    const int64_t start = (row * T_) % n;
    for (int t = 0; t < T_; ++t) {
      inputs[static_cast<int64_t>(b) * T_ + t] = static_cast<int32_t>(file_[(start + t) % n]);
      targets[static_cast<int64_t>(b) * T_ + t] = static_cast<int32_t>(file_[(start + t + 1) % n]);
    }
  }
}

void StepBatches::load(int micro, int32_t* inputs, int32_t* targets) const {
  PYLON_ASSERT(micro >= 0 && micro < count_, "micro-batch ", micro, " of ", count_);
  PYLON_RANGE("data", "data_load");
  loader_.load((step_ - 1) * count_ + micro, inputs, targets);
}

}  // namespace pylon
