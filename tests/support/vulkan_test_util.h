// Vulkan tests: a context on the first device, or a skip where no Vulkan device exists (CI
// without lavapipe, machines without a driver).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "core/error.h"
#include "ops/vulkan/context.h"

namespace pylon::testing {

inline std::unique_ptr<vk::Context> vulkan_context_or_null(const vk::ContextOptions& o = {}) {
  try {
    return std::make_unique<vk::Context>(o);
  } catch (const Error&) {
    return nullptr;
  }
}

// Whether a Vulkan device can be opened here (tests that make their own contexts skip without).
inline bool vulkan_available() { return vulkan_context_or_null() != nullptr; }

}  // namespace pylon::testing

// In a TEST body: declares `ctx` (a std::unique_ptr<vk::Context>) or skips the test.
#define PYLON_VULKAN_CONTEXT_OR_SKIP(ctx, ...)                                     \
  auto ctx = ::pylon::testing::vulkan_context_or_null(__VA_ARGS__);                \
  if (!ctx) GTEST_SKIP() << "no Vulkan device"
