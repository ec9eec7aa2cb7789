#include "core/env.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace pylon {

std::optional<std::string> env_text(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int64_t env_int(const char* name, int64_t fallback, int64_t min, int64_t max) {
  const std::optional<std::string> text = env_text(name);
  if (!text) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text->c_str(), &end, 10);
  std::string shown;  // one printable line
  for (const char ch : text->substr(0, 64)) shown += ch >= 0x20 && ch < 0x7f ? ch : '?';
  const bool leading_ok = (*text)[0] == '-' || ((*text)[0] >= '0' && (*text)[0] <= '9');  // strtoll skips spaces
  PYLON_CHECK(leading_ok && end && *end == '\0' && errno == 0 && v >= min && v <= max, "environment variable ", name, "='", shown,
              "': expected an integer from ", min, " to ", max);
  return v;
}

}  // namespace pylon
