// Checks for every Vulkan call, with the call's text, file and line. A failing call throws
// pylon::Error: a missing device, driver or memory is the user's to fix, not a bug.
#pragma once

#include <vulkan/vulkan.h>

#include "core/error.h"

namespace pylon::vk {

const char* result_name(VkResult r);  // "VK_ERROR_OUT_OF_DEVICE_MEMORY", ...

namespace detail {
[[noreturn]] void throw_vulkan(VkResult r, const char* call, const char* file, int line);
}  // namespace detail

}  // namespace pylon::vk

#define PYLON_VK_CHECK(call)                                                       \
  do {                                                                             \
    const VkResult pylon_vr_ = (call);                                             \
    if (pylon_vr_ != VK_SUCCESS)                                                   \
      ::pylon::vk::detail::throw_vulkan(pylon_vr_, #call, __FILE__, __LINE__);     \
  } while (0)
