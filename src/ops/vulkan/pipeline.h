// Compute pipelines built from the embedded SPIR-V, and a recorder that binds storage buffers and
// push constants, dispatches, places barriers and runs the whole command buffer at once.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ops/vulkan/context.h"
#include "ops/vulkan/gpu_times.h"

namespace pylon::vk {

// One shader: `bindings` buffers at binding 0..bindings-1, storage buffers except where `texels`
// gives a format (a uniform texel buffer of that format; texels may be shorter than bindings),
// `push_bytes` of push constants, and `spec[i]` for its specialization constant i (constant_id).
// Move-only owner of the layouts and the pipeline.
class Kernel {
 public:
  Kernel(const Context& ctx, const std::string& name, uint32_t bindings, uint32_t push_bytes,
         std::vector<VkFormat> texels = {}, const std::vector<uint32_t>& spec = {});
  ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  const std::string& name() const { return name_; }
  uint32_t bindings() const { return bindings_; }
  uint32_t push_bytes() const { return push_bytes_; }
  // Binding i's texel format, or VK_FORMAT_UNDEFINED for a storage buffer.
  VkFormat texel_format(size_t i) const { return i < texels_.size() ? texels_[i] : VK_FORMAT_UNDEFINED; }
  VkPipeline pipeline() const { return pipeline_; }
  VkPipelineLayout layout() const { return layout_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }

 private:
  void destroy();
  void print_statistics(const std::vector<uint32_t>& spec) const;  // DeviceInfo::pipeline_stats
  VkDevice device_;
  std::string name_;
  uint32_t bindings_, push_bytes_;
  std::vector<VkFormat> texels_;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkShaderModule module_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
};

// The kernels of one context, built on first use: one pipeline per (name, specialization).
class KernelCache {
 public:
  explicit KernelCache(const Context& ctx) : ctx_(ctx) {}
  const Kernel& get(const std::string& name, uint32_t bindings, uint32_t push_bytes,
                    const std::vector<VkFormat>& texels = {}, const std::vector<uint32_t>& spec = {});

 private:
  const Context& ctx_;
  std::map<std::string, std::unique_ptr<Kernel>> kernels_;
};

// Records dispatches into one command buffer; run() submits it and waits. Every dispatch is
// followed by a compute-to-compute barrier (the ops of a forward depend on each other in turn), the
// whole by one to the host.
// With a GpuTimes sink (and a device with timestamps), a timestamp follows every command and run()
// adds each command's device time to the sink under its kernel's name. A reusable recorder is
// recorded once and then replay()ed: the same commands, descriptor sets and barriers each time, on
// whatever the bound buffers hold then (a decode step: the token and position live in buffers).
class Recorder {
 public:
  explicit Recorder(Context& ctx, GpuTimes* times = nullptr, bool reusable = false);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  void dispatch(const Kernel& k, const std::vector<BufferView>& buffers, const void* push,
                uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1);
  template <typename Push>
  void dispatch(const Kernel& k, const std::vector<BufferView>& buffers, const Push& push,
                uint32_t gx, uint32_t gy = 1, uint32_t gz = 1) {
    static_assert(sizeof(Push) <= 128, "push constants: 128 bytes is the guaranteed maximum");
    dispatch(k, buffers, static_cast<const void*>(&push), gx, gy, gz);
  }
  // The name the next dispatch's device time is filed under (else its kernel's name).
  void label_next(std::string label) { next_label_ = std::move(label); }
  // Submits, waits, and starts a fresh command buffer for what comes next (not when reusable).
  void run();
  // Reusable only: ends the recording on first use (nothing can be added after), submits, waits.
  void replay();
  int dispatches() const { return dispatches_; }

 private:
  void begin();
  void compute_barrier();  // compute writes before -> compute reads and writes after
  void end_barrier();      // compute writes before -> later commands (downloads) and the host
  void stamp(const std::string& label);  // a timestamp after the last command, when timing
  void collect_times();                  // after a run: the timestamps into times_
  VkDescriptorSet allocate_set(const Kernel& k);
  VkBufferView texel_view(const BufferView& v, VkFormat format);  // kept until the next begin()
  Context& ctx_;
  GpuTimes* times_ = nullptr;
  bool reusable_ = false, ended_ = false;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  std::vector<std::string> labels_;  // label of timestamp i + 1 (timestamp 0 starts the buffer)
  std::string next_label_;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> pools_;
  size_t pool_ = 0;  // the pool being allocated from
  std::vector<VkBufferView> views_;  // texel views of this recording
  int dispatches_ = 0;
};

}  // namespace pylon::vk
