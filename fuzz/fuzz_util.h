// What every fuzz target shares: a scratch folder for the readers that take a path, and the rule
// that pylon::Error (one line) is the expected answer to a bad input; anything else is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <unistd.h>

#include "core/error.h"

namespace pylon::fuzz {

// This process's scratch folder, made once and removed at exit (never destroyed before that).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path* dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pylon-fuzz-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) std::abort();
    auto* made = new std::filesystem::path(tmpl);
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); });
    return made;
  }();
  return *dir;
}

// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::filesystem::path path = scratch_dir() / name;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) std::abort();
  return path.string();
}

// Runs `parse`; a pylon::Error is a clean refusal and must be one line. Any other exception
// escapes to libFuzzer (std::terminate: a finding), as do crashes and sanitizer reports.
template <typename Fn>
void expect_clean(Fn&& parse) {
  try {
    parse();
  } catch (const pylon::Error& e) {
    if (std::string_view(e.what()).find('\n') != std::string_view::npos) std::abort();  // not one line
  }
}

// Splits a fuzz input at its first NUL byte: (before, after); after is empty when there is none.
inline std::pair<std::string_view, std::string_view> split_at_nul(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t at = all.find('\0');
  if (at == std::string_view::npos) return {all, {}};
  return {all.substr(0, at), all.substr(at + 1)};
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace pylon::fuzz
