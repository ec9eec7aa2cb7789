// The one metrics schema (train/metrics.h): docs/formats.md documents exactly its fields, and a CPU
// run's rows follow it (the CUDA runs' rows are checked in tests/train/cuda).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "io/token_file.h"
#include "support/metrics_check.h"
#include "support/temp_dir.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace pylon {
namespace {

// The rows of docs/formats.md's metrics table: field name -> its "when" column.
std::map<std::string, std::string> documented_fields() {
  std::ifstream in(std::string(PYLON_DOCS_DIR) + "/formats.md");
  std::map<std::string, std::string> out;
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Metrics";
    if (!in_section || line.rfind("| `", 0) != 0) continue;
    const size_t name_end = line.find('`', 3);
    const size_t when_begin = line.find("| ", name_end) + 2;
    const size_t when_end = line.find(" |", when_begin);
    out[line.substr(3, name_end - 3)] = line.substr(when_begin, when_end - when_begin);
  }
  return out;
}

TEST(Metrics, DocsTableEqualsTheSchema) {
  const std::map<std::string, std::string> when_text = {
      {"always", "every step"}, {"world > 1", "several ranks"}, {"validation", "a validation step"}, {"cuda", "GPUs"}, {"nvml", "GPUs with NVML"}};
  std::map<std::string, std::string> schema;
  for (const MetricField& f : metrics_schema()) schema[f.name] = when_text.at(f.when);
  EXPECT_EQ(documented_fields(), schema) << "docs/formats.md's metrics table and train/metrics.cpp differ";
}

TEST(Metrics, CpuRowsFollowTheSchema) {
  testing::TempDir tmp;
  std::vector<uint32_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * i + 5 * i) % 61);
  write_token_file(tmp.file("data.bin"), ids, TokenWidth::u16);
  TrainOptions o;
  o.model.vocab = 61, o.model.dim = 16, o.model.layers = 1, o.model.heads = 2;
  o.batch = 2, o.seq = 8, o.steps = 5, o.log_every = 0;
  o.data = o.val_data = tmp.file("data.bin");
  o.eval_every = 2, o.eval_steps = 1;
  o.metrics_path = tmp.file("m.jsonl");
  train(o);
  testing::expect_rows_follow_schema(testing::read_metrics(o.metrics_path), 1, false, {2, 4, 5});
}

}  // namespace
}  // namespace pylon
