// Evicts the device's L2 cache between profiled kernels, as Nsight Compute's --cache-control all
// does: a kernel reads a buffer twice the L2's size, so the next kernel finds none of its inputs
// cached and no dirty lines of earlier kernels left to write back during its own run.
#pragma once

#include "ops/cuda/runtime.h"

namespace pylon::profile {

class L2Flush {
 public:
  L2Flush();  // on the current device; allocates 2x its L2 size
  // Launches the read on a stream of its own and waits for it.
  void run() const;

 private:
  cuda::DeviceBuffer buffer_, sink_;
  cuda::Stream stream_;
  int blocks_ = 0;
};

}  // namespace pylon::profile
