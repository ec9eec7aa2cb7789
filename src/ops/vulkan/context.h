// The Vulkan device layer: instance (with portability enumeration, so MoltenVK devices are
// listed), one physical device and its compute queue, what it supports, and buffers (RAII,
// move-only) in device-local or host-visible memory or imported from host memory.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/vulkan/pipeline_cache.h"

namespace pylon::vk {

class Context;

// A VkBuffer with its own memory (or a view into imported host memory). Move-only.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  VkBuffer handle() const { return buffer_; }
  VkDeviceSize size() const { return size_; }
  // Host address of byte 0 when the memory is host-visible (mapped, coherent), else nullptr.
  std::byte* mapped() const { return mapped_; }
  explicit operator bool() const { return buffer_ != VK_NULL_HANDLE; }

 private:
  friend class Context;
  void release();
  VkDevice device_ = VK_NULL_HANDLE;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  VkDeviceSize size_ = 0;
  std::byte* mapped_ = nullptr;
};

// A range of a buffer, as bound to a shader's storage-buffer slot.
struct BufferView {
  const Buffer* buffer = nullptr;
  VkDeviceSize offset = 0, size = 0;  // size 0: to the end of the buffer
};

enum class MemoryKind { device, host };  // device-local (host-visible if it also is), host-visible

struct ContextOptions {
  int device_index = -1;  // -1: the first GPU, else the first device
  // Test hook: caps every storage binding (and so each weight chunk) below the device's limit, so
  // that splitting can be exercised on small models. 0: the device's limits.
  uint64_t max_buffer_bytes = 0;
  bool allow_coopmat = true;  // false: the plain GEMM even where coopmat runs
  bool allow_coopmat2 = true;  // false: VK_NV_cooperative_matrix2 left off (the coopmat GEMM serves)
  bool allow_float_atomics = true;  // test hook: false leaves VK_EXT_shader_atomic_float off
  bool allow_int64_atomics = true;  // test hook: false leaves shaderInt64 and 64-bit atomics off
  // The compiled pipelines' file (pipeline_cache.h: pipeline_cache_path): "" the default
  // ($PYLON_VK_PIPELINE_CACHE, else in the cache folder), "off" none, else this file.
  std::string pipeline_cache;
  // Test hook: the N-th device allocation (1-based) fails as out of device memory; 0: none.
  long fail_allocation = 0;
  // Benchmarks: print each pipeline's compiler statistics (registers, spills, shared memory) to
  // stderr where the driver has VK_KHR_pipeline_executable_properties.
  bool pipeline_stats = false;
};

struct DeviceInfo {
  std::string name;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t subgroup_size = 0;
  uint64_t max_storage_range = 0, max_allocation = 0, max_buffer_bytes = 0;  // last: min of limits
  uint64_t storage_offset_alignment = 0, import_alignment = 0;
  uint32_t compute_units = 0;  // streaming multiprocessors (VK_NV_shader_sm_builtins), 0: not known
  uint32_t max_shared_bytes = 0, max_storage_buffers = 0;  // per compute workgroup, per shader stage
  bool host_import = false;  // VK_EXT_external_memory_host
  // CPU devices: every buffer is also bindable as a uniform texel buffer of 16-byte texels (RGBA32
  // uint / float) or 4-byte ones (R32 uint), which llvmpipe reads through its sampler's gathers,
  // several times faster than its storage-buffer loads (vulkan_notes.md).
  bool texel_reads = false;
  uint64_t texel_offset_alignment = 0, max_texels = 0;
  bool coopmat = false;      // VK_KHR_cooperative_matrix fp16 16x16x16 -> fp32, and a shader for it
  bool coopmat_f16_accumulate = false;  // and fp16 -> fp16 (a benchmark's comparison: coopmat_peak.comp)
  // VK_NV_cooperative_matrix2 enabled and gemm_coopmat2 built: fp16 -> fp32 workgroup-scope
  // matrices for 256 invocations, their sizes multiples of these M, N, K granularities.
  bool coopmat2 = false;
  std::array<uint32_t, 3> coopmat2_granularity{};
  uint32_t coopmat2_reserved_shared = 0;  // shared memory bytes the driver keeps for their loads
  bool float_atomic_add = false;  // shaderBufferFloat32AtomicAdd (VK_EXT_shader_atomic_float), enabled
  bool int64_atomics = false;  // shaderInt64 and shaderBufferInt64Atomics, enabled: decode_layer's tagged q, k
  bool shader_clock = false;  // shaderSubgroupClock (VK_KHR_shader_clock), enabled: decode_layer's timeline
  // VK_KHR_pipeline_executable_properties enabled (env PYLON_VK_PIPELINE_STATS, a diagnostic): each
  // pipeline's compiler statistics (registers, spills, ...) printed to stderr when it is made.
  bool pipeline_stats = false;
  double timestamp_ns = 0;   // nanoseconds per timestamp tick on the compute queue; 0: no timestamps
  uint32_t timestamp_bits = 0;  // valid bits of a timestamp
  bool unified_memory() const {
    return type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU || type == VK_PHYSICAL_DEVICE_TYPE_CPU;
  }
  const char* type_name() const;
};

