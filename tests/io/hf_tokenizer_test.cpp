// Hugging Face tokenizer.json (byte-level BPE): the ids of Hugging Face's tokenizers library (its
// Node binding; tokenizer_golden/make_golden.mjs) for five tiny tokenizers in the styles of GPT-2,
// Llama 3, Qwen2 and two mixes of the other options; refusals of what is not implemented; a
// mutation fuzz of the file; edge cases.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <random>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/hf_tokenizer.h"
#include "io/tokenizer.h"
#include "io/unicode_regex.h"
#include "io/unicode_text.h"
#include "test_util.h"

namespace pylon {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const fs::path kGolden = PYLON_TOKENIZER_GOLDEN_DIR;

json read_json(const fs::path& path) { return json::parse(read_text_file(path.string())); }

std::string quoted(const std::string& s) { return json(s).dump(); }  // control bytes escaped

class HfTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!UnicodeRegex::available()) GTEST_SKIP() << "built without PCRE2";
  }
  // The NFC of the Qwen2 and splits styles needs libunistring.
  static bool can_load(const std::string& style) {
    return (style != "qwen2" && style != "splits") || have_unicode_normalization();
  }
};

TEST(HfTokenizerWithoutPcre2, SaysWhatIsMissing) {
  if (UnicodeRegex::available()) GTEST_SKIP() << "built with PCRE2";
  try {
    Tokenizer::load((kGolden / "llama3").string());
    ADD_FAILURE() << "loaded without PCRE2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("libpcre2-dev"), std::string::npos) << e.what();
  }
}

TEST_F(HfTokenizerTest, EncodesAsHuggingFaceTokenizersDoes) {
  const json expected = read_json(kGolden / "expected.json");
  ASSERT_EQ(expected.at("made_by").get<std::string>().rfind("tokenizers ", 0), 0u);  // not Pylon
  ASSERT_EQ(expected.at("tokenizers").size(), 5u);
  for (const auto& [style, cases] : expected.at("tokenizers").items()) {
    SCOPED_TRACE(style);
    if (!can_load(style)) continue;
    const Tokenizer tok = Tokenizer::load((kGolden / style).string());  // the folder's tokenizer.json
    EXPECT_EQ(tok.kind(), TokenizerKind::byte_level_bpe);
    ASSERT_GE(cases.size(), 40u);
    for (const json& c : cases) {
      const std::string text = c.at("text");
      const std::vector<int> want = c.at("ids");
      const std::vector<int> got = tok.encode(text);
      EXPECT_EQ(got, want) << "text " << quoted(text);
      EXPECT_EQ(tok.decode(want), c.at("decoded").get<std::string>()) << "text " << quoted(text);
      if (style == "gpt2" || style == "llama3") {  // no NFC, no prefix space, nothing removed
        EXPECT_EQ(tok.decode(got), text);
      }
      EXPECT_EQ(encode_long_text(tok, text), got);
    }
  }
}

TEST_F(HfTokenizerTest, VocabularyAndSpecialTokens) {
  struct Want {
    const char* style;
    int vocab, bos, eos;
  };
  // The ids: past the vocabulary's, in added_tokens order (make_golden.mjs).
  for (const Want& w : {Want{"gpt2", 557, 556, 556}, Want{"llama3", 584, 580, 581}, Want{"qwen2", 519, -1, 518},
                        Want{"mixed", 459, -1, 457}, Want{"splits", 498, -1, 496}}) {
    SCOPED_TRACE(w.style);
    if (!can_load(w.style)) continue;
    const Tokenizer tok = Tokenizer::load((kGolden / w.style / "tokenizer.json").string());
    const json file = read_json(kGolden / w.style / "tokenizer.json");
    EXPECT_EQ(w.vocab, static_cast<int>(file.at("model").at("vocab").size() +
                                        (std::string(w.style) == "gpt2" ? 0 : file.at("added_tokens").size())));
    EXPECT_EQ(tok.vocab_size(), w.vocab);
    EXPECT_EQ(tok.eos_id(), w.eos);
    EXPECT_EQ(tok.bos_id(), w.bos);
  }
  // The post-processor (Llama 3's adds <|begin_of_text|>) is not applied: no BOS.
  const Tokenizer llama = Tokenizer::load((kGolden / "llama3").string());
  EXPECT_EQ(llama.encode("Hi"), (std::vector<int>{72, 105}));
  EXPECT_EQ(llama.decode({580, 72}), "<|begin_of_text|>H");
}

