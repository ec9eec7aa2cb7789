// The edge file: export -> read round trip of every tensor at each precision (with the stated error
// bounds), 4096-byte alignment of every blob, and corrupt or truncated files giving one-line
// pylon::Error naming the file, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/edge_format.h"
#include "io/test_util.h"
#include "model/edge_model.h"
#include "model/edge_weights.h"
#include "model/params.h"

namespace pylon {
namespace {

using nlohmann::json;

// dim 40: the in-dims 40 and 160 leave partial int4 groups of 32 and 64.
ModelConfig small_config() {
  ModelConfig c;
  c.preset = find_preset("causal");
  c.vocab = 61;
  c.dim = 40;
  c.layers = 2;
  c.heads = 4;
  return c;
}

struct Model {
  ModelConfig config = small_config();
  ParamTable table = param_table(config);
  std::vector<float> flat;
  Model() : flat(static_cast<size_t>(table.total)) {
    init_params(table, 7, flat.data());
    for (size_t i = 0; i < flat.size(); ++i) flat[i] += 0.01f * std::sin(static_cast<float>(i));  // no exact ones/zeros
  }
};

const std::string kTokenizer = "not a real SentencePiece model, only bytes to carry";

std::string write_model(const test::TempDir& dir, const Model& m, const EdgeQuant& q,
                        const std::string& name = "m.edge") {
  const std::string path = dir.file(name);
  write_edge_model(path, m.config, encode_edge_tensors(m.table, m.flat.data(), q), kTokenizer);
  return path;
}

float max_abs(const float* w, int64_t n) {
  float a = 0;
  for (int64_t i = 0; i < n; ++i) a = std::max(a, std::fabs(w[i]));
  return a;
}

// Checks every tensor against its bound; returns the largest error / bound seen.
double check_round_trip(const Model& m, const EdgeFile& file, const EdgeQuant& q) {
  double worst = 0;
  for (size_t pi = 0; pi < m.table.params.size(); ++pi) {
    const ParamInfo& p = m.table.params[pi];
    const EdgeTensor* t = file.find(p.name);
    EXPECT_NE(t, nullptr) << p.name;
    if (!t) continue;
    EXPECT_EQ(t->offset % 4096, 0u) << p.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(file.values(*t)) % 4096, 0u) << p.name;
    if (t->quantized()) {
      EXPECT_EQ(t->scale_offset % 4096, 0u) << p.name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(file.scales(*t)) % 4096, 0u) << p.name;
    }
    std::vector<float> out(static_cast<size_t>(p.numel), std::nanf(""));
    decode_edge_tensor(file, *t, out.data());
    const float* w = m.flat.data() + p.offset;
    const int64_t cols = p.shape.size() == 2 ? p.shape[1] : p.numel;
    for (int64_t i = 0; i < p.numel; ++i) {
      const float err = std::fabs(out[i] - w[i]);
      double bound = 0;
      switch (t->dtype) {
        case EdgeDType::f32: bound = 0; break;
        case EdgeDType::f16: bound = 1e-3 * std::fabs(w[i]) + 1e-7; break;  // f16: 2^-11 relative
        case EdgeDType::int8:  // scale / 2, scale = row max / 127
          bound = 0.5 * max_abs(w + (i / cols) * cols, cols) / 127 * (1 + 1e-5);
          break;
        case EdgeDType::int4: {  // scale / 2, scale = group max / 7 (f16 scales: rounded up <= 2^-10)
          const int64_t row = i / cols, g0 = (i % cols) / t->group_size * t->group_size;
          const int64_t g1 = std::min(cols, g0 + t->group_size);
          const double s = max_abs(w + row * cols + g0, g1 - g0) / 7;
          bound = 0.5 * s * (t->scale_dtype == EdgeDType::f16 ? 1 + 1e-3 : 1 + 1e-5);
          break;
        }
      }
      EXPECT_LE(err, bound) << p.name << " element " << i;
      if (bound > 0) worst = std::max(worst, err / bound);
    }
    EXPECT_EQ(t->dtype, is_quantizable(m.table, pi) ? q.matrices
                                          : (q.matrices == EdgeDType::f32 ? EdgeDType::f32 : EdgeDType::f16))
        << p.name;
  }
  return worst;
}

