// PipelineCache: a VkPipelineCache seeded from a file whose header names this device, and
// written back atomically.
#include "ops/vulkan/pipeline_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/default_data.h"
#include "ops/vulkan/check.h"

namespace pylon::vk {
namespace fs = std::filesystem;

constexpr uintmax_t kMaxFileBytes = 256ull << 20;  // a larger file is not a pipeline cache: ignored

bool pipeline_cache_data_is_for(const void* data, size_t size, const VkPhysicalDeviceProperties& props) {
  VkPipelineCacheHeaderVersionOne h{};
  if (!data || size < sizeof(h)) return false;
  std::memcpy(&h, data, sizeof(h));
  return h.headerSize >= sizeof(h) && h.headerSize <= size && h.headerVersion == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
         h.vendorID == props.vendorID && h.deviceID == props.deviceID &&
         std::memcmp(h.pipelineCacheUUID, props.pipelineCacheUUID, VK_UUID_SIZE) == 0;
}

std::string pipeline_cache_path(const std::string& requested, uint32_t vendor_id, uint32_t device_id) {
  std::string path = requested;
  if (path.empty())
    if (const char* env = std::getenv("PYLON_VK_PIPELINE_CACHE")) path = env;
  if (path == "off") return "";
  if (!path.empty()) return path;
  try {
    char name[64];
    std::snprintf(name, sizeof(name), "pipelines-%04x-%04x.bin", vendor_id, device_id);
    return (fs::path(default_data_cache_root()) / "vulkan" / name).string();
  } catch (const Error&) {  // no HOME and no cache variable: no cache
    return "";
  }
}

PipelineCache::PipelineCache(VkDevice device, const VkPhysicalDeviceProperties& props, std::string path)
    : device_(device), path_(std::move(path)) {
  std::vector<char> data;
  std::error_code ec;
  if (!path_.empty() && fs::is_regular_file(path_, ec) && fs::file_size(path_, ec) <= kMaxFileBytes) {
    std::ifstream in(path_, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!pipeline_cache_data_is_for(data.data(), data.size(), props)) data.clear();
  }
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  ci.initialDataSize = data.size();
  ci.pInitialData = data.empty() ? nullptr : data.data();
  if (!data.empty() && vkCreatePipelineCache(device_, &ci, nullptr, &cache_) == VK_SUCCESS) {
    loaded_ = true;
    loaded_bytes_ = data.size();
    return;
  }
  ci.initialDataSize = 0, ci.pInitialData = nullptr;  // refused: start empty
  PYLON_VK_CHECK(vkCreatePipelineCache(device_, &ci, nullptr, &cache_));
}

PipelineCache::~PipelineCache() {
  save();
  vkDestroyPipelineCache(device_, cache_, nullptr);
}

bool PipelineCache::save() {
  if (path_.empty()) return true;
  size_t size = 0;
  if (vkGetPipelineCacheData(device_, cache_, &size, nullptr) != VK_SUCCESS) return false;
  // Nothing built that the file did not hold (a header alone is no cache).
  if (size <= std::max(loaded_bytes_, sizeof(VkPipelineCacheHeaderVersionOne))) return true;
  std::vector<char> data(size);
  if (vkGetPipelineCacheData(device_, cache_, &size, data.data()) != VK_SUCCESS) return false;
  data.resize(size);
  try {
    const fs::path target(path_);
    if (target.has_parent_path()) fs::create_directories(target.parent_path());
    AtomicFile out(path_);
    out.write(data.data(), data.size());
    out.commit();
  } catch (const std::exception& e) {  // pylon::Error from AtomicFile, filesystem_error
    std::fprintf(stderr, "warning: Vulkan pipeline cache not saved (%s); set PYLON_VK_PIPELINE_CACHE to a "
                 "writable file, or off\n", e.what());
    return false;
  }
  loaded_bytes_ = data.size();
  return true;
}

}  // namespace pylon::vk
