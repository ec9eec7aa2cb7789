// The SPIR-V modules compiled from shaders/*.comp at build time and embedded in the library.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace pylon::vk {

// The module built from shaders/<name>.comp; empty when there is none (e.g. coopmat left out).
std::span<const uint32_t> spirv_module(std::string_view name);

}  // namespace pylon::vk