TEST(EdgeFormat, RoundTripEveryPrecision) {
  test::TempDir dir;
  const Model m;
  std::vector<EdgeQuant> quants = {{EdgeDType::f32, 32, EdgeDType::f16},
                                   {EdgeDType::f16, 32, EdgeDType::f16},
                                   {EdgeDType::int8, 32, EdgeDType::f16},
                                   {EdgeDType::int4, 32, EdgeDType::f16},
                                   {EdgeDType::int4, 64, EdgeDType::f16},
                                   {EdgeDType::int4, 32, EdgeDType::f32}};
  for (const EdgeQuant& q : quants) {
    const std::string path = write_model(dir, m, q);
    const EdgeModel model(path);
    const EdgeFile& file = model.file;
    EXPECT_EQ(model.config.dim, m.config.dim);
    EXPECT_EQ(model.config.layers, m.config.layers);
    EXPECT_EQ(model.config.heads, m.config.heads);
    EXPECT_EQ(model.config.vocab, m.config.vocab);
    EXPECT_EQ(model.config.preset, m.config.preset);
    EXPECT_EQ(model.config.norm_eps, m.config.norm_eps);
    EXPECT_EQ(std::string(file.tokenizer()), kTokenizer);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(file.tokenizer().data()) % 4096, 0u);
    EXPECT_EQ(file.mapped().size() % 4096, 0u);
    const double worst = check_round_trip(m, file, q);
    std::printf("[ edge ] %s group %d %s scales: largest error / bound = %.3f\n",
                edge_dtype_name(q.matrices), q.group_size, edge_dtype_name(q.int4_scales), worst);
    std::vector<float> flat(m.flat.size());
    load_edge_weights(file, m.table, flat.data());
    if (q.matrices == EdgeDType::f32) {
      EXPECT_EQ(flat, m.flat);
    }
  }
}

TEST(EdgeFormat, NoTokenizerAndMagicDetection) {
  test::TempDir dir;
  const Model m;
  const std::string path = dir.file("nt.edge");
  write_edge_model(path, m.config, encode_edge_tensors(m.table, m.flat.data(), {}), "");
  const EdgeFile file(path);
  EXPECT_TRUE(file.tokenizer().empty());
  EXPECT_TRUE(EdgeFile::has_magic(path));
  test::write_bytes(dir.file("x.safetensors"), "not an edge file");
  EXPECT_FALSE(EdgeFile::has_magic(dir.file("x.safetensors")));
  EXPECT_FALSE(EdgeFile::has_magic(dir.file("missing")));
}

// Opening `path` as a model must throw pylon::Error: one line naming the file.
void expect_clean_error(const std::string& path, const std::string& needle, const std::string& context) {
  try {
    const EdgeModel model(path);
    ADD_FAILURE() << context << ": opened without an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << context << ": " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << context << ": " << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << context << ": " << msg;
  }
}

TEST(EdgeFormat, TruncatedAtManyLengthsIsAnError) {
  test::TempDir dir;
  const Model m;
  const std::string good = test::read_bytes(write_model(dir, m, {EdgeDType::int4, 32, EdgeDType::f16}));
  std::vector<size_t> lengths = {0, 1, 7, 8, 12, 16, 23, 24, 25, 100, 1000, 4095, 4096, 4097};
  for (size_t n = 8192; n < good.size(); n += 4096) lengths.insert(lengths.end(), {n - 1, n, n + 1});
  lengths.push_back(good.size() - 1);
  const std::string path = dir.file("cut.edge");
  for (size_t n : lengths) {
    if (n >= good.size()) continue;
    test::write_bytes(path, good.substr(0, n));
    expect_clean_error(path, "", "truncated at " + std::to_string(n));
  }
}

