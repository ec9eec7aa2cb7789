// UTF-8 text for the tokenizers: validation, lossy decoding, Unicode's White_Space, and NFC
// normalization (through libunistring; without it nfc() throws).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pylon {

// At text[at]: the length of the UTF-8 sequence that starts there when it is well formed (> 0),
// else minus the length of its maximal ill-formed prefix (Unicode's "maximal subpart", >= 1 byte).
int utf8_sequence(std::string_view text, size_t at);

// The offset of the first byte that is not well-formed UTF-8 (overlong forms, surrogates and code
// points past U+10FFFF are not), or text.size() when all of it is.
size_t utf8_invalid_offset(std::string_view text);

// Bytes as UTF-8 text, each maximal ill-formed subsequence replaced by U+FFFD (as Rust's
// String::from_utf8_lossy and the WHATWG decoder do).
std::string utf8_lossy(std::string_view bytes);

// The code point of the well-formed sequence at text[at] (its length: utf8_sequence).
char32_t utf8_code_point(std::string_view text, size_t at);

// Unicode's White_Space property (what Rust's char::is_whitespace and Oniguruma's \s match).
bool is_white_space(char32_t c);

// Whether nfc() works in this build (libunistring).
bool have_unicode_normalization();

// Valid UTF-8 text in Normalization Form C. Throws pylon::Error when built without libunistring.
std::string nfc(std::string_view text);

}  // namespace pylon
