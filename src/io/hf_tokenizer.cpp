// tokenizer.json: reading (each field checked, anything unimplemented refused) and the encoding
// pipeline of Hugging Face's tokenizers for byte-level BPE.
#include "io/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_fields.h"
#include "io/unicode_text.h"

namespace pylon {

using json = nlohmann::json;

namespace {

// GPT-2's split pattern: what ByteLevel with use_regex applies.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

json parse_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(source + ": malformed JSON: " + e.what());
  }
}

bool flag(const JsonFields& f, const json& obj, const char* key, const std::string& where, bool fallback) {
  if (!obj.contains(key) || obj.at(key).is_null()) return fallback;
  if (!obj.at(key).is_boolean()) f.fail(where, ".", key, " is not true or false");
  return obj.at(key).get<bool>();
}

std::string type_of(const JsonFields& f, const json& obj, const std::string& where) {
  if (!obj.is_object()) f.fail(where, " is not an object");
  return f.text(obj, "type", where);
}

// An id in [0, 2^31 - 1).
int token_id(const JsonFields& f, const json& v, const std::string& where) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() >= (uint64_t{1} << 31) - 1)
    f.fail(where, " is not a token id (a non-negative integer)");
  return static_cast<int>(v.get<uint64_t>());
}

// Where a text's trailing White_Space begins / its leading White_Space ends (byte offsets).
size_t trailing_space_begin(std::string_view text) {
  size_t at = text.size();
  while (at > 0) {
    size_t start = at - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!is_white_space(utf8_code_point(text, start))) break;
    at = start;
  }
  return at;
}

size_t leading_space_end(std::string_view text) {
  size_t at = 0;
  while (at < text.size() && is_white_space(utf8_code_point(text, at)))
    at += static_cast<size_t>(utf8_sequence(text, at));
  return at;
}

}  // namespace

void HfTokenizer::Trie::add(std::string_view text, int token) {
  int node = 0;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    auto& children = nodes_[static_cast<size_t>(node)].children;
    const auto it = std::find_if(children.begin(), children.end(), [&](const auto& e) { return e.first == byte; });
    if (it != children.end()) {
      node = it->second;
    } else {
      const int child = static_cast<int>(nodes_.size());
      nodes_[static_cast<size_t>(node)].children.emplace_back(byte, child);
      nodes_.emplace_back();
      node = child;
    }
  }
  if (nodes_[static_cast<size_t>(node)].token < 0) nodes_[static_cast<size_t>(node)].token = token;
}

std::pair<size_t, int> HfTokenizer::Trie::longest_at(std::string_view text, size_t at) const {
  std::pair<size_t, int> best{0, -1};
  int node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& children = nodes_[static_cast<size_t>(node)].children;
    const auto it = std::find_if(children.begin(), children.end(), [&](const auto& e) { return e.first == byte; });
    if (it == children.end()) break;
    node = it->second;
    if (nodes_[static_cast<size_t>(node)].token >= 0) best = {i + 1 - at, nodes_[static_cast<size_t>(node)].token};
  }
  return best;
}

