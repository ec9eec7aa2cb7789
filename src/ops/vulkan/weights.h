// Placing edge-file weights on a Vulkan device: zero-copy import of the mmap'd file
// (VK_EXT_external_memory_host) on integrated-GPU and CPU devices, otherwise an upload to
// device-local memory. Every tensor is split into row chunks of at most info().max_buffer_bytes.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "io/edge_format.h"
#include "ops/vulkan/ops.h"

namespace pylon::vk {

// One tensor's encoded bytes in host memory (the mapped file or a test's vectors).
struct HostTensor {
  EdgeDType dtype = EdgeDType::f32;
  int64_t rows = 0, cols = 0;
  int group = 0;
  bool scale_f16 = false;
  const std::byte* values = nullptr;
  const std::byte* scales = nullptr;  // int8 / int4
  uint64_t scale_bytes = 0;
};

enum class WeightPath { automatic, import, upload };

class DeviceWeights {
 public:
  // Throws pylon::Error when a tensor cannot be placed (a row larger than a binding may be,
  // allocation failure). `path` forces a path; automatic imports on unified-memory devices.
  DeviceWeights(Context& ctx, const EdgeFile& file, WeightPath path = WeightPath::automatic);
  const DeviceMatrix& get(const std::string& name) const;
  // "zero-copy import of the mapped file" or "uploaded to device-local memory (...)"
  const std::string& description() const { return description_; }
  bool imported() const { return imported_; }

 private:
  std::map<std::string, DeviceMatrix> tensors_;
  std::deque<Buffer> buffers_;  // deque: views point at its elements
  std::string description_;
  bool imported_ = false;
};

// Uploads t into buffers kept in `keep` (tests and the upload path).
DeviceMatrix upload_tensor(Context& ctx, const HostTensor& t, std::deque<Buffer>& keep);
// Imports t's bytes in place; `base`/`mapped_bytes`: the mapping holding them. Throws if refused.
DeviceMatrix import_tensor(Context& ctx, const HostTensor& t, const std::byte* base,
                           uint64_t mapped_bytes, std::deque<Buffer>& keep);

}  // namespace pylon::vk