TEST_F(HfTokenizerTest, BytesCarryTheSpecialTokens) {
  // What an edge file embeds: the tokenizer.json with tokenizer_config.json's bos and eos recorded.
  const Tokenizer tok = Tokenizer::load((kGolden / "llama3").string());
  const std::string bytes = tok.to_bytes();
  EXPECT_TRUE(is_tokenizer_json(bytes));
  const Tokenizer back = Tokenizer::from_bytes(bytes, "embedded");
  EXPECT_EQ(back.bos_id(), tok.bos_id());
  EXPECT_EQ(back.eos_id(), tok.eos_id());
  EXPECT_EQ(back.vocab_size(), tok.vocab_size());
  EXPECT_EQ(back.to_bytes(), bytes);
  const std::string text = "<|begin_of_text|>Don't stop: 12345 東京 🙂\n\n";
  EXPECT_EQ(back.encode(text), tok.encode(text));
  // Without tokenizer_config.json there are none.
  const Tokenizer bare = Tokenizer::from_bytes(read_text_file((kGolden / "llama3/tokenizer.json").string()), "bare");
  EXPECT_EQ(bare.eos_id(), -1);
  EXPECT_EQ(bare.to_bytes(), read_text_file((kGolden / "llama3/tokenizer.json").string()));
}

