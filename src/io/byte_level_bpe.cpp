// Byte-level BPE: the merge loop is Hugging Face's (a heap of candidate merges ordered by rank,
// then position; stale entries skipped), so long pre-tokens (whitespace runs, long words) cost
// O(n log n), and each distinct pre-token is merged once per encoding (Cache).
#include "io/byte_level_bpe.h"

#include <queue>

#include "core/error.h"
#include "io/json_fields.h"
#include "io/unicode_text.h"

namespace pylon {

const std::array<std::string, 256>& ByteLevelBpe::byte_chars() {
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> out;
    int next = 256;  // bytes that are not printable take U+0100, U+0101, ... in byte order
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int c = printable ? b : next++;
      // U+0000..U+017F: one or two UTF-8 bytes
      out[static_cast<size_t>(b)] = c < 0x80 ? std::string(1, static_cast<char>(c))
                                             : std::string{static_cast<char>(0xC0 | (c >> 6)),
                                                           static_cast<char>(0x80 | (c & 0x3F))};
    }
    return out;
  }();
  return chars;
}

std::string ByteLevelBpe::spell_bytes(std::string_view bytes) {
  const auto& chars = byte_chars();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char b : bytes) out += chars[static_cast<unsigned char>(b)];
  return out;
}

std::string ByteLevelBpe::token_bytes(const std::string& token) {
  static const std::unordered_map<char32_t, char> char_byte = [] {
    std::unordered_map<char32_t, char> m;
    const auto& chars = byte_chars();
    for (int b = 0; b < 256; ++b) m[utf8_code_point(chars[static_cast<size_t>(b)], 0)] = static_cast<char>(b);
    return m;
  }();
  std::string out;
  for (size_t at = 0; at < token.size();) {
    const int len = utf8_sequence(token, at);
    if (len < 0) return token;
    const auto it = char_byte.find(utf8_code_point(token, at));
    if (it == char_byte.end()) return token;
    out += it->second;
    at += static_cast<size_t>(len);
  }
  return out;
}

ByteLevelBpe::ByteLevelBpe(std::unordered_map<std::string, int> vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges, Options options,
                           const std::string& where)
    : vocab_(std::move(vocab)), options_(options), where_(where) {
  for (int b = 0; b < 256; ++b) byte_id_[static_cast<size_t>(b)] = id_of(byte_chars()[static_cast<size_t>(b)]);
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int ia = id_of(a), ib = id_of(b), merged = id_of(a + b);
    const auto missing = ia < 0 ? a : ib < 0 ? b : a + b;
    PYLON_CHECK(ia >= 0 && ib >= 0 && merged >= 0, where, ": model.merges[", rank, "]: ", json_quoted(missing),
                " is not in model.vocab");
    merges_[pair_key(ia, ib)] = {static_cast<uint32_t>(rank), merged};  // a repeated pair: the last rank
  }
}

int ByteLevelBpe::id_of(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void ByteLevelBpe::encode(std::string_view bytes, Cache& cache, std::vector<int>& out) const {
  if (const auto hit = cache.find(bytes); hit != cache.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<int> ids;
  if (options_.ignore_merges) ids.push_back(id_of(spell_bytes(bytes)));
  if (ids.empty() || ids[0] < 0) {
    ids.clear();
    bool last_unk = false;
    for (const char c : bytes) {
      const int id = byte_id_[static_cast<unsigned char>(c)];
      if (id >= 0) {
        ids.push_back(id);
        last_unk = false;
        continue;
      }
      PYLON_CHECK(options_.unk_id >= 0, where_, ": byte 0x", "0123456789abcdef"[(c >> 4) & 15],
                  "0123456789abcdef"[c & 15], " has no token in model.vocab and model.unk_token is null");
      if (!(last_unk && options_.fuse_unk)) ids.push_back(options_.unk_id);
      last_unk = true;
    }
    merge_symbols(ids);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  cache.emplace(std::string(bytes), std::move(ids));
}

void ByteLevelBpe::merge_symbols(std::vector<int>& ids) const {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  struct Candidate {
    uint32_t rank;
    int pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<char> alive(static_cast<size_t>(n), 1);
  auto consider = [&](int pos) {  // the pair that starts at pos, if it merges
    const int right = next[static_cast<size_t>(pos)];
    if (right < 0) return;
    const auto it = merges_.find(pair_key(ids[static_cast<size_t>(pos)], ids[static_cast<size_t>(right)]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, it->second.id});
  };
  for (int i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const auto pos = static_cast<size_t>(top.pos);
    if (!alive[pos] || next[pos] < 0) continue;
    const auto right = static_cast<size_t>(next[pos]);
    const auto it = merges_.find(pair_key(ids[pos], ids[right]));
    if (it == merges_.end() || it->second.id != top.id) continue;  // a stale entry
    ids[pos] = top.id;
    alive[right] = 0;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[static_cast<size_t>(next[pos])] = top.pos;
    if (prev[pos] >= 0) consider(prev[pos]);
    consider(top.pos);
  }
  size_t kept = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    if (alive[i]) ids[kept++] = ids[i];
  ids.resize(kept);
}

}  // namespace pylon