HfTokenizer::HfTokenizer(const std::string& json_text, const std::string& source, const std::string& config_text,
                         const std::string& config_source)
    : text_(json_text), source_(source) {
  const json j = parse_json(json_text, source);
  const JsonFields f(source);
  if (!j.is_object()) f.fail("not a JSON object");
  for (const char* key : {"truncation", "padding"})
    if (j.contains(key) && !j.at(key).is_null())
      f.fail(key, " is set: Pylon encodes whole texts, without truncation or padding (set it to null)");
  read_model(j);
  if (j.contains("normalizer")) read_normalizer(j.at("normalizer"), "normalizer");

  if (!j.contains("pre_tokenizer") || j.at("pre_tokenizer").is_null())
    f.fail("pre_tokenizer is null: not a byte-level BPE tokenizer (Pylon needs a ByteLevel pre-tokenizer)");
  bool byte_level = false;
  read_pre_tokenizer(j.at("pre_tokenizer"), "pre_tokenizer", byte_level);
  if (!byte_level) f.fail("pre_tokenizer has no ByteLevel step: not a byte-level BPE tokenizer");

  // The decoder: ByteLevel (alone or in a Sequence of its own).
  const json* d = j.contains("decoder") ? &j.at("decoder") : nullptr;
  if (d == nullptr || d->is_null()) f.fail("decoder is null (Pylon decodes byte-level: expected ByteLevel)");
  std::string dtype = type_of(f, *d, "decoder");
  if (dtype == "Sequence") {
    const json& list = f.field(*d, "decoders", "decoder");
    if (!list.is_array() || list.size() != 1) f.fail("decoder: a Sequence other than [ByteLevel] is not supported");
    dtype = type_of(f, list[0], "decoder.decoders[0]");
  }
  if (dtype != "ByteLevel") f.fail("decoder.type ", json_quoted(dtype), " is not supported (Pylon decodes byte-level: ByteLevel)");

  // The post-processor adds special tokens around a sequence (and offsets): not applied here.
  std::vector<std::pair<const json*, std::string>> processors;
  if (j.contains("post_processor") && !j.at("post_processor").is_null())
    processors.emplace_back(&j.at("post_processor"), "post_processor");
  for (size_t i = 0; i < processors.size(); ++i) {
    const auto [p, where] = processors[i];
    const std::string type = type_of(f, *p, where);
    if (type == "Sequence") {
      const json& list = f.field(*p, "processors", where);
      if (!list.is_array()) f.fail(where, ".processors is not a list");
      for (size_t k = 0; k < list.size(); ++k)
        processors.emplace_back(&list[k], where + ".processors[" + std::to_string(k) + "]");
    } else if (type != "ByteLevel" && type != "TemplateProcessing" && type != "RobertaProcessing" &&
               type != "BertProcessing") {
      f.fail(where, ".type ", json_quoted(type), " is not supported");
    }
  }

  read_added_tokens(j);
  read_special_tokens(j, config_text, config_source);
}

