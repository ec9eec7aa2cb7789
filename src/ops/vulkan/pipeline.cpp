#include "ops/vulkan/pipeline.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "ops/vulkan/check.h"
#include "ops/vulkan/spirv.h"

namespace pylon::vk {
namespace {
constexpr uint32_t kSetsPerPool = 512, kBindingsPerSet = 27;
constexpr uint32_t kMaxTimestamps = 4096;  // per command buffer; later commands go untimed

VkDescriptorType descriptor_type(VkFormat texel) {
  return texel == VK_FORMAT_UNDEFINED ? VK_DESCRIPTOR_TYPE_STORAGE_BUFFER : VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
}
}  // namespace

Kernel::Kernel(const Context& ctx, const std::string& name, uint32_t bindings, uint32_t push_bytes,
               std::vector<VkFormat> texels, const std::vector<uint32_t>& spec)
    : device_(ctx.device()), name_(name), bindings_(bindings), push_bytes_(push_bytes), texels_(std::move(texels)) {
  const auto code = spirv_module(name);
  PYLON_ASSERT(!code.empty(), "no SPIR-V module named ", name);
  PYLON_ASSERT(bindings <= kBindingsPerSet && texels_.size() <= bindings);
  try {
    std::vector<VkDescriptorSetLayoutBinding> b(bindings);
    for (uint32_t i = 0; i < bindings; ++i)
      b[i] = {i, descriptor_type(texel_format(i)), 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dl.bindingCount = bindings;
    dl.pBindings = b.data();
    PYLON_VK_CHECK(vkCreateDescriptorSetLayout(device_, &dl, nullptr, &set_layout_));
    const VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pl.setLayoutCount = 1;
    pl.pSetLayouts = &set_layout_;
    pl.pushConstantRangeCount = push_bytes ? 1 : 0;
    pl.pPushConstantRanges = &range;
    PYLON_VK_CHECK(vkCreatePipelineLayout(device_, &pl, nullptr, &layout_));
    VkShaderModuleCreateInfo sm{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    sm.codeSize = code.size() * 4;
    sm.pCode = code.data();
    PYLON_VK_CHECK(vkCreateShaderModule(device_, &sm, nullptr, &module_));
    VkComputePipelineCreateInfo cp{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    cp.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    cp.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cp.stage.module = module_;
    cp.stage.pName = "main";
    std::vector<VkSpecializationMapEntry> entries(spec.size());
    for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4, 4};
    const VkSpecializationInfo si{static_cast<uint32_t>(spec.size()), entries.data(), spec.size() * 4, spec.data()};
    if (!spec.empty()) cp.stage.pSpecializationInfo = &si;
    cp.layout = layout_;
    if (ctx.info().pipeline_stats) cp.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    PYLON_VK_CHECK(vkCreateComputePipelines(device_, ctx.pipeline_cache(), 1, &cp, nullptr, &pipeline_));
    if (ctx.info().pipeline_stats) print_statistics(spec);
  } catch (...) {
    destroy();
    throw;
  }
}

Kernel::~Kernel() { destroy(); }

void Kernel::print_statistics(const std::vector<uint32_t>& spec) const {
  const auto properties = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vkGetDeviceProcAddr(device_, "vkGetPipelineExecutablePropertiesKHR"));
  const auto statistics = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(device_, "vkGetPipelineExecutableStatisticsKHR"));
  if (!properties || !statistics) return;
  VkPipelineInfoKHR info{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  info.pipeline = pipeline_;
  uint32_t n = 0;
  if (properties(device_, &info, &n, nullptr) != VK_SUCCESS) return;
  std::string line = "vulkan pipeline " + name_ + " (spec";
  for (const uint32_t v : spec) line += " " + std::to_string(v);
  line += "):";
  for (uint32_t e = 0; e < n; ++e) {
    VkPipelineExecutableInfoKHR exe{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    exe.pipeline = pipeline_;
    exe.executableIndex = e;
    uint32_t m = 0;
    if (statistics(device_, &exe, &m, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> stats(m, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    if (statistics(device_, &exe, &m, stats.data()) != VK_SUCCESS) continue;
    for (const auto& st : stats) {
      line += std::string(" ") + st.name + "=";
      switch (st.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: line += st.value.b32 ? "true" : "false"; break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: line += std::to_string(st.value.i64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: line += std::to_string(st.value.u64); break;
        default: line += std::to_string(st.value.f64); break;
      }
      line += ";";
    }
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

void Kernel::destroy() {
  if (pipeline_) vkDestroyPipeline(device_, pipeline_, nullptr);
  if (module_) vkDestroyShaderModule(device_, module_, nullptr);
  if (layout_) vkDestroyPipelineLayout(device_, layout_, nullptr);
  if (set_layout_) vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
  pipeline_ = VK_NULL_HANDLE, module_ = VK_NULL_HANDLE, layout_ = VK_NULL_HANDLE, set_layout_ = VK_NULL_HANDLE;
}

const Kernel& KernelCache::get(const std::string& name, uint32_t bindings, uint32_t push_bytes,
                               const std::vector<VkFormat>& texels, const std::vector<uint32_t>& spec) {
  std::string key = name;
  for (uint32_t v : spec) key += " " + std::to_string(v);
  auto& k = kernels_[key];
  if (!k) k = std::make_unique<Kernel>(ctx_, name, bindings, push_bytes, texels, spec);
  bool same = k->bindings() == bindings && k->push_bytes() == push_bytes;
  for (size_t i = 0; i < bindings; ++i)
    same = same && k->texel_format(i) == (i < texels.size() ? texels[i] : VK_FORMAT_UNDEFINED);
  PYLON_ASSERT(same, "kernel ", name, " asked for with another signature");
  return *k;
}

Recorder::Recorder(Context& ctx, GpuTimes* times, bool reusable) : ctx_(ctx), reusable_(reusable) {
  if (times && ctx.info().timestamp_ns > 0) {
    VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = kMaxTimestamps;
    PYLON_VK_CHECK(vkCreateQueryPool(ctx.device(), &qi, nullptr, &queries_));
    times_ = times;
  }
  begin();
}

Recorder::~Recorder() {
  if (cb_) vkFreeCommandBuffers(ctx_.device(), ctx_.command_pool(), 1, &cb_);
  for (VkBufferView v : views_) vkDestroyBufferView(ctx_.device(), v, nullptr);
  if (queries_) vkDestroyQueryPool(ctx_.device(), queries_, nullptr);
  for (VkDescriptorPool p : pools_) vkDestroyDescriptorPool(ctx_.device(), p, nullptr);
}

void Recorder::begin() {
  cb_ = ctx_.begin_commands(!reusable_);
  for (VkDescriptorPool p : pools_) PYLON_VK_CHECK(vkResetDescriptorPool(ctx_.device(), p, 0));
  for (VkBufferView v : views_) vkDestroyBufferView(ctx_.device(), v, nullptr);  // the last run has ended
  views_.clear();
  pool_ = 0;
  labels_.clear();
  if (times_) {
    vkCmdResetQueryPool(cb_, queries_, 0, kMaxTimestamps);
    vkCmdWriteTimestamp(cb_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, 0);
  }
}

void Recorder::stamp(const std::string& label) {
  if (!times_ || labels_.size() + 1 >= kMaxTimestamps) return;
  labels_.push_back(label);
  vkCmdWriteTimestamp(cb_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, static_cast<uint32_t>(labels_.size()));
}

void Recorder::collect_times() {
  if (!times_ || labels_.empty()) return;
  std::vector<uint64_t> t(labels_.size() + 1);
  PYLON_VK_CHECK(vkGetQueryPoolResults(ctx_.device(), queries_, 0, static_cast<uint32_t>(t.size()),
                                       t.size() * 8, t.data(), 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  const uint32_t bits = ctx_.info().timestamp_bits;
  const uint64_t mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
  const double tick = ctx_.info().timestamp_ns * 1e-9;
  for (size_t i = 0; i < labels_.size(); ++i) {
    GpuTimes::Entry& e = times_->by_kernel[labels_[i]];
    e.seconds += static_cast<double>((t[i + 1] - t[i]) & mask) * tick;
    ++e.count;
  }
  times_->total += static_cast<double>((t.back() - t.front()) & mask) * tick;
  ++times_->runs;
}

VkDescriptorSet Recorder::allocate_set(const Kernel& k) {
  for (;; ++pool_) {
    if (pool_ == pools_.size()) {
      const VkDescriptorPoolSize sizes[2] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kBindingsPerSet},
                                             {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, kSetsPerPool * 2}};
      VkDescriptorPoolCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
      ci.maxSets = kSetsPerPool;
      ci.poolSizeCount = ctx_.info().texel_reads ? 2 : 1;
      ci.pPoolSizes = sizes;
      VkDescriptorPool p;
      PYLON_VK_CHECK(vkCreateDescriptorPool(ctx_.device(), &ci, nullptr, &p));
      pools_.push_back(p);
    }
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = pools_[pool_];
    ai.descriptorSetCount = 1;
    const VkDescriptorSetLayout layout = k.set_layout();
    ai.pSetLayouts = &layout;
    VkDescriptorSet set;
    const VkResult r = vkAllocateDescriptorSets(ctx_.device(), &ai, &set);
    if (r == VK_SUCCESS) return set;
    if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) PYLON_VK_CHECK(r);
  }
}

void Recorder::dispatch(const Kernel& k, const std::vector<BufferView>& buffers, const void* push,
                        uint32_t gx, uint32_t gy, uint32_t gz) {
  PYLON_ASSERT(buffers.size() == k.bindings(), k.name(), ": ", buffers.size(), " buffers for ",
               k.bindings(), " bindings");
  PYLON_ASSERT(!ended_, "a replayed recording cannot grow");
  if (gx == 0 || gy == 0 || gz == 0) return;
  const VkDescriptorSet set = allocate_set(k);
  std::vector<VkDescriptorBufferInfo> infos(buffers.size());
  std::vector<VkBufferView> views(buffers.size(), VK_NULL_HANDLE);
  std::vector<VkWriteDescriptorSet> writes(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferView& v = buffers[i];
    PYLON_ASSERT(v.buffer && *v.buffer, k.name(), ": binding ", i, " has no buffer");
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstSet = set;
    writes[i].dstBinding = static_cast<uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = descriptor_type(k.texel_format(i));
    if (k.texel_format(i) != VK_FORMAT_UNDEFINED) {
      views[i] = texel_view(v, k.texel_format(i));
      writes[i].pTexelBufferView = &views[i];
    } else {
      infos[i] = {v.buffer->handle(), v.offset, v.size ? v.size : VK_WHOLE_SIZE};
      writes[i].pBufferInfo = &infos[i];
    }
  }
  vkUpdateDescriptorSets(ctx_.device(), static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
  vkCmdBindPipeline(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, k.pipeline());
  vkCmdBindDescriptorSets(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, k.layout(), 0, 1, &set, 0, nullptr);
  if (k.push_bytes()) vkCmdPushConstants(cb_, k.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, k.push_bytes(), push);
  vkCmdDispatch(cb_, gx, gy, gz);
  ++dispatches_;
  compute_barrier();
  stamp(next_label_.empty() ? k.name() : next_label_);
  next_label_.clear();
}

// A view of the 16-byte runs that cover v (the last may reach past v: buffers are allocated in
// whole 16-byte texels, Context::make_buffer; imported ones in whole pages) as texels of `format`
// (16 bytes, or 4 for R32), kept until the recording is begun again or destroyed.
VkBufferView Recorder::texel_view(const BufferView& v, VkFormat format) {
  const DeviceInfo& info = ctx_.info();
  PYLON_ASSERT(info.texel_reads, "texel reads on ", info.name, ", which does not offer them");
  const VkDeviceSize size = v.size ? v.size : v.buffer->size() - v.offset;
  const VkDeviceSize texels = std::max<VkDeviceSize>((size + 15) / 16, 1);
  const VkDeviceSize elements = format == VK_FORMAT_R32_UINT ? 4 * texels : texels;
  PYLON_CHECK(elements <= info.max_texels, "Vulkan: a texel view of ", elements, " elements exceeds ", info.name,
              "'s maxTexelBufferElements ", info.max_texels);
  PYLON_ASSERT(v.offset % std::max<uint64_t>(info.texel_offset_alignment, 1) == 0 &&
                   v.offset + texels * 16 <= (v.buffer->size() + 15) / 16 * 16,
               "a texel view at byte ", v.offset, " of a ", v.buffer->size(), "-byte buffer");
  VkBufferViewCreateInfo ci{VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO};
  ci.buffer = v.buffer->handle();
  ci.format = format;
  ci.offset = v.offset;
  ci.range = texels * 16;
  VkBufferView view;
  PYLON_VK_CHECK(vkCreateBufferView(ctx_.device(), &ci, nullptr, &view));
  views_.push_back(view);
  return view;
}

void Recorder::compute_barrier() {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  vkCmdPipelineBarrier(cb_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                       nullptr, 0, nullptr);
}

void Recorder::end_barrier() {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cb_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                       0, 1, &mb, 0, nullptr, 0, nullptr);
}

void Recorder::replay() {
  PYLON_ASSERT(reusable_, "replay() needs a reusable recorder");
  if (!ended_) {
    end_barrier();
    PYLON_VK_CHECK(vkEndCommandBuffer(cb_));
  }
  ended_ = true;
  ctx_.submit_ended_and_wait(cb_);
  collect_times();
}

void Recorder::run() {
  PYLON_ASSERT(!reusable_, "a reusable recorder is replay()ed");
  end_barrier();
  VkCommandBuffer cb = std::exchange(cb_, VK_NULL_HANDLE);
  ctx_.submit_and_wait(cb);
  collect_times();
  begin();
}

}  // namespace pylon::vk