TEST_F(HfTokenizerTest, LongTextsAreFast) {
  // Megabytes in seconds: BPE per distinct pre-token (cached), O(n log n) merges of long pieces.
  const Tokenizer tok = Tokenizer::load((kGolden / "llama3").string());
  const json expected = read_json(kGolden / "expected.json");
  std::string text;
  for (const json& c : expected.at("tokenizers").at("llama3")) text += c.at("text").get<std::string>() + "\n";
  const std::string unit = text;
  while (text.size() < (2u << 20)) text += unit;
  text += std::string(200000, ' ') + "x" + std::string(200000, 'y') + "\n";
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> ids = tok.encode(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_LT(seconds, 20.0) << text.size() << " bytes";  // about 1 s on a 2-core CI machine
}

TEST_F(HfTokenizerTest, TextThatIsNotUtf8IsAnError) {
  const Tokenizer tok = Tokenizer::load((kGolden / "gpt2").string());
  for (const std::string bad : {"ab\xff", "\xc3", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80"}) {
    try {
      tok.encode(bad);
      ADD_FAILURE() << "no error for " << quoted(bad);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not UTF-8"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(tok.decode({100000}), Error);
  EXPECT_THROW(tok.decode({-1}), Error);
  // Half a character decodes to U+FFFD (as the tokenizers library's from_utf8_lossy).
  const std::vector<int> ids = tok.encode("\U0001F9EA");  // a character the merges never saw whole
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(tok.decode({ids.begin(), ids.end() - 1}), "\xEF\xBF\xBD");  // one maximal ill-formed prefix
  EXPECT_EQ(tok.decode(ids), "\U0001F9EA");
}

TEST_F(HfTokenizerTest, FoldersAndFiles) {
  test::TempDir dir;
  EXPECT_THROW(Tokenizer::load(dir.path().string()), Error);  // neither file
  try {
    Tokenizer::load(dir.path().string());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tokenizer.json or tokenizer.model"), std::string::npos);
  }
  // tokenizer.json comes first; a file under another name is told apart by its bytes.
  fs::copy_file(kGolden / "gpt2/tokenizer.json", dir.path() / "tokenizer.json");
  write_file_atomic(dir.file("tokenizer.model"), "not a SentencePiece model");
  EXPECT_EQ(Tokenizer::load(dir.path().string()).kind(), TokenizerKind::byte_level_bpe);
  fs::copy_file(kGolden / "gpt2/tokenizer.json", dir.path() / "gpt2.bin");
  EXPECT_EQ(Tokenizer::load(dir.file("gpt2.bin")).vocab_size(), 557);
  EXPECT_EQ(resolve_tokenizer_path(dir.path().string()), dir.file("tokenizer.json"));
  EXPECT_THROW(Tokenizer::load(dir.file("missing.json")), Error);
  // A folder whose tokenizer.json is of another kind (Llama 2's: SentencePiece-style BPE) names
  // its tokenizer.model.
  json llama2 = read_json(kGolden / "llama3/tokenizer.json");
  llama2["pre_tokenizer"] = nullptr;
  fs::create_directories(dir.path() / "llama2");
  write_file_atomic(dir.file("llama2/tokenizer.json"), llama2.dump());
  write_file_atomic(dir.file("llama2/tokenizer.model"), "a SentencePiece model");
  try {
    Tokenizer::load(dir.file("llama2"));
    ADD_FAILURE() << "loaded a tokenizer.json without a pre-tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.model may serve: give " + dir.file("llama2/tokenizer.model")),
              std::string::npos) << e.what();
  }
}

// A mutation of the Llama 3 style file and what its one-line error must say.
struct Refusal {
  std::function<void(json&)> mutate;
  std::string needle;
};

TEST_F(HfTokenizerTest, RefusesWhatItDoesNotImplement) {
  const json base = read_json(kGolden / "llama3/tokenizer.json");
  auto pre = [](json& j) -> json& { return j["pre_tokenizer"]["pretokenizers"]; };
  const std::vector<Refusal> refusals = {
      {[](json& j) { j["model"]["type"] = "WordPiece"; }, "model.type \"WordPiece\""},
      {[](json& j) { j["model"]["type"] = "Unigram"; }, "model.type \"Unigram\""},
      {[](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
      {[](json& j) { j["model"]["byte_fallback"] = true; }, "model.byte_fallback"},
      {[](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "model.continuing_subword_prefix"},
      {[](json& j) { j["model"]["merges"].push_back(json::array({"zz", "q"})); }, "\"zz\" is not in model.vocab"},
      {[](json& j) { j["model"]["merges"][0] = "a b c"; }, "model.merges[0]"},
      {[](json& j) { j["model"]["unk_token"] = "<unk>"; }, "model.unk_token"},
      {[](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer.type \"Lowercase\""},
      {[](json& j) { j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}, {{"type", "NFC"}}}}}; },
       "normalizer.normalizers[0].type \"NFKC\""},
      {[](json& j) { j["pre_tokenizer"] = nullptr; }, "pre_tokenizer is null"},
      {[](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}}; }, "pre_tokenizer.type \"Metaspace\""},
      {[&](json& j) { pre(j).erase(1); }, "no ByteLevel step"},
      {[&](json& j) { pre(j).push_back({{"type", "Digits"}, {"individual_digits", true}}); }, "after ByteLevel"},
      {[&](json& j) { pre(j)[0]["behavior"] = "MergedWithPrevious"; }, "pretokenizers[0].behavior \"MergedWithPrevious\""},
      {[&](json& j) { pre(j)[0]["pattern"] = {{"Regex", "\\w+"}}; }, "pretokenizers[0].pattern: the pattern uses \\w"},
      {[&](json& j) { pre(j)[0]["pattern"] = {{"Regex", "[a[b]]"}}; }, "a nested class"},
      {[&](json& j) { pre(j)[0]["pattern"] = {{"Regex", "(?m:a.b)"}}; }, "(?m)"},
      {[&](json& j) { pre(j)[0]["pattern"] = {{"Regex", "(unclosed"}}; }, "does not compile"},
      {[&](json& j) { pre(j)[0]["pattern"] = "text"; }, "pretokenizers[0].pattern is neither"},
      {[](json& j) { j["decoder"] = {{"type", "Metaspace"}}; }, "decoder.type \"Metaspace\""},
      {[](json& j) { j["decoder"] = nullptr; }, "decoder is null"},
      {[](json& j) { j["post_processor"]["processors"][1]["type"] = "Novel"; }, "post_processor.processors[1].type \"Novel\""},
      {[](json& j) { j["truncation"] = {{"max_length", 512}}; }, "truncation is set"},
      {[](json& j) { j["padding"] = {{"strategy", "BatchLongest"}}; }, "padding is set"},
      {[](json& j) { j["added_tokens"][0]["single_word"] = true; }, "added_tokens[0].single_word"},
      {[](json& j) { j["added_tokens"][0]["content"] = "a"; }, "added_tokens[0]: \"a\" has id 580 but model.vocab gives it 97"},
      {[](json& j) { j["added_tokens"][1]["id"] = -3; }, "added_tokens[1].id is not a token id"},
      {[](json& j) { j["model"]["vocab"]["zz"] = 5; }, "id 5 is given to two tokens"},
      {[](json& j) { j["added_tokens"][1]["id"] = 1000000000; }, "the ids run to 1000000000 for 584 tokens"},
      {[](json& j) { j["model"].erase("vocab"); }, "model has no \"vocab\""},
  };
  test::TempDir dir;
  for (size_t i = 0; i < refusals.size(); ++i) {
    json j = base;
    refusals[i].mutate(j);
    const std::string path = dir.file("case" + std::to_string(i) + ".json");
    write_file_atomic(path, j.dump());
    try {
      Tokenizer::load(path);
      ADD_FAILURE() << "no error for case " << i << " (" << refusals[i].needle << ")";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path, 0), 0u) << what;  // names the file first
      EXPECT_NE(what.find(refusals[i].needle), std::string::npos) << "case " << i << ": " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  // The file's own tokenizer_config.json: an eos that is not a token.
  fs::create_directories(dir.path() / "bad_config");
  fs::copy_file(kGolden / "llama3/tokenizer.json", dir.path() / "bad_config/tokenizer.json");
  write_file_atomic(dir.file("bad_config/tokenizer_config.json"), R"({"eos_token": "<|nope|>"})");
  try {
    Tokenizer::load(dir.file("bad_config"));
    ADD_FAILURE() << "no error for an eos_token that is not a token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: eos_token \"<|nope|>\" is not a token"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::from_bytes("{\"model\": ", "broken"), Error);
}