void HfTokenizer::read_model(const json& j) {
  const JsonFields f(source_);
  const json& m = f.field(j, "model", "the file");
  if (!m.is_object()) f.fail("model is not an object");
  // Files of old versions of the library leave out the type; BPE is the one with merges.
  const std::string type = m.contains("type") ? f.text(m, "type", "model") : m.contains("merges") ? "BPE" : "?";
  if (type != "BPE") f.fail("model.type ", json_quoted(type), " is not supported (Pylon reads byte-level BPE)");
  if (m.contains("dropout") && !m.at("dropout").is_null() && !(m.at("dropout").is_number() && m.at("dropout") == 0))
    f.fail("model.dropout = ", m.at("dropout").dump(), ": BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(key) && !m.at(key).is_null() && m.at(key) != "")
      f.fail("model.", key, " = ", m.at(key).dump(), " is not supported (byte-level BPE has none)");
  if (flag(f, m, "byte_fallback", "model", false))
    f.fail("model.byte_fallback = true is not supported with a ByteLevel pre-tokenizer");

  const json& vocab = f.field(m, "vocab", "model");
  if (!vocab.is_object()) f.fail("model.vocab is not an object (token -> id)");
  std::unordered_map<std::string, int> tokens;
  tokens.reserve(vocab.size());
  std::unordered_set<int> seen;
  for (const auto& [token, id_json] : vocab.items()) {
    const int id = token_id(f, id_json, "model.vocab[" + json_quoted(token) + "]");
    if (!seen.insert(id).second) f.fail("model.vocab: id ", id, " is given to two tokens");
    tokens.emplace(token, id);
  }

  const json& merges_json = f.field(m, "merges", "model");
  if (!merges_json.is_array()) f.fail("model.merges is not a list");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_json.size());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const json& e = merges_json[i];
    if (e.is_string()) {  // "a b"
      const std::string s = e.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        f.fail("model.merges[", i, "] = ", e.dump(), " is not two tokens and a space");
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      f.fail("model.merges[", i, "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }

  ByteLevelBpe::Options options;
  options.ignore_merges = flag(f, m, "ignore_merges", "model", false);
  options.fuse_unk = flag(f, m, "fuse_unk", "model", false);
  if (m.contains("unk_token") && !m.at("unk_token").is_null()) {
    const std::string unk = f.text(m, "unk_token", "model");
    const auto it = tokens.find(unk);
    if (it == tokens.end()) f.fail("model.unk_token ", json_quoted(unk), " is not in model.vocab");
    options.unk_id = it->second;
  }
  model_ = std::make_unique<ByteLevelBpe>(std::move(tokens), merges, options, source_);
}

void HfTokenizer::read_normalizer(const json& n, const std::string& where) {
  if (n.is_null()) return;
  const JsonFields f(source_);
  const std::string type = type_of(f, n, where);
  if (type == "Sequence") {
    const json& list = f.field(n, "normalizers", where);
    if (!list.is_array()) f.fail(where, ".normalizers is not a list");
    for (size_t i = 0; i < list.size(); ++i) read_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]");
  } else if (type == "NFC") {
    if (!have_unicode_normalization())
      f.fail(where, " NFC needs libunistring, which this build lacks (apt install libunistring-dev and rebuild)");
    nfc_ = true;  // NFC is idempotent: twice is once
  } else {
    f.fail(where, ".type ", json_quoted(type), " is not supported (Pylon normalizes with NFC or not at all)");
  }
}

void HfTokenizer::read_pre_tokenizer(const json& p, const std::string& where, bool& byte_level_seen) {
  const JsonFields f(source_);
  const std::string type = type_of(f, p, where);
  if (type == "Sequence") {
    const json& list = f.field(p, "pretokenizers", where);
    if (!list.is_array()) f.fail(where, ".pretokenizers is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]", byte_level_seen);
    return;
  }
  if (byte_level_seen) f.fail(where, ": a ", json_quoted(type), " step after ByteLevel is not supported");
  if (type == "ByteLevel") {
    byte_level_seen = true;
    prefix_space_ = flag(f, p, "add_prefix_space", where, true);
    if (flag(f, p, "use_regex", where, true)) byte_level_regex_.emplace(kGpt2Pattern, source_ + ": " + where);
  } else if (type == "Split") {
    const json& pattern = f.field(p, "pattern", where);
    const std::string at = source_ + ": " + where + ".pattern";
    std::optional<UnicodeRegex> regex;
    if (pattern.is_object() && pattern.contains("Regex") && pattern.at("Regex").is_string())
      regex.emplace(pattern.at("Regex").get<std::string>(), at);
    else if (pattern.is_object() && pattern.contains("String") && pattern.at("String").is_string())
      regex.emplace(UnicodeRegex::literal(pattern.at("String").get<std::string>(), at));
    else
      f.fail(where, ".pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
    const std::string behavior = f.text(p, "behavior", where);
    if (behavior != "Isolated" && behavior != "Removed")
      f.fail(where, ".behavior ", json_quoted(behavior), " is not supported (Pylon splits Isolated or Removed)");
    splits_.push_back({std::move(*regex), flag(f, p, "invert", where, false), behavior == "Removed"});
  } else if (type == "Digits") {
    // Rust's char::is_numeric: \p{N}; each digit alone, or runs of them
    const bool single = flag(f, p, "individual_digits", where, false);
    splits_.push_back({UnicodeRegex(single ? "\\p{N}" : "\\p{N}+", source_ + ": " + where), false, false});
  } else {
    f.fail(where, ".type ", json_quoted(type), " is not supported (Pylon runs Split, Digits and ByteLevel)");
  }
}

void HfTokenizer::read_added_tokens(const json& j) {
  const JsonFields f(source_);
  int max_id = -1;
  for (const auto& [token, id] : model_->vocab()) max_id = std::max(max_id, id);
  if (j.contains("added_tokens") && !j.at("added_tokens").is_null()) {
    const json& list = j.at("added_tokens");
    if (!list.is_array()) f.fail("added_tokens is not a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      const json& t = list[i];
      if (!t.is_object()) f.fail(where, " is not an object");
      AddedToken a;
      a.id = token_id(f, f.field(t, "id", where), where + ".id");
      a.content = f.text(t, "content", where);
      if (a.content.empty()) f.fail(where, ".content is empty");
      if (flag(f, t, "single_word", where, false)) f.fail(where, ".single_word = true is not supported");
      a.lstrip = flag(f, t, "lstrip", where, false);
      a.rstrip = flag(f, t, "rstrip", where, false);
      a.normalized = flag(f, t, "normalized", where, !flag(f, t, "special", where, false));
      if (const int in_vocab = model_->id_of(a.content); in_vocab >= 0 && in_vocab != a.id)
        f.fail(where, ": ", json_quoted(a.content), " has id ", a.id, " but model.vocab gives it ", in_vocab);
      a.match = a.normalized && nfc_ ? nfc(a.content) : a.content;
      max_id = std::max(max_id, a.id);
      added_.push_back(std::move(a));
    }
  }
  for (size_t i = 0; i < added_.size(); ++i)
    (added_[i].normalized ? normalized_trie_ : raw_trie_).add(added_[i].match, static_cast<int>(i));

  // Ids index tables here: a few holes are fine, ids far past the number of tokens are not.
  const size_t tokens = model_->vocab().size() + added_.size();
  if (static_cast<size_t>(max_id) >= 2 * tokens + 1024)
    f.fail("the ids run to ", max_id, " for ", tokens, " tokens (Pylon needs them about dense)");
  vocab_size_ = max_id + 1;
  id_bytes_.assign(static_cast<size_t>(vocab_size_), std::string());
  has_id_.assign(static_cast<size_t>(vocab_size_), 0);
  for (const auto& [token, id] : model_->vocab()) {
    id_bytes_[static_cast<size_t>(id)] = ByteLevelBpe::token_bytes(token);
    has_id_[static_cast<size_t>(id)] = 1;
  }
  // An added token decodes as the decoder makes of its text, normalized when it is (as the
  // tokenizers library keeps a normalized token's text).
  for (const AddedToken& a : added_) {
    id_bytes_[static_cast<size_t>(a.id)] = ByteLevelBpe::token_bytes(a.match);
    has_id_[static_cast<size_t>(a.id)] = 1;
  }
}

void HfTokenizer::read_special_tokens(const json& j, const std::string& config_text, const std::string& config_source) {
  json holder;
  const json* record = nullptr;
  std::string where;
  if (j.contains("pylon_special_tokens")) {
    record = &j.at("pylon_special_tokens");
    where = source_ + ": pylon_special_tokens";
    special_tokens_recorded_ = true;
  } else if (!config_text.empty()) {
    holder = parse_json(config_text, config_source);
    record = &holder;
    where = config_source;
  }
  if (record == nullptr) return;
  const JsonFields f(where);
  if (!record->is_object()) f.fail("not a JSON object");
  // A token: its text, or an object with its "content" (AddedToken, as older files write it).
  auto read = [&](const char* key, std::optional<std::string>& token, int& id) {
    if (!record->contains(key) || record->at(key).is_null()) return;
    const json& v = record->at(key);
    token = v.is_object() ? f.text(v, "content", key) : v.is_string() ? v.get<std::string>() : "";
    if (token->empty()) f.fail(key, " is neither a token's text nor an object with its content");
    for (const AddedToken& a : added_)
      if (a.content == *token) id = a.id;
    if (id < 0) id = model_->id_of(ByteLevelBpe::spell_bytes(*token));
    if (id < 0) f.fail(key, " ", json_quoted(*token), " is not a token of ", source_);
  };
  read("bos_token", bos_token_, bos_id_);
  read("eos_token", eos_token_, eos_id_);
}

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& text, const std::string& path) {
  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::string config_text;
  if (std::filesystem::is_regular_file(config)) config_text = read_text_file(config.string());
  return std::make_unique<HfTokenizer>(text, path, config_text, config.string());
}

std::string HfTokenizer::serialize() const {
  if (special_tokens_recorded_ || (!bos_token_ && !eos_token_)) return text_;
  json j = json::parse(text_);
  j["pylon_special_tokens"] = {{"bos_token", bos_token_ ? json(*bos_token_) : json(nullptr)},
                               {"eos_token", eos_token_ ? json(*eos_token_) : json(nullptr)}};
  return j.dump(1) + "\n";
}

// ---- encoding ----

struct HfTokenizer::Work {
  ByteLevelBpe::Cache cache;
  std::vector<std::vector<std::pair<size_t, size_t>>> spans;  // one list of matches per step
  std::string prefixed;
};

// Calls on_piece(text, added token index or -1) for the added tokens found in `text` and the
// pieces between them, as the tokenizers library's AddedVocabulary::find_matches does: the
// leftmost-longest match; lstrip / rstrip take the White_Space beside it into the token.
template <typename OnPiece>
void HfTokenizer::split_added(std::string_view text, const Trie& trie, OnPiece on_piece) const {
  if (trie.empty()) {
    on_piece(text, -1);
    return;
  }
  size_t done = 0;  // text[0, done) is handed out
  for (size_t at = 0; at < text.size();) {
    const auto [length, token] = trie.longest_at(text, at);
    if (token < 0) {
      ++at;
      continue;
    }
    const AddedToken& a = added_[static_cast<size_t>(token)];
    size_t begin = at, end = at + length;
    if (a.lstrip) begin = std::max(trailing_space_begin(text.substr(0, begin)), done);
    if (a.rstrip) end += leading_space_end(text.substr(end));
    if (begin > done) on_piece(text.substr(done, begin - done), -1);
    on_piece(text.substr(begin, end - begin), token);
    done = at = end;
  }
  if (done < text.size()) on_piece(text.substr(done), -1);
}

void HfTokenizer::pre_tokenize(std::string_view piece, size_t step, Work& w, std::vector<int>& ids) const {
  if (piece.empty()) return;
  auto& spans = w.spans[step];
  if (step < splits_.size()) {
    const SplitStep& s = splits_[step];
    s.regex.find_all(piece, spans);
    size_t done = 0;
    auto emit = [&](size_t begin, size_t end, bool matched) {
      if (end > begin && !(s.removed && matched != s.invert)) pre_tokenize(piece.substr(begin, end - begin), step + 1, w, ids);
    };
    // `spans` is this step's own list: the steps below write theirs.
    for (size_t k = 0; k < spans.size(); ++k) {
      const auto [begin, end] = spans[k];
      emit(done, begin, false);
      emit(begin, end, true);
      done = end;
    }
    emit(done, piece.size(), false);
    return;
  }
  // ByteLevel: a space first unless there is one, GPT-2's split if asked, then BPE.
  std::string_view text = piece;
  if (prefix_space_ && piece.front() != ' ') {
    w.prefixed.assign(1, ' ');
    w.prefixed.append(piece);
    text = w.prefixed;
  }
  if (!byte_level_regex_) {
    model_->encode(text, w.cache, ids);
    return;
  }
  byte_level_regex_->find_all(text, spans);
  size_t done = 0;
  for (const auto& [begin, end] : spans) {
    if (begin > done) model_->encode(text.substr(done, begin - done), w.cache, ids);
    if (end > begin) model_->encode(text.substr(begin, end - begin), w.cache, ids);
    done = end;
  }
  if (done < text.size()) model_->encode(text.substr(done), w.cache, ids);
}

std::vector<int> HfTokenizer::encode(std::string_view text) const {
  const size_t bad = utf8_invalid_offset(text);
  PYLON_CHECK(bad == text.size(), "tokenizer: the text is not UTF-8 (byte ", bad, " of ", text.size(), ")");
  Work w;
  w.spans.resize(splits_.size() + 1);
  std::vector<int> ids;
  ids.reserve(text.size() / 3);
  split_added(text, raw_trie_, [&](std::string_view piece, int token) {
    if (token >= 0) {
      ids.push_back(added_[static_cast<size_t>(token)].id);
      return;
    }
    std::string normalized;
    if (nfc_) normalized = nfc(piece);
    split_added(nfc_ ? std::string_view(normalized) : piece, normalized_trie_, [&](std::string_view sub, int t) {
      if (t >= 0)
        ids.push_back(added_[static_cast<size_t>(t)].id);
      else
        pre_tokenize(sub, 0, w, ids);
    });
  });
  return ids;
}

std::string HfTokenizer::decode(const std::vector<int>& ids) const {
  std::string bytes;
  for (const int id : ids) {
    PYLON_CHECK(id >= 0 && id < vocab_size_ && has_id_[static_cast<size_t>(id)], "tokenizer: id ", id,
                " is not in the vocabulary of ", source_);
    bytes += id_bytes_[static_cast<size_t>(id)];
  }
  return utf8_lossy(bytes);
}

}  // namespace pylon
