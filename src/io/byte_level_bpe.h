// A byte-level BPE model (GPT-2's, as Hugging Face's tokenizers run it): a vocabulary of tokens
// spelled in GPT-2's byte -> character map (bytes_to_unicode: printable bytes stand for
// themselves, the others for U+0100 onwards), and ranked merges. A pre-token's bytes start as one
// symbol each; the adjacent pair of lowest rank merges first (the leftmost among equals), until no
// pair has a merge. With ignore_merges, a pre-token that is a token of its own is that token.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pylon {

class ByteLevelBpe {
 public:
  struct Options {
    bool ignore_merges = false;
    int unk_id = -1;        // the id of a byte without a token of its own; -1: such a byte is an error
    bool fuse_unk = false;  // consecutive unknown bytes give one unk id
  };
  // vocab: token -> id; merges: the pairs in rank order. Throws pylon::Error naming `where`
  // ("FILE: model.merges[12]: ...") for a merge whose parts or result is not in the vocabulary;
  // `where` also names the file when encode() meets a byte without a token.
  ByteLevelBpe(std::unordered_map<std::string, int> vocab,
               const std::vector<std::pair<std::string, std::string>>& merges, Options options,
               const std::string& where);

  // Per-pre-token results of one encoding, as the reference implementations cache them (found by
  // string_view, without a copy).
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Cache = std::unordered_map<std::string, std::vector<int>, TextHash, std::equal_to<>>;
  // Appends the ids of one pre-token (its raw bytes, not empty) to `out`.
  void encode(std::string_view bytes, Cache& cache, std::vector<int>& out) const;

  int id_of(const std::string& token) const;  // -1 if not in the vocabulary
  const std::unordered_map<std::string, int>& vocab() const { return vocab_; }

  // GPT-2's character of a byte, as UTF-8; a text's bytes so spelled; and a token's bytes: its
  // characters mapped back, or the token's own text when a character is not in the map (as the
  // ByteLevel decoder of Hugging Face's tokenizers does, e.g. for added tokens).
  static const std::array<std::string, 256>& byte_chars();
  static std::string spell_bytes(std::string_view bytes);
  static std::string token_bytes(const std::string& token);

 private:
  struct Merge {
    uint32_t rank;
    int id;  // the merged token
  };
  static uint64_t pair_key(int a, int b) {
    return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
  }
  void merge_symbols(std::vector<int>& ids) const;

  std::unordered_map<std::string, int> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and merged id
  std::array<int, 256> byte_id_{};              // the id of each byte's token, -1 if none
  Options options_;
  std::string where_;
};

}  // namespace pylon
