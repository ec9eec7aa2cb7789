// Instance, device selection, queue, memory types and buffers.
#include "ops/vulkan/context.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>

#include "ops/vulkan/check.h"
#include "ops/vulkan/spirv.h"

namespace pylon::vk {
namespace {

constexpr VkDeviceSize kStagingBytes = 64ull << 20;

bool has_extension(const std::vector<VkExtensionProperties>& list, const char* name) {
  return std::any_of(list.begin(), list.end(),
                     [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

// The device's support for the features of `f` (its sType set), written into f.
template <typename Features>
Features& query_features(VkPhysicalDevice d, Features& f) {
  VkPhysicalDeviceFeatures2 query{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  query.pNext = &f;
  vkGetPhysicalDeviceFeatures2(d, &query);
  f.pNext = nullptr;
  return f;
}
// f joins the features enabled at device creation.
template <typename Features>
void chain(VkPhysicalDeviceFeatures2& features, Features& f) {
  f.pNext = features.pNext;
  features.pNext = &f;
}

std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice d) {
  uint32_t n = 0;
  PYLON_VK_CHECK(vkEnumerateDeviceExtensionProperties(d, nullptr, &n, nullptr));
  std::vector<VkExtensionProperties> list(n);
  PYLON_VK_CHECK(vkEnumerateDeviceExtensionProperties(d, nullptr, &n, list.data()));
  return list;
}

// fp16 A/B, C and result of type `acc`, 16x16x16, subgroup scope: the shape shaders/gemm_coopmat.comp
// uses (acc fp32; fp16 only in coopmat_peak.comp's variant).
// (Headers older than 1.3.255 lack the extension: then the build has no coopmat path.)
#if defined(VK_KHR_cooperative_matrix) && PYLON_HAVE_VULKAN_COOPMAT
bool supports_coopmat_f16(VkInstance instance, VkPhysicalDevice d, VkComponentTypeKHR acc) {
  auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR>(
      vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
  if (!get) return false;
  uint32_t n = 0;
  if (get(d, &n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkCooperativeMatrixPropertiesKHR> props(n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR});
  if (get(d, &n, props.data()) != VK_SUCCESS) return false;
  for (const auto& p : props)
    if (p.MSize == 16 && p.NSize == 16 && p.KSize == 16 && p.AType == VK_COMPONENT_TYPE_FLOAT16_KHR &&
        p.BType == VK_COMPONENT_TYPE_FLOAT16_KHR && p.CType == acc && p.ResultType == acc &&
        p.scope == VK_SCOPE_SUBGROUP_KHR)
      return true;
  return false;
}
#define PYLON_VK_COOPMAT_BUILD 1
#endif

// VK_NV_cooperative_matrix2 (gemm_coopmat2.comp): fp16 A/B, fp32 C and result at workgroup scope
// for a workgroup of `invocations`; its M, N, K granularities, or nullopt. (Headers older than
// 1.4.304 lack the extension: then the build has no coopmat2 path.)
#if defined(VK_NV_cooperative_matrix2) && PYLON_HAVE_VULKAN_COOPMAT2 && PYLON_VK_COOPMAT_BUILD
std::optional<std::array<uint32_t, 3>> coopmat2_granularity(VkInstance instance, VkPhysicalDevice d,
                                                            uint32_t invocations) {
  auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV>(
      vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV"));
  if (!get) return std::nullopt;
  uint32_t n = 0;
  if (get(d, &n, nullptr) != VK_SUCCESS) return std::nullopt;
  std::vector<VkCooperativeMatrixFlexibleDimensionsPropertiesNV> props(
      n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV});
  if (get(d, &n, props.data()) != VK_SUCCESS) return std::nullopt;
  for (const auto& p : props)
    if (p.AType == VK_COMPONENT_TYPE_FLOAT16_KHR && p.BType == VK_COMPONENT_TYPE_FLOAT16_KHR &&
        p.CType == VK_COMPONENT_TYPE_FLOAT32_KHR && p.ResultType == VK_COMPONENT_TYPE_FLOAT32_KHR &&
        !p.saturatingAccumulation && p.scope == VK_SCOPE_WORKGROUP_KHR && p.workgroupInvocations == invocations)
      return std::array<uint32_t, 3>{p.MGranularity, p.NGranularity, p.KGranularity};
  return std::nullopt;
}
#define PYLON_VK_COOPMAT2_BUILD 1
#endif

}  // namespace

const char* DeviceInfo::type_name() const {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

// ---- Buffer ----

Buffer::~Buffer() { release(); }
Buffer::Buffer(Buffer&& o) noexcept { *this = std::move(o); }
Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    device_ = std::exchange(o.device_, VK_NULL_HANDLE);
    buffer_ = std::exchange(o.buffer_, VK_NULL_HANDLE);
    memory_ = std::exchange(o.memory_, VK_NULL_HANDLE);
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, nullptr);
  }
  return *this;
}
void Buffer::release() {
  if (!device_) return;
  if (buffer_) vkDestroyBuffer(device_, buffer_, nullptr);
  if (memory_) vkFreeMemory(device_, memory_, nullptr);  // unmaps too
  device_ = VK_NULL_HANDLE, buffer_ = VK_NULL_HANDLE, memory_ = VK_NULL_HANDLE, mapped_ = nullptr;
}

// ---- Context ----

// One VkInstance per process, made on first use and never destroyed (a failure is not kept: the
// next Context tries again). On the H200's NVIDIA driver, creating instances again after a Context
// constructor had thrown (device index out of range) failed with VK_ERROR_INCOMPATIBLE_DRIVER;
// a single instance also spares each Context the loader's start-up. Destroying it from a static
// destructor crashed every process at exit there (SIGSEGV after a clean run): the driver's own
// exit handlers, registered when the instance was made, run first. The OS reclaims it instead.
static VkInstance process_instance() {
  static std::mutex mutex;
  static struct Holder {
    VkInstance instance = VK_NULL_HANDLE;
  } holder;
  const std::lock_guard<std::mutex> lock(mutex);
  if (holder.instance) return holder.instance;
  uint32_t n_ext = 0;
  const VkResult loader = vkEnumerateInstanceExtensionProperties(nullptr, &n_ext, nullptr);
  PYLON_CHECK(loader == VK_SUCCESS, "Vulkan: no usable loader or driver (", result_name(loader), ")");
  std::vector<VkExtensionProperties> inst_ext(n_ext);
  PYLON_VK_CHECK(vkEnumerateInstanceExtensionProperties(nullptr, &n_ext, inst_ext.data()));
  std::vector<const char*> enable;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  // MoltenVK (Apple) is a portability implementation: listed only when the instance asks.
  if (has_extension(inst_ext, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    enable.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    ici.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "pylon";
  // 1.3 where the loader has it (gemm_coopmat2's SPIR-V 1.6 needs a 1.3 device), else 1.2.
  uint32_t loader_version = VK_API_VERSION_1_0;
  if (vkEnumerateInstanceVersion(&loader_version) != VK_SUCCESS) loader_version = VK_API_VERSION_1_0;
  app.apiVersion = loader_version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2;
  ici.pApplicationInfo = &app;
  ici.enabledExtensionCount = static_cast<uint32_t>(enable.size());
  ici.ppEnabledExtensionNames = enable.data();
  const VkResult created = vkCreateInstance(&ici, nullptr, &holder.instance);
  if (created != VK_SUCCESS) holder.instance = VK_NULL_HANDLE;
  PYLON_CHECK(created == VK_SUCCESS, "Vulkan: cannot create an instance (", result_name(created),
              "): no usable Vulkan driver");
  return holder.instance;
}

Context::Context(const ContextOptions& options) {
  fail_allocation_ = options.fail_allocation;
  instance_ = process_instance();

  try {
    uint32_t n_dev = 0;
    PYLON_VK_CHECK(vkEnumeratePhysicalDevices(instance_, &n_dev, nullptr));
    std::vector<VkPhysicalDevice> devices(n_dev);
    PYLON_VK_CHECK(vkEnumeratePhysicalDevices(instance_, &n_dev, devices.data()));
    PYLON_CHECK(n_dev > 0, "Vulkan: no device found");
    int pick = options.device_index;
    if (pick < 0) {
      pick = 0;
      for (uint32_t i = 0; i < n_dev; ++i) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(devices[i], &p);
        if (p.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU) {
          pick = static_cast<int>(i);
          break;
        }
      }
    }
    PYLON_CHECK(pick < static_cast<int>(n_dev), "Vulkan: device ", pick, " does not exist (", n_dev,
                " found)");
    physical_ = devices[static_cast<size_t>(pick)];

    VkPhysicalDeviceExternalMemoryHostPropertiesEXT host_props{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
    VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    subgroup.pNext = &m3;
    const std::vector<VkExtensionProperties> dev_ext = device_extensions(physical_);
    info_.host_import = has_extension(dev_ext, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    if (info_.host_import) m3.pNext = &host_props;
    VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
    if (has_extension(dev_ext, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) {  // properties only: not enabled
      sm.pNext = subgroup.pNext;
      subgroup.pNext = &sm;
    }
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props.pNext = &subgroup;
    vkGetPhysicalDeviceProperties2(physical_, &props);
    info_.name = props.properties.deviceName;
    info_.type = props.properties.deviceType;
    info_.subgroup_size = subgroup.subgroupSize;
    info_.max_storage_range = props.properties.limits.maxStorageBufferRange;
    info_.max_allocation = m3.maxMemoryAllocationSize;
    info_.storage_offset_alignment = props.properties.limits.minStorageBufferOffsetAlignment;
    info_.import_alignment = info_.host_import ? host_props.minImportedHostPointerAlignment : 0;
    info_.max_buffer_bytes = std::min(info_.max_storage_range, info_.max_allocation);
    info_.compute_units = sm.shaderSMCount;
    info_.max_shared_bytes = props.properties.limits.maxComputeSharedMemorySize;
    info_.max_storage_buffers = props.properties.limits.maxPerStageDescriptorStorageBuffers;
    if (info_.type == VK_PHYSICAL_DEVICE_TYPE_CPU) {
      bool formats = true;
      for (const VkFormat f : {VK_FORMAT_R32G32B32A32_UINT, VK_FORMAT_R32G32B32A32_SFLOAT, VK_FORMAT_R32_UINT}) {
        VkFormatProperties fp{};
        vkGetPhysicalDeviceFormatProperties(physical_, f, &fp);
        formats = formats && (fp.bufferFeatures & VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT);
      }
      info_.texel_reads = formats;
      info_.texel_offset_alignment = props.properties.limits.minTexelBufferOffsetAlignment;
      info_.max_texels = props.properties.limits.maxTexelBufferElements;
    }
    if (options.max_buffer_bytes) info_.max_buffer_bytes = std::min(info_.max_buffer_bytes, options.max_buffer_bytes);
    const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    PYLON_CHECK((subgroup.supportedOperations & need) == need &&
                    (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT),
                "Vulkan: device ", info_.name, " lacks subgroup arithmetic in compute shaders");

    bool coopmat = false;
#if PYLON_VK_COOPMAT_BUILD
    coopmat = options.allow_coopmat && has_extension(dev_ext, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME) &&
              supports_coopmat_f16(instance_, physical_, VK_COMPONENT_TYPE_FLOAT32_KHR) &&
              !spirv_module("gemm_coopmat").empty();
    info_.coopmat_f16_accumulate = coopmat && supports_coopmat_f16(instance_, physical_, VK_COMPONENT_TYPE_FLOAT16_KHR);
#else
    (void)options.allow_coopmat;
#endif

    uint32_t n_fam = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n_fam, nullptr);
    std::vector<VkQueueFamilyProperties> fams(n_fam);
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n_fam, fams.data());
    bool found = false;
    for (uint32_t i = 0; i < n_fam && !found; ++i)
      if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) queue_family_ = i, found = true;
    PYLON_CHECK(found, "Vulkan: device ", info_.name, " has no compute queue");
    if (fams[queue_family_].timestampValidBits > 0 && props.properties.limits.timestampPeriod > 0) {
      info_.timestamp_ns = props.properties.limits.timestampPeriod;
      info_.timestamp_bits = fams[queue_family_].timestampValidBits;
    }

    std::vector<const char*> dev_enable;
    if (has_extension(dev_ext, "VK_KHR_portability_subset")) dev_enable.push_back("VK_KHR_portability_subset");
    if (info_.host_import) {
      dev_enable.push_back(VK_KHR_EXTERNAL_MEMORY_EXTENSION_NAME);
      dev_enable.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    }
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
#if PYLON_VK_COOPMAT_BUILD
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR fcm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    if (coopmat) {
      f11.pNext = &f12;
      f12.pNext = &fcm;
      features.pNext = &f11;
      vkGetPhysicalDeviceFeatures2(physical_, &features);
      coopmat = fcm.cooperativeMatrix && f12.shaderFloat16 && f11.storageBuffer16BitAccess &&
                f12.vulkanMemoryModel;
      if (coopmat) {
        dev_enable.push_back(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
        features = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
        f11 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
        f12 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
        fcm = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
        f11.storageBuffer16BitAccess = VK_TRUE;
        f12.shaderFloat16 = VK_TRUE;
        f12.vulkanMemoryModel = VK_TRUE;
        f12.vulkanMemoryModelDeviceScope = VK_TRUE;
        fcm.cooperativeMatrix = VK_TRUE;
        f11.pNext = &f12;
        f12.pNext = &fcm;
        features.pNext = &f11;
      } else {
        features.pNext = nullptr;
      }
    }
#endif
    info_.coopmat = coopmat;
    info_.coopmat_f16_accumulate = info_.coopmat_f16_accumulate && coopmat;
#if PYLON_VK_COOPMAT2_BUILD
    // VK_NV_cooperative_matrix2 on top: workgroup scope, flexible sizes, tensor layouts and
    // per-element operations.
    VkPhysicalDeviceCooperativeMatrix2FeaturesNV fcm2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV};
    if (coopmat && options.allow_coopmat2 && props.properties.apiVersion >= VK_API_VERSION_1_3 &&
        has_extension(dev_ext, VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME) && !spirv_module("gemm_coopmat2").empty()) {
      query_features(physical_, fcm2);
      const auto granularity = coopmat2_granularity(instance_, physical_, 256);
      if (fcm2.cooperativeMatrixWorkgroupScope && fcm2.cooperativeMatrixFlexibleDimensions &&
          fcm2.cooperativeMatrixTensorAddressing && fcm2.cooperativeMatrixPerElementOperations && granularity) {
        VkPhysicalDeviceCooperativeMatrix2PropertiesNV p2{
            VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV};
        VkPhysicalDeviceProperties2 q2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
        q2.pNext = &p2;
        vkGetPhysicalDeviceProperties2(physical_, &q2);
        info_.coopmat2 = true;
        info_.coopmat2_granularity = *granularity;
        info_.coopmat2_reserved_shared = p2.cooperativeMatrixWorkgroupScopeReservedSharedMemory;
        dev_enable.push_back(VK_NV_COOPERATIVE_MATRIX_2_EXTENSION_NAME);
        fcm2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV};
        fcm2.cooperativeMatrixWorkgroupScope = VK_TRUE;
        fcm2.cooperativeMatrixFlexibleDimensions = VK_TRUE;
        fcm2.cooperativeMatrixTensorAddressing = VK_TRUE;
        fcm2.cooperativeMatrixPerElementOperations = VK_TRUE;
        chain(features, fcm2);
      }
    }
#endif
    // Float atomic add on storage buffers (decode_layer's FFN adds its slices' sums into h).
    VkPhysicalDeviceShaderAtomicFloatFeaturesEXT atomic_float{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT};
    if (options.allow_float_atomics && has_extension(dev_ext, VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME))
      info_.float_atomic_add = query_features(physical_, atomic_float).shaderBufferFloat32AtomicAdd == VK_TRUE;
    if (info_.float_atomic_add) {
      dev_enable.push_back(VK_EXT_SHADER_ATOMIC_FLOAT_EXTENSION_NAME);
      atomic_float = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT};
      atomic_float.shaderBufferFloat32AtomicAdd = VK_TRUE;
      chain(features, atomic_float);  // after the coopmat features, if any
    }
    // 64-bit integers and buffer atomics (decode_layer hands q and k to the attention as tagged
    // 64-bit pairs). Vulkan 1.2 core; with the coopmat features' Vulkan12Features in the chain, set
    // there (the standalone struct may not join it).
    VkPhysicalDeviceShaderAtomicInt64Features atomic64{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_INT64_FEATURES};
    if (options.allow_int64_atomics && props.properties.apiVersion >= VK_API_VERSION_1_2) {
      VkPhysicalDeviceFeatures core{};
      vkGetPhysicalDeviceFeatures(physical_, &core);
      info_.int64_atomics = core.shaderInt64 && query_features(physical_, atomic64).shaderBufferInt64Atomics;
    }
    if (info_.int64_atomics) {
      features.features.shaderInt64 = VK_TRUE;
#if PYLON_VK_COOPMAT_BUILD
      if (coopmat) f12.shaderBufferInt64Atomics = VK_TRUE;
#endif
      if (!coopmat) {
        atomic64 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_INT64_FEATURES};
        atomic64.shaderBufferInt64Atomics = VK_TRUE;
        chain(features, atomic64);
      }
    }
    // The SM clock in shaders (decode_layer_timeline, a benchmark's).
    VkPhysicalDeviceShaderClockFeaturesKHR clock{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR};
    if (has_extension(dev_ext, VK_KHR_SHADER_CLOCK_EXTENSION_NAME))
      info_.shader_clock = query_features(physical_, clock).shaderSubgroupClock == VK_TRUE;
    if (info_.shader_clock) {
      dev_enable.push_back(VK_KHR_SHADER_CLOCK_EXTENSION_NAME);
      clock = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR};
      clock.shaderSubgroupClock = VK_TRUE;
      chain(features, clock);
    }
    // Compiler statistics of pipelines (a diagnostic, on request).
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR exec_props{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    if (options.pipeline_stats &&
        has_extension(dev_ext, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
      info_.pipeline_stats = true;
      dev_enable.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
      exec_props.pipelineExecutableInfo = VK_TRUE;
      chain(features, exec_props);
    }

    const float priority = 1.0f;
    VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueFamilyIndex = queue_family_;
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;
    VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    dci.pNext = features.pNext || features.features.shaderInt64 ? &features : nullptr;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    dci.enabledExtensionCount = static_cast<uint32_t>(dev_enable.size());
    dci.ppEnabledExtensionNames = dev_enable.data();
    PYLON_VK_CHECK(vkCreateDevice(physical_, &dci, nullptr, &device_));
    vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
    const VkPhysicalDeviceProperties& ids = props.properties;  // vendor, device, pipelineCacheUUID
    pipeline_cache_ = std::make_unique<PipelineCache>(
        device_, ids, pipeline_cache_path(options.pipeline_cache, ids.vendorID, ids.deviceID));
    vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);
    if (info_.host_import)
      get_host_pointer_properties_ = reinterpret_cast<PFN_vkGetMemoryHostPointerPropertiesEXT>(
          vkGetDeviceProcAddr(device_, "vkGetMemoryHostPointerPropertiesEXT"));

    VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
    pci.queueFamilyIndex = queue_family_;
    PYLON_VK_CHECK(vkCreateCommandPool(device_, &pci, nullptr, &pool_));
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    PYLON_VK_CHECK(vkCreateFence(device_, &fci, nullptr, &fence_));
  } catch (...) {
    destroy();
    throw;
  }
}

Context::~Context() { destroy(); }

void Context::destroy() {
  staging_ = Buffer();
  if (device_) {
    vkDeviceWaitIdle(device_);
    pipeline_cache_.reset();  // saved to its file
    if (fence_) vkDestroyFence(device_, fence_, nullptr);
    if (pool_) vkDestroyCommandPool(device_, pool_, nullptr);
    vkDestroyDevice(device_, nullptr);
  }
  // instance_ belongs to process_instance()
  device_ = VK_NULL_HANDLE, instance_ = VK_NULL_HANDLE, fence_ = VK_NULL_HANDLE, pool_ = VK_NULL_HANDLE;
}

VkResult Context::allocate(const VkMemoryAllocateInfo& info, VkDeviceMemory* memory) {
  if (++allocations_ == fail_allocation_) return VK_ERROR_OUT_OF_DEVICE_MEMORY;
  return vkAllocateMemory(device_, &info, nullptr, memory);
}

uint32_t Context::memory_type(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer) const {
  for (const VkMemoryPropertyFlags flags : {want | prefer, want})
    for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i)
      if ((bits & (1u << i)) && (memory_.memoryTypes[i].propertyFlags & flags) == flags) return i;
  PYLON_CHECK(false, "Vulkan: device ", info_.name, " has no memory type with flags ", want);
  return 0;
}

Buffer Context::make_buffer(VkDeviceSize size, MemoryKind kind) {
  PYLON_CHECK(size <= info_.max_allocation, "Vulkan: a buffer of ", size, " bytes exceeds ",
              info_.name, "'s maxMemoryAllocationSize ", info_.max_allocation);
  Buffer b;
  b.device_ = device_;
  b.size_ = size;
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = (std::max<VkDeviceSize>(size, 4) + 15) / 16 * 16;  // whole 16-byte texels (texel_reads)
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT | texel_usage();
  PYLON_VK_CHECK(vkCreateBuffer(device_, &bci, nullptr, &b.buffer_));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, b.buffer_, &req);
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.allocationSize = req.size;
  mai.memoryTypeIndex =
      kind == MemoryKind::device
          ? memory_type(req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0)
          : memory_type(req.memoryTypeBits,
                        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                        VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  PYLON_VK_CHECK(allocate(mai, &b.memory_));
  PYLON_VK_CHECK(vkBindBufferMemory(device_, b.buffer_, b.memory_, 0));
  const VkMemoryPropertyFlags flags = memory_.memoryTypes[mai.memoryTypeIndex].propertyFlags;
  if ((flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (flags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) {
    void* p = nullptr;
    PYLON_VK_CHECK(vkMapMemory(device_, b.memory_, 0, VK_WHOLE_SIZE, 0, &p));
    b.mapped_ = static_cast<std::byte*>(p);
  }
  return b;
}

Buffer Context::import_host(const void* ptr, VkDeviceSize size) {
  PYLON_CHECK(info_.host_import && get_host_pointer_properties_, "Vulkan: ", info_.name,
              " cannot import host memory (no VK_EXT_external_memory_host)");
  const auto handle = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  Buffer b;
  b.device_ = device_;
  b.size_ = size;
  VkExternalMemoryBufferCreateInfo ext{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  ext.handleTypes = handle;
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.pNext = &ext;
  bci.size = size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | texel_usage();
  PYLON_VK_CHECK(vkCreateBuffer(device_, &bci, nullptr, &b.buffer_));
  VkMemoryHostPointerPropertiesEXT hp{VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
  PYLON_VK_CHECK(get_host_pointer_properties_(device_, handle, ptr, &hp));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, b.buffer_, &req);
  VkImportMemoryHostPointerInfoEXT import{VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT};
  import.handleType = handle;
  import.pHostPointer = const_cast<void*>(ptr);
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.pNext = &import;
  mai.allocationSize = size;
  mai.memoryTypeIndex = memory_type(req.memoryTypeBits & hp.memoryTypeBits, 0, 0);
  PYLON_VK_CHECK(allocate(mai, &b.memory_));
  PYLON_VK_CHECK(vkBindBufferMemory(device_, b.buffer_, b.memory_, 0));
  return b;
}

VkCommandBuffer Context::begin_commands(bool one_time) {
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb;
  PYLON_VK_CHECK(vkAllocateCommandBuffers(device_, &ai, &cb));
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = one_time ? VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT : 0;
  PYLON_VK_CHECK(vkBeginCommandBuffer(cb, &bi));
  return cb;
}

void Context::submit_and_wait(VkCommandBuffer cb) {
  struct Free {
    VkDevice d;
    VkCommandPool p;
    VkCommandBuffer c;
    ~Free() { vkFreeCommandBuffers(d, p, 1, &c); }
  } free_cb{device_, pool_, cb};
  PYLON_VK_CHECK(vkEndCommandBuffer(cb));
  submit_ended_and_wait(cb);
}

void Context::submit_ended_and_wait(VkCommandBuffer cb) {
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  PYLON_VK_CHECK(vkQueueSubmit(queue_, 1, &si, fence_));
  // A GPU's short submissions (a decode step, ~1 ms) are polled for up to 2 ms before sleeping in
  // vkWaitForFences, whose wake-up adds tens of µs a token. CPU devices sleep at once: their
  // worker threads need the cores a poll would take.
  if (info_.type != VK_PHYSICAL_DEVICE_TYPE_CPU) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    VkResult r = vkGetFenceStatus(device_, fence_);
    while (r == VK_NOT_READY && std::chrono::steady_clock::now() < until) r = vkGetFenceStatus(device_, fence_);
    if (r != VK_NOT_READY) PYLON_VK_CHECK(r);
  }
  PYLON_VK_CHECK(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX));
  PYLON_VK_CHECK(vkResetFences(device_, 1, &fence_));
}

void Context::upload(const Buffer& dst, VkDeviceSize offset, const void* src, VkDeviceSize size) {
  PYLON_ASSERT(offset + size <= dst.size(), "upload past the end of a buffer");
  if (dst.mapped()) {
    std::memcpy(dst.mapped() + offset, src, size);
    return;
  }
  if (!staging_) staging_ = make_buffer(kStagingBytes, MemoryKind::host);
  for (VkDeviceSize done = 0; done < size; done += kStagingBytes) {
    const VkDeviceSize n = std::min(kStagingBytes, size - done);
    std::memcpy(staging_.mapped(), static_cast<const std::byte*>(src) + done, n);
    run_commands([&](VkCommandBuffer cb) {
      const VkBufferCopy region{0, offset + done, n};
      vkCmdCopyBuffer(cb, staging_.handle(), dst.handle(), 1, &region);
    });
  }
}

void Context::download(const Buffer& src, VkDeviceSize offset, void* dst, VkDeviceSize size) {
  PYLON_ASSERT(offset + size <= src.size(), "download past the end of a buffer");
  if (src.mapped()) {
    std::memcpy(dst, src.mapped() + offset, size);
    return;
  }
  if (!staging_) staging_ = make_buffer(kStagingBytes, MemoryKind::host);
  for (VkDeviceSize done = 0; done < size; done += kStagingBytes) {
    const VkDeviceSize n = std::min(kStagingBytes, size - done);
    run_commands([&](VkCommandBuffer cb) {
      const VkBufferCopy region{offset + done, 0, n};
      vkCmdCopyBuffer(cb, src.handle(), staging_.handle(), 1, &region);
    });
    std::memcpy(static_cast<std::byte*>(dst) + done, staging_.mapped(), n);
  }
}

}  // namespace pylon::vk
