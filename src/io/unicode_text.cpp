// UTF-8 per Unicode's Table 3-7 (well-formed byte sequences); NFC through libunistring's u8_normalize.
#include "io/unicode_text.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

#ifdef PYLON_HAVE_UNISTRING
#include <uninorm.h>
#endif

namespace pylon {

int utf8_sequence(std::string_view text, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + at;
  const size_t n = text.size() - at;
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return 1;
  int len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return -1;
  }
  for (int i = 1; i < len; ++i) {
    const unsigned char low = i == 1 ? lo : 0x80, high = i == 1 ? hi : 0xBF;
    if (static_cast<size_t>(i) >= n || p[i] < low || p[i] > high) return -i;
  }
  return len;
}

size_t utf8_invalid_offset(std::string_view text) {
  size_t at = 0;
  while (at < text.size()) {
    // ASCII runs, eight bytes at a time
    while (at + 8 <= text.size()) {
      uint64_t word;
      std::memcpy(&word, text.data() + at, 8);
      if (word & 0x8080808080808080ull) break;
      at += 8;
    }
    if (at >= text.size()) break;
    const int len = utf8_sequence(text, at);
    if (len < 0) return at;
    at += static_cast<size_t>(len);
  }
  return text.size();
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t at = 0;
  while (at < bytes.size()) {
    const int len = utf8_sequence(bytes, at);
    if (len > 0) {
      out.append(bytes.data() + at, static_cast<size_t>(len));
      at += static_cast<size_t>(len);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      at += static_cast<size_t>(-len);
    }
  }
  return out;
}

char32_t utf8_code_point(std::string_view text, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + at;
  if (p[0] < 0x80) return p[0];
  if (p[0] < 0xE0) return (char32_t{p[0] & 0x1Fu} << 6) | (p[1] & 0x3Fu);
  if (p[0] < 0xF0) return (char32_t{p[0] & 0x0Fu} << 12) | (char32_t{p[1] & 0x3Fu} << 6) | (p[2] & 0x3Fu);
  return (char32_t{p[0] & 0x07u} << 18) | (char32_t{p[1] & 0x3Fu} << 12) | (char32_t{p[2] & 0x3Fu} << 6) |
         (p[3] & 0x3Fu);
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

#ifdef PYLON_HAVE_UNISTRING

bool have_unicode_normalization() { return true; }

std::string nfc(std::string_view text) {
  if (text.empty()) return {};
  size_t length = 0;
  uint8_t* out = u8_normalize(UNINORM_NFC, reinterpret_cast<const uint8_t*>(text.data()), text.size(), nullptr,
                              &length);
  PYLON_CHECK(out != nullptr, "NFC normalization failed: ", std::strerror(errno));
  std::string result(reinterpret_cast<const char*>(out), length);
  std::free(out);
  return result;
}

#else

bool have_unicode_normalization() { return false; }

std::string nfc(std::string_view) {
  throw Error("built without libunistring: NFC normalization needs it (apt install libunistring-dev and rebuild)");
}

#endif

}  // namespace pylon
