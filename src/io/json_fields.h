// Typed reads of a JSON document's fields with one-line errors that name the file and the field
// ("FILE: config.dim = 0 is out of range"): for the headers of Pylon's files.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace pylon {

// A text from a file as a JSON string literal (control characters escaped, bad UTF-8 replaced), so
// that a message naming it stays one line.
inline std::string json_quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

class JsonFields {
 public:
  using json = nlohmann::json;
  explicit JsonFields(std::string path) : path_(std::move(path)) {}

  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw Error(detail::concat(path_, ": ", args...));
  }
  // obj[key]; `where` names obj in messages ("config", "tensor \"x\"").
  const json& field(const json& obj, const char* key, const std::string& where) const {
    if (!obj.is_object() || !obj.contains(key)) fail(where, " has no \"", key, "\"");
    return obj.at(key);
  }
  uint64_t u64(const json& obj, const char* key, const std::string& where) const {
    const json& v = field(obj, key, where);
    if (!v.is_number_unsigned()) fail(where, ".", key, " is not a non-negative integer");
    return v.get<uint64_t>();
  }
  // An integer in [1, 2^30].
  int positive_int(const json& obj, const char* key, const std::string& where) const {
    const uint64_t v = u64(obj, key, where);
    if (v == 0 || v > (1u << 30)) fail(where, ".", key, " = ", v, " is out of range");
    return static_cast<int>(v);
  }
  float number(const json& obj, const char* key, const std::string& where) const {
    const json& v = field(obj, key, where);
    if (!v.is_number()) fail(where, ".", key, " is not a number");
    const double d = v.get<double>();
    if (!(std::fabs(d) <= FLT_MAX)) fail(where, ".", key, " = ", d, " is out of a 32-bit float's range");
    return static_cast<float>(d);
  }
  // A number > 0 (an eps, a theta): zero, negative or NaN is an error naming the field.
  float positive_number(const json& obj, const char* key, const std::string& where) const {
    const float v = number(obj, key, where);
    if (!(v > 0)) fail(where, ".", key, " = ", v, " must be positive");
    return v;
  }
  std::string text(const json& obj, const char* key, const std::string& where) const {
    const json& v = field(obj, key, where);
    if (!v.is_string()) fail(where, ".", key, " is not a string");
    return v.get<std::string>();
  }

 private:
  std::string path_;
};

}  // namespace pylon
