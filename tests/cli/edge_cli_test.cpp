// pylon export / inspect and eval / generate from an edge file: the contract command lines of
// issue 6, eval losses within the stated bounds of the fp32 model, greedy generation identical in
// f16, bad edge files giving one clear line and exit code 1, and tensor checksums (format 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/load_model.h"
#include "io/atomic_file.h"
#include "io/edge_format.h"
#include "model/decoder.h"
#include "support/golden.h"
#include "support/hf_folder.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon {
namespace {

using testing::expect_clear_error;
using testing::read_file;
using testing::run_pylon;

using testing::kGolden;

double eval_loss(const std::string& model_args) {
  const auto r = run_pylon("eval " + model_args + " --device cpu --data " + kGolden +
                           "/tokens.bin --batch 2 --seq 16 --steps 3 --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(testing::last_line(r.out))["loss"].get<double>();
}

TEST(EdgeCli, ContractExportThenEvalWithinBounds) {
  testing::TempDir tmp;
  const double fp32 = eval_loss("--model " + kGolden + "/init.safetensors --preset seed --heads 4");
  struct Case {
    std::string quant;
    double rtol;  // relative to the fp32 model's loss
  };
  // f16: 1e-3 (measured 4e-6); int8: 1e-2 (measured 3e-6); int4, group 32: 1e-2 — each weight moves
  // by up to 1/14 of its group's max, with random signs, so the loss moves far less (measured 8e-4).
  for (const Case& c : {Case{"", 1e-3}, Case{"f16", 1e-3}, Case{"int8", 1e-2}, Case{"int4", 1e-2},
                        Case{"f32", 1e-6}}) {
    const std::string out = tmp.file("m" + c.quant + ".edge");
    const auto r = run_pylon("export --model " + kGolden + "/init.safetensors --preset seed --heads 4 --out " +
                             out + (c.quant.empty() ? "" : " --quant " + c.quant));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const double loss = eval_loss("--model " + out);
    EXPECT_NEAR(loss, fp32, c.rtol * fp32) << "quant " << c.quant;
    std::printf("[ edge ] %s eval loss %.7f vs fp32 %.7f: relative %.2e\n",
                c.quant.empty() ? "default (f16)" : c.quant.c_str(), loss, fp32,
                std::fabs(loss - fp32) / fp32);
  }
  const auto r64 = run_pylon("export --model " + kGolden + "/init.safetensors --preset seed --heads 4 --out " +
                             tmp.file("g64.edge") + " --quant int4 --group-size 64");
  ASSERT_EQ(r64.exit_code, 0) << r64.err;
  EXPECT_NEAR(eval_loss("--model " + tmp.file("g64.edge")), fp32, 2e-2 * fp32);
}

TEST(EdgeCli, InspectPrintsTheHeader) {
  testing::TempDir tmp;
  const std::string out = tmp.file("m.edge");
  ASSERT_EQ(run_pylon("export --model " + kGolden + "/init.safetensors --preset seed --heads 4 --out " + out +
                      " --quant int8").exit_code, 0);
  const auto r = run_pylon("inspect " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* needle : {"preset seed", "vocab 97", "dim 32", "layers 2", "heads 4", "tokenizer: none",
                             "layers.1.ffn.2.weight", "int8", "(32, 128)", "per row", "total ",
                             "weights read per decoded token"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << "\n" << r.out;
  EXPECT_EQ(run_pylon("inspect --help").exit_code, 0);
}

TEST(EdgeCli, BadArgumentsAndFilesGiveOneLine) {
  testing::TempDir tmp;
  const std::string model = "--model " + kGolden + "/init.safetensors --preset seed --heads 4 ";
  expect_clear_error(run_pylon("export " + model + "--out " + tmp.file("a.edge") + " --quant int2"), "int2");
  expect_clear_error(run_pylon("export " + model + "--out " + tmp.file("a.edge") + " --quant int4 --group-size 16"),
                     "group-size");
  expect_clear_error(run_pylon("export " + model), "--out");
  expect_clear_error(run_pylon("export " + model + "--out " + tmp.file("a.edge") + " --tokenizer " +
                               tmp.file("none.model")), "none.model");
  expect_clear_error(run_pylon("inspect " + kGolden + "/init.safetensors"), "not a Pylon edge model");

  const std::string good = tmp.file("good.edge");
  ASSERT_EQ(run_pylon("export " + model + "--out " + good + " --quant int4").exit_code, 0);
  const std::string bytes = read_text_file(good);
  const std::string bad = tmp.file("bad.edge");
  for (size_t n : {size_t{4}, size_t{30}, size_t{4096}, bytes.size() / 2, bytes.size() - 1}) {
    write_file_atomic(bad, bytes.substr(0, n));
    expect_clear_error(run_pylon("eval --model " + bad + " --device cpu --data " + kGolden + "/tokens.bin"),
                       "bad.edge");
    expect_clear_error(run_pylon("inspect " + bad), "bad.edge");
  }
  std::string flipped = bytes;
  flipped[100] = static_cast<char>(flipped[100] ^ 0x20);
  write_file_atomic(bad, flipped);
  expect_clear_error(run_pylon("generate --model " + bad + " --prompt hi"), "checksum");
}

// A llama model from a Hugging Face folder (MQA, head size != D/H, q/k/v biases, tied head) exports
// at every precision and evaluates on the CPU within the same bounds of the folder's fp32 loss;
// inspect prints its per-model options.
TEST(EdgeCli, LlamaFolderExportsAndEvaluatesWithinBounds) {
  testing::TempDir tmp;
  const std::string folder = testing::hf_folder_from_golden("llama_mqa_tied", tmp.file("hf"));
  const std::string data = std::string(PYLON_GOLDEN_DIR) + "/llama_mqa_tied/tokens.bin";
  const auto eval = [&](const std::string& model) {
    const auto r = run_pylon("eval --model " + model + " --device cpu --data " + data +
                             " --batch 2 --seq 16 --steps 3 --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(testing::last_line(r.out))["loss"].get<double>();
  };
  const double fp32 = eval(folder);
  for (const auto& [quant, rtol] : {std::pair{"f32", 1e-6}, {"f16", 1e-3}, {"int8", 1e-2}, {"int4", 1e-2}}) {
    const std::string edge = tmp.file(std::string(quant) + ".edge");
    const auto r = run_pylon("export --model " + folder + " --out " + edge + " --quant " + quant);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const double loss = eval(edge);
    EXPECT_NEAR(loss, fp32, rtol * fp32) << quant;
    std::printf("[ edge ] llama %s eval loss %.7f vs fp32 %.7f: relative %.2e\n", quant, loss, fp32,
                std::fabs(loss - fp32) / fp32);
  }
  const auto r = run_pylon("inspect " + tmp.file("int8.edge"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* needle : {"preset llama", "kv heads 1", "head dim 10", "ffn 40", "q/k/v bias yes",
                             "tied head yes", "rope_theta 500000", "mlp.gate_up_proj.weight"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << "\n" << r.out;
}

// A tiny causal model trained by pylon train with a tokenizer: the f16 export generates the same
// greedy text as the fp32 checkpoint (CLI, tokenizer read from the edge file) and the same ids
// through the Decoder; the int8 and int4 exports generate on the CPU too (read in place).
TEST(EdgeCli, GreedyGenerationIdenticalInF16) {
#ifndef PYLON_HAVE_SENTENCEPIECE
  GTEST_SKIP() << "built without SentencePiece";
#endif
  testing::TempDir tmp;
  const char* words[] = {"red", "green", "blue", "sky", "sea", "under", "over", "the", "a", "is"};
  std::mt19937 rng(3);
  std::string text;  // each word fixes the next (3 places on), so greedy output varies
  for (int line = 0; line < 1500; ++line) {
    const size_t start = rng() % std::size(words);
    for (size_t w = 0; w < 8; ++w)
      text += std::string(w ? " " : "") + words[(start + 3 * w) % std::size(words)];
    text += "\n";
  }
  write_file_atomic(tmp.file("in.txt"), text);
  ASSERT_EQ(run_pylon("tokenize --input " + tmp.file("in.txt") + " --train-vocab 300 --out " +
                      tmp.file("d.bin")).exit_code, 0);
  // The model's vocab is padded past the tokenizer's (320 > 300): generate samples only ids the
  // tokenizer can decode.
  const auto train = run_pylon("train --preset causal --vocab 320 --dim 32 --layers 2 --heads 4 --batch 8 "
                               "--seq 32 --steps 100 --lr 1e-2 --data " + tmp.file("d.bin") + " --tokenizer " +
                               tmp.file("d.model") + " --eval-every 0 --save " + tmp.file("ckpt") +
                               " --device cpu --dtype fp32");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const std::string edge = tmp.file("m.edge");
  ASSERT_EQ(run_pylon("export --model " + tmp.file("ckpt") + " --out " + edge).exit_code, 0);  // f16

  const std::string gen = " --prompt 'the sky is' --max-new-tokens 24 --temperature 0 --device cpu";
  const auto a = run_pylon("generate --model " + tmp.file("ckpt") + gen);
  const auto b = run_pylon("generate --model " + edge + gen);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_GT(a.out.size(), std::string("the sky is").size() + 20);
  std::printf("[ edge ] greedy, fp32 checkpoint and f16 edge file: %s", a.out.c_str());

  const LoadedModel fp32 = load_model(tmp.file("ckpt"), {}, false, false);
  const LoadedModel f16 = load_model(edge, {}, false, false);
  EXPECT_FALSE(f16.tokenizer_model.empty());
  auto greedy = [](const LoadedModel& m) {
    Decoder d(m.config, m.params.data(), 64);
    std::vector<int32_t> ids = {5, 17, 42, 7};
    const float* logits = d.feed(ids.data(), static_cast<int>(ids.size()));
    for (int i = 0; i < 40; ++i) {
      const int32_t next = static_cast<int32_t>(std::max_element(logits, logits + m.config.vocab) - logits);
      ids.push_back(next);
      logits = d.feed(&next, 1);
    }
    return ids;
  };
  EXPECT_EQ(greedy(fp32), greedy(f16));

  // int8 and int4 files on the CPU: the decoder reads them in place (no fp32 copy) and generates.
  for (const char* quant : {"int8", "int4"}) {
    const std::string q = tmp.file(std::string("m_") + quant + ".edge");
    ASSERT_EQ(run_pylon("export --model " + tmp.file("ckpt") + " --out " + q + " --quant " + quant).exit_code, 0);
    const auto r = run_pylon("generate --model " + q + gen);
    ASSERT_EQ(r.exit_code, 0) << quant << ": " << r.err;
    EXPECT_EQ(r.out.rfind("the sky is", 0), 0u) << r.out;
    EXPECT_GT(r.out.size(), std::string("the sky is").size() + 20) << quant;
    EXPECT_NE(r.err.find("tokens/s (cpu)"), std::string::npos) << r.err;
    std::printf("[ edge ] greedy, %s edge file on the CPU: %s", quant, r.out.c_str());
  }
}

// Format version 2 (issue 38): per-tensor checksums that `inspect --verify` and every load check,
// a flipped byte named by its tensor; version 1 files still load, with NaN/Inf checked.
const std::string kInit = kGolden + "/init.safetensors";
const std::string kStateDict = "--preset seed --heads 4";
const std::string kEvalData = " --data " + kGolden + "/tokens.bin --batch 2 --seq 16 --steps 1 --json";

// Writes bytes over a file (as a disk or an editor would change it).
void overwrite(const std::string& path, const std::string& bytes) { write_file_atomic(path, bytes); }

// The tensor whose data holds byte `at` of the file.
const EdgeTensor* tensor_at(const EdgeFile& f, uint64_t at) {
  for (const EdgeTensor& t : f.tensors())
    if (at >= t.offset && at < t.offset + t.length) return &t;
  return nullptr;
}

// The same file as format version 1: the checksums dropped from the header (the data stays where
// it is: the shorter header leaves it 4096-aligned).
void write_as_version_1(const std::string& v2, const std::string& out, const std::string& nan_tensor = "") {
  const EdgeFile f(v2);
  std::string bytes = read_file(v2);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(kEdgeFixedHeaderBytes, f.header_json_bytes()));
  if (header.contains("tokenizer")) header["tokenizer"].erase("xxh3_64");
  for (auto& t : header["tensors"]) t.erase("xxh3_64");
  const std::string text = header.dump();
  ASSERT_LE(text.size(), f.header_json_bytes());
  const uint32_t version = 1, crc = crc32(text.data(), text.size());
  const uint64_t n = text.size();
  std::string out_bytes = bytes.substr(0, 8);
  out_bytes.append(reinterpret_cast<const char*>(&version), 4);
  out_bytes.append(reinterpret_cast<const char*>(&crc), 4);
  out_bytes.append(reinterpret_cast<const char*>(&n), 8);
  out_bytes += text;
  out_bytes.append(kEdgeFixedHeaderBytes + f.header_json_bytes() - out_bytes.size(), '\0');
  out_bytes += bytes.substr(out_bytes.size());
  if (const EdgeTensor* t = nan_tensor.empty() ? nullptr : f.find(nan_tensor)) {
    ASSERT_EQ(t->dtype, EdgeDType::f16);
    out_bytes[t->offset + 2 * 5] = '\x00';
    out_bytes[t->offset + 2 * 5 + 1] = '\x7e';  // f16 NaN
  }
  overwrite(out, out_bytes);
}

TEST(EdgeCli, EdgeTensorChecksumsAreCheckedByInspectVerifyAndAtLoad) {
  testing::TempDir tmp;
  const std::string edge = tmp.file("m.edge");
  ASSERT_EQ(run_pylon("export --model " + kInit + " " + kStateDict + " --out " + edge + " --quant int4").exit_code, 0);
  const auto ok = run_pylon("inspect --verify " + edge);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const std::string count = std::to_string(EdgeFile(edge).tensors().size());
  EXPECT_NE(ok.out.find("ok, " + count + " tensors match their checksums"), std::string::npos) << ok.out;
  EXPECT_NE(run_pylon("inspect " + edge).out.find("format version 2"), std::string::npos);
  {
    const EdgeFile f(edge);
    const EdgeTensor* t = f.find("layers.0.ffn.0.weight");
    ASSERT_TRUE(t);
    std::string bytes = read_file(edge);
    bytes[t->offset + 100] ^= 0x04;  // an int4 nibble: any value is a valid weight
    ASSERT_EQ(tensor_at(f, t->offset + 100), t);
    overwrite(tmp.file("bad.edge"), bytes);
  }
  expect_clear_error(run_pylon("inspect --verify " + tmp.file("bad.edge")),
                     "tensor \"layers.0.ffn.0.weight\" checksum mismatch");
  expect_clear_error(run_pylon("inspect " + tmp.file("bad.edge") + " --verify"), "layers.0.ffn.0.weight");
  EXPECT_EQ(run_pylon("inspect " + tmp.file("bad.edge")).exit_code, 0);  // the header alone
  for (const std::string& cmd : {"eval --model " + tmp.file("bad.edge") + kEvalData,
                                 "generate --model " + tmp.file("bad.edge") + " --prompt hi --tokenizer " +
                                     tmp.file("none.model"),
                                 "export --model " + tmp.file("bad.edge") + " --out " + tmp.file("again.edge")})
    expect_clear_error(run_pylon(cmd), "tensor \"layers.0.ffn.0.weight\" checksum mismatch");
}

TEST(EdgeCli, EdgeVersion1FilesStillLoadAndNanIsNamed) {
  testing::TempDir tmp;
  const std::string edge = tmp.file("m.edge");
  ASSERT_EQ(run_pylon("export --model " + kInit + " " + kStateDict + " --out " + edge).exit_code, 0);  // f16
  write_as_version_1(edge, tmp.file("v1.edge"));
  const auto info = run_pylon("inspect " + tmp.file("v1.edge"));
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("format version 1"), std::string::npos) << info.out;
  const auto verify = run_pylon("inspect --verify " + tmp.file("v1.edge"));
  ASSERT_EQ(verify.exit_code, 0) << verify.err;
  EXPECT_NE(verify.out.find("format version 1 has no checksums"), std::string::npos) << verify.out;
  const auto v1 = run_pylon("eval --model " + tmp.file("v1.edge") + kEvalData);
  const auto v2 = run_pylon("eval --model " + edge + kEvalData);
  ASSERT_EQ(v1.exit_code, 0) << v1.err;
  EXPECT_EQ(testing::last_line(v1.out), testing::last_line(v2.out));
  write_as_version_1(edge, tmp.file("nan.edge"), "layers.1.norm2.weight");
  expect_clear_error(run_pylon("inspect --verify " + tmp.file("nan.edge")), "\"layers.1.norm2.weight\" holds NaN");
  expect_clear_error(run_pylon("eval --model " + tmp.file("nan.edge") + kEvalData), "layers.1.norm2.weight");
}

}  // namespace
}  // namespace pylon