// The pointers to every value in a tokenizer.json (`fields`) but the entries of model.vocab and
// model.merges, which go to `entries`.
void collect_values(const json& j, const json::json_pointer& at, std::vector<json::json_pointer>& fields,
                    std::vector<json::json_pointer>& entries) {
  fields.push_back(at);
  const bool table = at.to_string() == "/model/vocab" || at.to_string() == "/model/merges";
  if (j.is_object()) {
    for (const auto& [key, value] : j.items())
      if (table) entries.push_back(at / key);
      else collect_values(value, at / key, fields, entries);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i)
      if (table) entries.push_back(at / i);
      else collect_values(j[i], at / i, fields, entries);
  }
}

// 2000 seeded mutations of the five styles' files: a value (mostly one outside the vocabulary and
// merges) set to an edge value (a number out of range, a type name, a pattern, null, an empty list
// or object, another field's value), removed, or a byte of the text changed. Each file loads or
// throws pylon::Error with one line that names it first; one that loads encodes texts to ids in
// its vocabulary (or throws such an Error: a byte without a token) and decodes them.
TEST_F(HfTokenizerTest, MutationFuzz) {
  std::vector<json> bases;
  for (const char* style : {"gpt2", "llama3", "qwen2", "mixed", "splits"})
    if (can_load(style)) bases.push_back(read_json(kGolden / style / "tokenizer.json"));
  const std::vector<json> edges = {0, 1, -1, 97, 100000, (1ull << 31) - 1, 1ull << 40, 1.5, "", "a", "a b", "\u0120",
                                   "BPE", "ByteLevel", "Split", "Sequence", "Digits", "NFC", "NFKC", "Isolated",
                                   "Removed", "Contiguous", "(", "\\p{L}+", "\\s+(?!\\S)", "\\w", "[^", "(?i:a)*",
                                   "<|endoftext|>", "\n", nullptr, true, false, json::array(), json::object(),
                                   json::array({"a", "b"})};
  const std::vector<std::string> texts = {"", "Hello, world! don't 123 45", "<|endoftext|> <|eot_id|><mask>",
                                          "caf\u00e9 e\u0301 \u6771\u4eac \U0001F642\n\n  x", "-- a\u2003b"};
  test::TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  std::mt19937_64 rng(20261203);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    json j = bases[rng() % bases.size()];
    std::vector<json::json_pointer> fields, entries;
    collect_values(j, json::json_pointer(), fields, entries);
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const auto& list = rng() % 5 == 0 ? entries : fields;
      const json::json_pointer at = list[rng() % list.size()];
      if (at.empty() || !j.contains(at)) continue;
      switch (rng() % 4) {
        case 0: case 1: j[at] = edges[rng() % edges.size()]; break;
        case 2: {
          const json::json_pointer other = fields[rng() % fields.size()];
          j[at] = j.contains(other) ? json(j[other]) : json();
          break;
        }
        case 3: {
          json& parent = j[at.parent_pointer()];
          if (parent.is_object()) parent.erase(at.back());
          else if (parent.is_array()) parent.erase(parent.begin() + static_cast<std::ptrdiff_t>(std::stoul(at.back())));
        }
      }
    }
    std::string text = j.dump();
    if (rng() % 6 == 0) text[rng() % text.size()] = static_cast<char>(rng());
    write_file_atomic(path, text);
    try {
      const Tokenizer tok = Tokenizer::load(path);
      ++loaded;
      for (const std::string& t : texts) {
        try {
          const std::vector<int> ids = tok.encode(t);
          for (const int id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << "mutation " << iter;
          tok.decode(ids);
        } catch (const Error& e) {  // e.g. a byte that lost its token
          const std::string msg = e.what();
          EXPECT_EQ(msg.find('\n'), std::string::npos) << "mutation " << iter << ": " << msg;
          EXPECT_EQ(msg.rfind(path, 0), 0u) << "mutation " << iter << ": " << msg;
        }
      }
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "mutation " << iter << ": " << msg;
      EXPECT_EQ(msg.rfind(path, 0), 0u) << "mutation " << iter << ": " << msg;
      ++rejected;
    }
  }
  EXPECT_GT(loaded, 100);
  EXPECT_GT(rejected, 800);
}