TEST(EdgeFormat, FlippedHeaderBytesAreAnError) {
  test::TempDir dir;
  const Model m;
  const std::string good = test::read_bytes(write_model(dir, m, {EdgeDType::int8, 32, EdgeDType::f16}));
  uint64_t json_bytes;
  std::memcpy(&json_bytes, good.data() + 16, 8);
  const std::string path = dir.file("flip.edge");
  for (size_t i = 0; i < kEdgeFixedHeaderBytes + json_bytes; i += (i < 64 ? 1 : 13)) {
    for (int mask : {0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      test::write_bytes(path, bad);
      expect_clean_error(path, "", "byte " + std::to_string(i) + " ^ " + std::to_string(mask));
    }
  }
}

json header_of(const std::string& good) {
  uint64_t json_bytes;
  std::memcpy(&json_bytes, good.data() + 16, 8);
  return json::parse(good.substr(kEdgeFixedHeaderBytes, json_bytes));
}

// The file with header text `text` (a correct checksum and length), the data where it was; ""
// where the text does not fit before the data.
std::string with_header_text(const std::string& good, const std::string& text) {
  uint64_t json_bytes;
  std::memcpy(&json_bytes, good.data() + 16, 8);
  const uint64_t data_start = (kEdgeFixedHeaderBytes + json_bytes + 4095) / 4096 * 4096;
  if (kEdgeFixedHeaderBytes + text.size() > data_start) return "";
  std::string out = good;
  const uint32_t crc = crc32(text.data(), text.size());
  const uint64_t n = text.size();
  std::memcpy(out.data() + 12, &crc, 4);
  std::memcpy(out.data() + 16, &n, 8);
  std::memset(out.data() + kEdgeFixedHeaderBytes, 0, data_start - kEdgeFixedHeaderBytes);
  std::memcpy(out.data() + kEdgeFixedHeaderBytes, text.data(), text.size());
  return out;
}

// Rewrites the JSON header (with a correct checksum), keeping the data where it was.
std::string with_header(const std::string& good, const std::function<void(json&)>& edit) {
  json h = header_of(good);
  edit(h);
  const std::string out = with_header_text(good, h.dump());
  EXPECT_FALSE(out.empty()) << "the edited header does not fit before the data";
  return out;
}

json& tensor(json& h, const std::string& name) {
  for (json& t : h["tensors"])
    if (t["name"] == name) return t;
  throw std::runtime_error("no tensor " + name);
}

TEST(EdgeFormat, BadHeadersNameTheProblem) {
  test::TempDir dir;
  const Model m;
  const std::string good = test::read_bytes(write_model(dir, m, {EdgeDType::int4, 32, EdgeDType::f16}));
  const std::string w = "layers.1.ffn.0.weight", b = "layers.0.attn.in_proj_bias";
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[&](json& h) { tensor(h, b)["offset"] = tensor(h, b)["offset"].get<uint64_t>() + 1; }, "multiple of 4096"},
      {[&](json& h) { tensor(h, b)["offset"] = 0; }, "inside the header"},
      {[&](json& h) { tensor(h, b)["offset"] = 1ull << 40; }, "past the end"},
      {[&](json& h) { tensor(h, b)["offset"] = tensor(h, w)["offset"]; }, "overlap"},
      {[&](json& h) { tensor(h, b)["length"] = 4; }, "length"},
      {[&](json& h) { tensor(h, b)["dtype"] = "f8"; }, "unknown dtype"},
      {[&](json& h) { tensor(h, b)["dtype"] = "int8"; }, "not a matrix"},
      {[&](json& h) { tensor(h, "embed.weight")["shape"] = {40, 61}; }, "expected (61, 40)"},
      {[&](json& h) { tensor(h, w)["quant"]["group_size"] = 16; }, "group size"},
      {[&](json& h) { tensor(h, w)["quant"]["scale_offset"] = 1ull << 40; }, "past the end"},
      {[&](json& h) { tensor(h, w)["quant"].erase("scale_length"); }, "scale_length"},
      {[&](json& h) { tensor(h, w)["name"] = "layers.1.ffn.9.weight"; }, "missing"},
      {[&](json& h) { h["tensors"].erase(h["tensors"].begin()); }, "missing"},
      {[&](json& h) { h["tensors"].push_back(h["tensors"][0]); }, "twice"},
      {[&](json& h) { h["config"]["heads"] = 3; h["config"].erase("kv_heads"); h["config"].erase("head_dim"); },
       "divisible"},
      {[&](json& h) { h["config"]["kv_heads"] = 3; }, "kv heads 3"},
      {[&](json& h) { h["config"]["kv_heads"] = -1; }, "kv_heads"},
      {[&](json& h) { h["config"]["tied_head"] = 1; }, "tied_head"},
      {[&](json& h) { h["config"]["ffn_dim"] = 7; }, "MLP width"},
      {[&](json& h) { h["config"]["layers"] = 3; }, "missing"},
      {[&](json& h) { h["config"]["preset"] = "gpt"; }, "preset"},
      {[&](json& h) { h["config"]["dim"] = -40; }, "dim"},
      {[&](json& h) { h["config"].erase("vocab"); }, "vocab"},
      {[&](json& h) { h["config"]["rope_theta"] = 0; }, "config.rope_theta = 0 must be positive"},
      {[&](json& h) { h["config"]["rope_theta"] = -10000; }, "config.rope_theta = -10000 must be positive"},
      {[&](json& h) { h["config"]["rope_theta"] = 1e300; }, "config.rope_theta"},
      {[&](json& h) { h["config"]["norm_eps"] = 0; }, "config.norm_eps = 0 must be positive"},
      {[&](json& h) { h["config"]["layers"] = 0; }, "config.layers"},
      {[&](json& h) { h["tokenizer"]["offset"] = 4097; }, "tokenizer"},
      {[&](json& h) { h["tokenizer"]["length"] = 0; }, "tokenizer"},
      {[&](json& h) { h["tensors"] = "none"; }, "tensors"},
  };
  const std::string path = dir.file("bad.edge");
  for (size_t i = 0; i < cases.size(); ++i) {
    test::write_bytes(path, with_header(good, cases[i].first));
    expect_clean_error(path, cases[i].second, "case " + std::to_string(i));
  }
  std::string bad_version = good;
  bad_version[8] = 3;  // 1 and 2 load
  test::write_bytes(path, bad_version);
  expect_clean_error(path, "version", "version 3");
}

