// Device time per kind of dispatch, from GPU timestamps written after every recorded command
// (Recorder with a GpuTimes sink). Each command is charged from the previous timestamp to its
// own, so the barrier and launch gap before it count as its time and the entries sum to `total`.
// No Vulkan header here: the decoder's public header includes this.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pylon::vk {

struct GpuTimes {
  struct Entry {
    double seconds = 0;
    long count = 0;
  };
  std::map<std::string, Entry> by_kernel;  // kernel name, or "copy"
  double total = 0;                         // seconds from each run's first timestamp to its last
  long runs = 0;                            // command buffers timed
  void clear() { *this = GpuTimes{}; }
};

// The persistent decode kernel's clock marks (Ops::enable_timeline, decode_layer.comp's Timeline):
// each workgroup's SM clock, low 32 bits (differences are taken modulo 2^32), at its start and end
// and at kEvents points of every block: 0 the block's start (the previous barrier passed), 1 qkv's
// row staged, 2 qkv stored, in its first attention item 3 the head's q and k seen stored, 4 the
// softmax done, 5 the item's output stored (without an item: 3-5 when the attention ends), 6 the
// attention done, 7 its first out_proj tile's values seen, 8 out_proj added, 9 the barrier after
// out_proj passed, 10 the FFN's row staged, 11 its first slice's f1 done, 12 the FFN done.
struct LayerTimeline {
  static constexpr uint32_t kEvents = 13;
  uint32_t groups = 0, blocks = 0;
  std::vector<uint32_t> words;  // (2, groups) start and end, then (blocks, kEvents, groups)
  uint32_t start(uint32_t g) const { return words[g]; }
  uint32_t end(uint32_t g) const { return words[groups + g]; }
  uint32_t at(uint32_t block, uint32_t event, uint32_t g) const {
    return words[(2 + static_cast<size_t>(block) * kEvents + event) * groups + g];
  }
};

}  // namespace pylon::vk