class Context {
 public:
  // Throws pylon::Error with one line: no loader or driver, no device, index out of range, device
  // without compute queue or subgroup arithmetic.
  explicit Context(const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& info() const { return info_; }
  VkDevice device() const { return device_; }
  VkQueue queue() const { return queue_; }
  VkCommandPool command_pool() const { return pool_; }
  VkPipelineCache pipeline_cache() const { return pipeline_cache_ ? pipeline_cache_->handle() : VK_NULL_HANDLE; }
  // The pipeline cache's file ("" none) and whether its data seeded this run's cache.
  const std::string& pipeline_cache_file() const { return pipeline_cache_->path(); }
  bool pipeline_cache_loaded() const { return pipeline_cache_->loaded(); }

  Buffer make_buffer(VkDeviceSize size, MemoryKind kind);
  // The usage bit that lets a buffer be bound as a uniform texel buffer where info().texel_reads.
  VkBufferUsageFlags texel_usage() const {
    return info_.texel_reads ? VkBufferUsageFlags{VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT} : VkBufferUsageFlags{0};
  }
  // Wraps host memory [ptr, ptr + size) without copying (VK_EXT_external_memory_host); ptr and
  // size must be multiples of info().import_alignment. Throws if the driver refuses it.
  Buffer import_host(const void* ptr, VkDeviceSize size);
  // Copies through a host-visible staging buffer when dst is not mapped.
  void upload(const Buffer& dst, VkDeviceSize offset, const void* src, VkDeviceSize size);
  void download(const Buffer& src, VkDeviceSize offset, void* dst, VkDeviceSize size);

  // Records with `record` into a fresh command buffer, submits it and waits for it.
  template <typename F>
  void run_commands(F&& record) {
    VkCommandBuffer cb = begin_commands();
    record(cb);
    submit_and_wait(cb);
  }
  VkCommandBuffer begin_commands(bool one_time = true);  // false: a buffer to submit many times
  void submit_and_wait(VkCommandBuffer cb);  // ends and frees cb
  void submit_ended_and_wait(VkCommandBuffer cb);  // cb already ended; it stays (resubmittable)

  // Every vkAllocateMemory goes through here: env PYLON_VK_FAIL_ALLOC=N makes the N-th one fail
  // with VK_ERROR_OUT_OF_DEVICE_MEMORY (tests inject allocation failures this way).
  VkResult allocate(const VkMemoryAllocateInfo& info, VkDeviceMemory* memory);

 private:
  void destroy();
  uint32_t memory_type(uint32_t type_bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer) const;

  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  std::unique_ptr<PipelineCache> pipeline_cache_;  // saved and destroyed before the device
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties memory_{};
  PFN_vkGetMemoryHostPointerPropertiesEXT get_host_pointer_properties_ = nullptr;
  DeviceInfo info_;
  long allocations_ = 0, fail_allocation_ = 0;
  Buffer staging_;
};

}  // namespace pylon::vk