// Format version 2 (issue 38): each tensor's XXH3-64 covers its values and scales, the tokenizer's
// its bytes. A flipped byte anywhere in them is named by verify_tensors and refused at load; the
// header alone still opens (inspect), and a file whose checksum field is not 16 hex digits does not.
TEST(EdgeFormat, Version2ChecksumsNameTheCorruptedTensor) {
  test::TempDir dir;
  const Model m;
  const std::string path = write_model(dir, m, {EdgeDType::int4, 32, EdgeDType::f16});
  const std::string good = test::read_bytes(path);
  {
    const EdgeFile f(path);
    EXPECT_EQ(f.version(), 2u);
    EXPECT_EQ(f.verify_tensors(), m.table.params.size());
  }
  const EdgeFile f(path);
  const EdgeTensor* ffn = f.find("layers.1.ffn.2.weight");
  const EdgeTensor* norm = f.find("layers.0.norm1.weight");
  ASSERT_TRUE(ffn && ffn->quantized() && norm);
  struct Flip {
    uint64_t at;
    std::string needle;
  };
  for (const Flip& flip : {Flip{ffn->offset + 7, "tensor \"layers.1.ffn.2.weight\" checksum mismatch"},
                           Flip{ffn->scale_offset + ffn->scale_length - 1, "\"layers.1.ffn.2.weight\" checksum"},
                           Flip{norm->offset, "tensor \"layers.0.norm1.weight\" checksum mismatch"},
                           Flip{f.tensors().back().offset + f.tensors().back().length - 1, f.tensors().back().name},
                           Flip{static_cast<uint64_t>(f.tokenizer().data() - reinterpret_cast<const char*>(f.mapped().data())),
                                "tokenizer checksum mismatch"}}) {
    std::string bad = good;
    bad[flip.at] = static_cast<char>(bad[flip.at] ^ 0x20);
    const std::string bad_path = dir.file("bad.edge");
    test::write_bytes(bad_path, bad);
    const EdgeModel header_only(bad_path, /*check_data=*/false);  // inspect's view: opens
    EXPECT_THROW(header_only.file.verify_tensors(), Error) << flip.needle;
    expect_clean_error(bad_path, flip.needle, flip.needle);
  }
  const std::string broken = with_header(good, [](json& h) { h["tensors"][0]["xxh3_64"] = "xyz"; });
  test::write_bytes(dir.file("field.edge"), broken);
  expect_clean_error(dir.file("field.edge"), "xxh3_64", "checksum field");
  const std::string missing = with_header(good, [](json& h) { h["tensors"][1].erase("xxh3_64"); });
  test::write_bytes(dir.file("missing.edge"), missing);
  expect_clean_error(dir.file("missing.edge"), "xxh3_64", "missing checksum field");
}

