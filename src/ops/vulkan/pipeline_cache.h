// The compiled pipelines kept across runs: a VkPipelineCache loaded from a file when the Context
// starts and written back when it ends, so that a second run skips the driver's shader compiles
// (seconds on a cold driver, every run on drivers without a disk cache of their own, as MoltenVK).
// Drivers that keep no compute pipelines in a VkPipelineCache (lavapipe) save nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <vulkan/vulkan.h>

namespace pylon::vk {

// Where the pipeline cache lives: `requested` if not empty ("off": none), else
// $PYLON_VK_PIPELINE_CACHE (a file, or "off"), else <cache root>/vulkan/pipelines-VENDOR-DEVICE.bin
// (the cache root of default_data_cache_root(): $PYLON_DATA_DIR, $XDG_CACHE_HOME/pylon or
// ~/.cache/pylon). "" when off or when no root can be found.
std::string pipeline_cache_path(const std::string& requested, uint32_t vendor_id, uint32_t device_id);

// Whether `size` bytes at `data` start with a version-one pipeline cache header of this device and
// driver build (VkPipelineCacheHeaderVersionOne: vendor, device, pipelineCacheUUID) that fits in
// them. Data that is not is never handed to the driver (some crash on another's).
bool pipeline_cache_data_is_for(const void* data, size_t size, const VkPhysicalDeviceProperties& props);

class PipelineCache {
 public:
  // Loads `path` ("": nothing, not saved) when pipeline_cache_data_is_for this device; a missing,
  // short, foreign or corrupt file is ignored (the cache starts empty) and replaced on save.
  PipelineCache(VkDevice device, const VkPhysicalDeviceProperties& props, std::string path);
  ~PipelineCache();  // save()
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;

  VkPipelineCache handle() const { return cache_; }
  const std::string& path() const { return path_; }
  bool loaded() const { return loaded_; }  // whether the file's data seeded the cache
  // Merges in what the file holds now (another Context or process may have saved since this one
  // loaded it), then writes the cache to the path (AtomicFile: a reader sees the old file or the
  // new one, never half of one) when it holds more than the file. Returns false with a line on
  // stderr where that fails (the run goes on without it).
  bool save();

 private:
  VkDevice device_;
  VkPhysicalDeviceProperties props_;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string path_;
  bool loaded_ = false;
};

}  // namespace pylon::vk
