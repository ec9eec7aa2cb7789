// Token files: width detection (llm.c header, ".u32" name, else uint16), reading and writing.
#include "io/token_file.h"

#include <bit>
#include <cstring>

#include "core/error.h"
#include "io/atomic_file.h"

namespace pylon {

static_assert(std::endian::native == std::endian::little, "token files are little-endian");

namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* width_name(TokenWidth w) { return w == TokenWidth::u32 ? "uint32" : "uint16"; }

}  // namespace

TokenWidth parse_token_width(const std::string& text) {
  if (text == "auto") return TokenWidth::automatic;
  if (text == "u16") return TokenWidth::u16;
  if (text == "u32") return TokenWidth::u32;
  PYLON_CHECK(false, "token width must be auto, u16 or u32, got '", text, "'");
}

TokenFile::TokenFile(const std::string& path, TokenWidth width) : file_(path) {
  const size_t size = file_.size();
  PYLON_CHECK(size > 0, path, ": empty token file");
  int32_t header[3] = {0, 0, 0};
  if (size >= sizeof header) std::memcpy(header, file_.data(), sizeof header);

  if (size >= kLlmcHeaderBytes && header[0] == kLlmcMagic) {
    PYLON_CHECK(header[1] == 1 || header[1] == 2, path, ": llm.c token header has version ",
                header[1], " (1 = uint16, 2 = uint32 tokens)");
    const TokenWidth found = header[1] == 1 ? TokenWidth::u16 : TokenWidth::u32;
    PYLON_CHECK(width == TokenWidth::automatic || width == found, path, ": llm.c header says ",
                width_name(found), " tokens but ", width_name(width), " was asked");
    width_ = found;
    const uint64_t data_bytes = size - kLlmcHeaderBytes;
    PYLON_CHECK(header[2] >= 0 && static_cast<uint64_t>(header[2]) * bytes_per_token() == data_bytes,
                path, ": llm.c header says ", header[2], " tokens but ", data_bytes,
                " bytes follow it (", bytes_per_token(), " bytes per token)");
    count_ = header[2];
    tokens_ = file_.data() + kLlmcHeaderBytes;
  } else {
    width_ = width != TokenWidth::automatic ? width
             : ends_with(path, ".u32")      ? TokenWidth::u32
                                            : TokenWidth::u16;
    PYLON_CHECK(size % bytes_per_token() == 0, path, ": size ", size, " bytes is not a multiple of ",
                bytes_per_token(), " (", width_name(width_), " tokens)");
    count_ = static_cast<int64_t>(size / bytes_per_token());
    tokens_ = file_.data();
  }
  PYLON_CHECK(count_ > 0, path, ": holds no tokens");
}

uint32_t TokenFile::operator[](int64_t i) const {
  PYLON_ASSERT(i >= 0 && i < count_, "token ", i, " of ", count_);
  if (width_ == TokenWidth::u32) {
    uint32_t v = 0;
    std::memcpy(&v, tokens_ + 4 * i, 4);
    return v;
  }
  uint16_t v = 0;
  std::memcpy(&v, tokens_ + 2 * i, 2);
  return v;
}

void TokenFile::check_vocab(int vocab) const {
  PYLON_ASSERT(vocab > 0, "vocab ", vocab);
  const auto limit = static_cast<uint32_t>(vocab);
  for (int64_t i = 0; i < count_; ++i) {
    const uint32_t id = (*this)[i];
    PYLON_CHECK(id < limit, path(), ": token at position ", i, " has id ", id,
                ", outside the vocabulary of ", vocab);
  }
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, TokenWidth width) {
  uint32_t max_id = 0;
  for (uint32_t t : tokens) max_id = t > max_id ? t : max_id;
  if (width == TokenWidth::automatic) width = max_id < 65536 ? TokenWidth::u16 : TokenWidth::u32;
  AtomicFile f(path);
  if (width == TokenWidth::u16) {
    PYLON_CHECK(max_id < 65536, path, ": token id ", max_id, " does not fit in uint16 (use u32)");
    std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    f.write(narrow.data(), narrow.size() * 2);
  } else {
    PYLON_CHECK(tokens.size() <= INT32_MAX, path, ": ", tokens.size(),
                " tokens is more than the llm.c header can count");
    int32_t header[256] = {kLlmcMagic, 2, static_cast<int32_t>(tokens.size())};
    f.write(header, sizeof header);
    f.write(tokens.data(), tokens.size() * 4);
  }
  f.commit();
}

}  // namespace pylon
