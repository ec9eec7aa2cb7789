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

#include "core/env.h"
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
  if (path.empty()) path = env_text("PYLON_VK_PIPELINE_CACHE").value_or("");
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

// The file's data if it is a pipeline cache of this device and driver build, else nothing.
static std::vector<char> read_cache_file(const std::string& path, const VkPhysicalDeviceProperties& props) {
  std::vector<char> data;
  std::error_code ec;
  if (path.empty() || !fs::is_regular_file(path, ec) || fs::file_size(path, ec) > kMaxFileBytes) return data;
  std::ifstream in(path, std::ios::binary);
  data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (!pipeline_cache_data_is_for(data.data(), data.size(), props)) data.clear();
  return data;
}

PipelineCache::PipelineCache(VkDevice device, const VkPhysicalDeviceProperties& props, std::string path)
    : device_(device), props_(props), path_(std::move(path)) {
  const std::vector<char> data = read_cache_file(path_, props_);
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  ci.initialDataSize = data.size();
  ci.pInitialData = data.empty() ? nullptr : data.data();
  if (!data.empty() && vkCreatePipelineCache(device_, &ci, nullptr, &cache_) == VK_SUCCESS) {
    loaded_ = true;
    return;
  }
  ci.initialDataSize = 0, ci.pInitialData = nullptr;  // refused: start empty
  PYLON_VK_CHECK(vkCreatePipelineCache(device_, &ci, nullptr, &cache_));
}

PipelineCache::~PipelineCache() {
  save();
  vkDestroyPipelineCache(device_, cache_, nullptr);
}

// The file as it is now, not as it was at the start: another Context of this process or another
// process may have saved pipelines this one lacks since, so they are merged in before the write.
bool PipelineCache::save() {
  if (path_.empty()) return true;
  const std::vector<char> on_disk = read_cache_file(path_, props_);
  if (!on_disk.empty()) {
    VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    ci.initialDataSize = on_disk.size();
    ci.pInitialData = on_disk.data();
    VkPipelineCache theirs = VK_NULL_HANDLE;
    if (vkCreatePipelineCache(device_, &ci, nullptr, &theirs) == VK_SUCCESS) {
      vkMergePipelineCaches(device_, cache_, 1, &theirs);  // a failed merge leaves ours as it was
      vkDestroyPipelineCache(device_, theirs, nullptr);
    }
  }
  size_t size = 0;
  if (vkGetPipelineCacheData(device_, cache_, &size, nullptr) != VK_SUCCESS) return false;
  // Nothing the file does not hold already (a header alone is no cache).
  if (size <= std::max(on_disk.size(), sizeof(VkPipelineCacheHeaderVersionOne))) return true;
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
  return true;
}

}  // namespace pylon::vk
