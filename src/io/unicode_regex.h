// Regular expressions over UTF-8 text with the meaning Oniguruma gives them (the engine Hugging
// Face's tokenizers compile split patterns with), through PCRE2 (libpcre2-dev) with Unicode
// properties and its JIT. Oniguruma's \s and \S (Unicode White_Space) and \h and \H (hex digits)
// are rewritten to PCRE2's spelling, ^ and $ match at lines as in Oniguruma; constructs whose
// Oniguruma meaning PCRE2 does not share (\w, \W, \b, \B, class intersections with &&, the (?m)
// option) are refused. Without PCRE2 every pattern is refused with a line saying so.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pylon {

class UnicodeRegex {
 public:
  // Throws pylon::Error naming `where` when the pattern does not compile or is refused.
  UnicodeRegex(const std::string& pattern, const std::string& where);
  // A pattern matching `text` literally.
  static UnicodeRegex literal(const std::string& text, const std::string& where);
  UnicodeRegex(UnicodeRegex&&) noexcept;
  UnicodeRegex& operator=(UnicodeRegex&&) noexcept;
  ~UnicodeRegex();

  // The leftmost non-overlapping matches in `text` (well-formed UTF-8), as [begin, end) byte
  // offsets, left to right, into `out` (cleared first). After an empty match the search moves on
  // by one character, so empty matches appear too.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  static bool available();  // whether this build has PCRE2

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  explicit UnicodeRegex(std::unique_ptr<Impl> impl);
  static std::unique_ptr<Impl> compile(const std::string& pcre2_text, bool literal, const std::string& where);
};

// The PCRE2 spelling of an Oniguruma pattern (see above); throws pylon::Error naming `where` for a
// refused construct. Exposed for tests.
std::string pcre2_pattern_from_oniguruma(const std::string& pattern, const std::string& where);

}  // namespace pylon