TEST(UnicodeRegex, SpellsOnigurumaForPcre2) {
  EXPECT_EQ(pcre2_pattern_from_oniguruma(R"(\s+(?!\S)|[^\s\p{L}]|\h)", "t"),
            R"(\p{White_Space}+(?!\P{White_Space})|[^\p{White_Space}\p{L}]|[0-9A-Fa-f])");
  EXPECT_EQ(pcre2_pattern_from_oniguruma(R"([]a][[:alpha:]]\[)", "t"), R"([]a][[:alpha:]]\[)");
  for (const char* refused : {"\\w", "a\\b", "[\\W]", "[a[bc]]", "[a-z&&[^e]]", "(?mi:.)", "[\\H]"})
    EXPECT_THROW(pcre2_pattern_from_oniguruma(refused, "t"), Error) << refused;
  if (!UnicodeRegex::available()) return;
  const UnicodeRegex space("\\s", "t");
  std::vector<std::pair<size_t, size_t>> spans;
  space.find_all("a\u0085b\u180Ec\u00A0", spans);  // NEL and NBSP are White_Space; U+180E is not
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0], (std::pair<size_t, size_t>{1, 3}));
  EXPECT_EQ(spans[1], (std::pair<size_t, size_t>{8, 10}));
  const UnicodeRegex line_start("^x", "t");  // Oniguruma's ^ is at every line
  line_start.find_all("x\nx x", spans);
  EXPECT_EQ(spans.size(), 2u);
  const UnicodeRegex empty("a*", "t");  // empty matches move on by one character
  empty.find_all("\u00e9a", spans);
  EXPECT_EQ(spans.size(), 3u);
  const UnicodeRegex dot = UnicodeRegex::literal("a.b", "t");
  dot.find_all("axb a.b", spans);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].first, 4u);
}

TEST(UnicodeText, Utf8AndWhiteSpace) {
  EXPECT_EQ(utf8_invalid_offset("plain ascii text, long enough for words"), 39u);
  EXPECT_EQ(utf8_invalid_offset("caf\xc3\xa9\xe2\x82"), 5u);
  EXPECT_EQ(utf8_lossy("a\xe2\x82" "b\xff\xf0\x9f\x99\x82"), "a\uFFFDb\uFFFD\U0001F642");
  EXPECT_EQ(utf8_code_point("\xf0\x9f\x99\x82", 0), U'\U0001F642');
  EXPECT_TRUE(is_white_space(0x3000));
  EXPECT_FALSE(is_white_space(0x180E));
  if (have_unicode_normalization()) {
    EXPECT_EQ(nfc("e\u0301 A\u030a"), "\u00e9 \u00c5");
  }
}

}  // namespace
}  // namespace pylon