// 3000 seeded mutations of a valid file's header that keep its checksum right, so that each
// reaches the checks past it: a leaf of the JSON set to an edge value (0, -1, 4095-4097, 2^32,
// 2^40, 2^63, a fraction, a string, null, an empty array or object, another leaf's value), a
// key or a tensor entry removed, a tensor entry repeated, or a byte of the text changed. Each file
// opens or throws pylon::Error with one line naming it; one that opens has every tensor decoded.
TEST(EdgeFormat, HeaderMutationFuzz) {
  test::TempDir dir;
  const Model m;
  const std::string good = test::read_bytes(write_model(dir, m, {EdgeDType::int4, 32, EdgeDType::f16}));
  const json flat = header_of(good).flatten();
  std::vector<std::string> leaves;
  for (auto it = flat.begin(); it != flat.end(); ++it) leaves.push_back(it.key());
  const std::vector<json> edges = {0,    1,    -1,   4095, 4096, 4097, 1ull << 32, 1ull << 40, (1ull << 63) + 5,
                                   1.5,  -1e300, "",  "f16", "int4", nullptr, true};
  const std::string path = dir.file("fuzz.edge");
  std::mt19937_64 rng(20261201);
  int opened = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    json h = flat;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::string& leaf = leaves[rng() % leaves.size()];
      switch (rng() % 4) {
        case 0: h[leaf] = edges[rng() % edges.size()]; break;
        case 1: h[leaf] = flat[leaves[rng() % leaves.size()]]; break;
        case 2: h.erase(leaf); break;
        case 3: h[leaf] = flat[leaf].is_number_unsigned() ? json(flat[leaf].get<uint64_t>() + 4096 * (rng() % 3)) : json(0); break;
      }
    }
    json full = h.unflatten();
    const json::json_pointer at(leaves[rng() % leaves.size()]);
    if (rng() % 10 == 0 && full.contains(at)) full[at] = rng() % 2 ? json::array() : json::object();
    if (rng() % 10 == 0 && full["tensors"].is_array() && !full["tensors"].empty()) {
      json& list = full["tensors"];
      const size_t i = rng() % list.size();
      if (rng() % 2) list.push_back(list[i]);
      else list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    }
    std::string text = full.dump();
    if (rng() % 5 == 0 && !text.empty()) text[rng() % text.size()] = static_cast<char>(rng());
    const std::string bytes = with_header_text(good, text);
    if (bytes.empty()) continue;
    test::write_bytes(path, bytes);
    try {
      const EdgeModel model(path);
      for (const EdgeTensor& t : model.file.tensors()) {
        std::vector<float> out(static_cast<size_t>(t.numel()));
        decode_edge_tensor(model.file, t, out.data());
      }
      ++opened;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "mutation " << iter << ": " << msg;
      EXPECT_NE(msg.find(path), std::string::npos) << "mutation " << iter << ": " << msg;
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 2000);
  std::printf("[ edge ] header mutations: %d opened, %d rejected\n", opened, rejected);
}

}  // namespace
}  // namespace pylon
