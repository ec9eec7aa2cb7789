// Environment variables: the one place Pylon's code reads them (docs/environment.md lists every
// one; tests/core/env_test.cpp keeps the two equal). A value that does not parse is a pylon::Error
// naming the variable and what it expected, never a silent default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pylon {

// The variable's text, or nullopt when it is unset or empty.
std::optional<std::string> env_text(const char* name);
// The variable as an integer in [min, max], `fallback` when unset or empty.
int64_t env_int(const char* name, int64_t fallback, int64_t min, int64_t max);

}  // namespace pylon
