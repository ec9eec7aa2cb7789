// Token files (DESIGN §2): raw little-endian uint16 (nanoGPT .bin) by default, or uint32; or the
// llm.c header form (256 int32: magic 20240520, version 1 = uint16 / 2 = uint32, token count)
// which is detected. Read through mmap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/mapped_file.h"

namespace pylon {

enum class TokenWidth { automatic, u16, u32 };

TokenWidth parse_token_width(const std::string& text);  // "auto", "u16", "u32"

class TokenFile {
 public:
  // `automatic`: llm.c header if present, else uint32 when the name ends in ".u32", else uint16.
  // Throws pylon::Error for a missing/empty file, a size that is not a multiple of the width, or
  // a header whose count disagrees with the file size.
  explicit TokenFile(const std::string& path, TokenWidth width = TokenWidth::automatic);

  const std::string& path() const { return file_.path(); }
  int64_t size() const { return count_; }  // number of tokens
  int bytes_per_token() const { return width_ == TokenWidth::u32 ? 4 : 2; }
  uint32_t operator[](int64_t i) const;    // 0 <= i < size()
  // Throws pylon::Error naming the file, the first position and the id if any id >= vocab.
  void check_vocab(int vocab) const;

 private:
  MappedFile file_;
  TokenWidth width_ = TokenWidth::u16;
  const std::byte* tokens_ = nullptr;
  int64_t count_ = 0;
};

// Writes atomically; u16 requires every id < 65536 (throws pylon::Error otherwise). u16 is written
// raw (nanoGPT); u32 with the llm.c header (version 2), so that any reader finds the width.
// `automatic` picks u16 when every id fits.
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, TokenWidth width);

}  // namespace pylon
