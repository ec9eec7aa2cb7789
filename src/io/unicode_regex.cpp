// UnicodeRegex over PCRE2: compiled with UTF, UCP (Unicode classes) and line anchors, JIT-compiled
// where the platform has a JIT; matching falls back to the interpreter when the JIT's stack runs out.
#include "io/unicode_regex.h"

#include "core/error.h"
#include "io/unicode_text.h"

#ifdef PYLON_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace pylon {

std::string pcre2_pattern_from_oniguruma(const std::string& pattern, const std::string& where) {
  auto refuse = [&](const std::string& what) {
    throw Error(where + ": the pattern uses " + what + ", whose Oniguruma meaning Pylon does not reproduce");
  };
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      switch (e) {
        case 's': out += "\\p{White_Space}"; break;
        case 'S': out += "\\P{White_Space}"; break;
        case 'h': out += in_class ? "0-9A-Fa-f" : "[0-9A-Fa-f]"; break;
        case 'H':
          if (in_class) refuse("\\H inside a class");
          out += "[^0-9A-Fa-f]";
          break;
        case 'w': case 'W': case 'b': case 'B': refuse(std::string("\\") + e); break;
        default: out += c, out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' first in a class is a literal one, in both.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == '[' && in_class) {  // POSIX brackets pass; Oniguruma's nested classes are PCRE2's literals
      const size_t end = pattern.find(":]", i);
      if (i + 1 >= pattern.size() || pattern[i + 1] != ':' || end == std::string::npos) refuse("a nested class");
      out.append(pattern, i, end + 2 - i);
      i = end + 1;
      continue;
    }
    if (c == ']' && in_class) {
      in_class = false;
    } else if (c == '&' && in_class && i + 1 < pattern.size() && pattern[i + 1] == '&') {
      refuse("a class intersection (&&)");
    } else if (c == '(' && !in_class && pattern.compare(i, 2, "(?") == 0) {
      // Inline options: Oniguruma's (Ruby's) m is PCRE2's s (dot matches newline).
      for (size_t j = i + 2; j < pattern.size() && std::string_view("imx-").find(pattern[j]) != std::string_view::npos; ++j)
        if (pattern[j] == 'm') refuse("the (?m) option");
    }
    out += c;
  }
  return out;
}

#ifdef PYLON_HAVE_PCRE2

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct UnicodeRegex::Impl {
  pcre2_code* code = nullptr;
  std::string where;
  ~Impl() { pcre2_code_free(code); }
};

std::unique_ptr<UnicodeRegex::Impl> UnicodeRegex::compile(const std::string& pcre2_text, bool literal,
                                                          const std::string& where) {
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  PYLON_ASSERT(context != nullptr, "out of memory");
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);  // Oniguruma's lines end at \n
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto impl = std::make_unique<UnicodeRegex::Impl>();
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_text.data()), pcre2_text.size(),
                             literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, context);
  pcre2_compile_context_free(context);
  impl->where = where;
  PYLON_CHECK(impl->code != nullptr, where, ": the pattern does not compile (PCRE2: ", pcre2_message(error),
              " at offset ", offset, ")");
  pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE);  // where there is no JIT, matching interprets
  return impl;
}

UnicodeRegex::UnicodeRegex(const std::string& pattern, const std::string& where)
    : impl_(compile(pcre2_pattern_from_oniguruma(pattern, where), false, where)) {}

UnicodeRegex UnicodeRegex::literal(const std::string& text, const std::string& where) {
  return UnicodeRegex(compile(text, true, where));
}

void UnicodeRegex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  PYLON_ASSERT(data != nullptr, "out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  while (at <= text.size()) {
    int rc = pcre2_match(impl_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking on the heap
      rc = pcre2_match(impl_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      throw Error(impl_->where + ": matching failed (PCRE2: " + pcre2_message(rc) + ")");
    }
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(data);
    out.emplace_back(span[0], span[1]);
    if (span[1] > span[0]) {
      at = span[1];
    } else {  // an empty match: move on by one character
      if (span[1] >= text.size()) break;
      at = span[1] + static_cast<size_t>(utf8_sequence(text, span[1]));
    }
  }
  pcre2_match_data_free(data);
}

bool UnicodeRegex::available() { return true; }

#else  // !PYLON_HAVE_PCRE2

struct UnicodeRegex::Impl {};

UnicodeRegex::UnicodeRegex(const std::string&, const std::string& where) {
  throw Error(where + ": built without PCRE2, which tokenizer.json split patterns need (apt install "
              "libpcre2-dev and rebuild)");
}
UnicodeRegex UnicodeRegex::literal(const std::string& text, const std::string& where) {
  return UnicodeRegex(text, where);
}
void UnicodeRegex::find_all(std::string_view, std::vector<std::pair<size_t, size_t>>&) const {}
bool UnicodeRegex::available() { return false; }

#endif  // PYLON_HAVE_PCRE2

UnicodeRegex::UnicodeRegex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UnicodeRegex::UnicodeRegex(UnicodeRegex&&) noexcept = default;
UnicodeRegex& UnicodeRegex::operator=(UnicodeRegex&&) noexcept = default;
UnicodeRegex::~UnicodeRegex() = default;

}  // namespace pylon
