#include "train/memory_plan.h"

#include <sys/sysinfo.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/checked.h"
#include "core/error.h"
#include "model/minillm.h"
#include "model/params.h"
#include "model/recipe.h"

namespace pylon {
namespace {

constexpr const char* kWhat = "the run's memory size";

// "812 GB", "3.4 GB", "120 MB", "16 kB", "512 B"
std::string gb(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= 10e9)
    std::snprintf(text, sizeof(text), "%.0f GB", b / 1e9);
  else if (b >= 1e9)
    std::snprintf(text, sizeof(text), "%.1f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(text, sizeof(text), "%.0f MB", b / 1e6);
  else if (b >= 1e3)
    std::snprintf(text, sizeof(text), "%.0f kB", b / 1e3);
  else
    std::snprintf(text, sizeof(text), "%lld B", static_cast<long long>(bytes));
  return text;
}

// Parameter counts without building the table of every layer (a huge --layers would allocate
// it): the root unit's and one block's, from the table of a one-layer copy.
struct ParamCounts {
  int64_t root = 0, block = 0;
  int64_t total(int64_t layers) const { return checked_add(root, checked_mul(block, layers, kWhat), kWhat); }
};
ParamCounts param_counts(const ModelConfig& model) {
  ModelConfig one = model;
  one.layers = 1;
  const ParamTable t = param_table(one);
  ParamCounts c;
  for (const ParamInfo& p : t.params) (p.unit < 0 ? c.root : c.block) += p.numel;
  return c;
}

void add(MemoryPlan& plan, const char* what, int64_t bytes) {
  if (bytes == 0) return;
  plan.parts.emplace_back(what, bytes);
  plan.total = checked_add(plan.total, bytes, kWhat);
}

}  // namespace

std::string MemoryPlan::describe() const {
  std::string s = gb(total) + " (";
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i].first + " " + gb(parts[i].second);
  return s + ")";
}

MemoryPlan cpu_train_memory(const ModelConfig& model, int batch, int seq, int grad_accum, int world) {
  PYLON_CHECK(int64_t{batch} * seq <= INT_MAX, "--batch ", batch, " x --seq ", seq,
              " rows exceed the CPU step's 32-bit row index");
  const ParamCounts counts = param_counts(model);
  const int64_t f = static_cast<int64_t>(sizeof(float));
  const int64_t params = counts.total(model.layers);
  const int64_t shard = checked_mul(checked_add(params, world - 1, kWhat) / world, f, kWhat);  // each rank's share
  MemoryPlan plan;
  add(plan, "parameters", shard);
  add(plan, "gradients", shard);
  add(plan, "AdamW state", checked_mul(2, shard, kWhat));
  if (world > 1)  // a gathered unit's parameters and gradients (at least the largest unit)
    add(plan, "gathered unit", checked_mul(2 * f, std::max(counts.root, counts.block), kWhat));
  const MiniLLM::BatchBytes b = MiniLLM::batch_bytes(model, batch, seq);
  add(plan, "activations", b.activations);
  add(plan, "logits", b.logits);
  add(plan, "token buffer", checked_mul({grad_accum, 2, batch, seq, 4}, kWhat));
  return plan;
}

MemoryPlan cpu_forward_memory(const ModelConfig& model, int batch, int seq) {
  PYLON_CHECK(int64_t{batch} * seq <= INT_MAX, "--batch ", batch, " x --seq ", seq,
              " rows exceed the CPU forward's 32-bit row index");
  MemoryPlan plan;
  const MiniLLM::BatchBytes b = MiniLLM::batch_bytes(model, batch, seq);
  add(plan, "activations", b.activations);
  add(plan, "logits", b.logits);
  return plan;
}

MemoryPlan cpu_decode_memory(const ModelConfig& model, int context, bool score_rows) {
  MemoryPlan plan;
  if (inference_spec(model, context).kv_cache) add(plan, "KV cache", checked_mul({2, model.layers, context, model.kv_dim(), 4}, kWhat));
  if (score_rows) add(plan, "logits", checked_mul({context, model.vocab, 4}, kWhat));
  return plan;
}

int64_t available_host_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    long long kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return static_cast<int64_t>(kib) * 1024;
  }
  struct sysinfo info {};
  if (sysinfo(&info) != 0) return INT64_MAX;  // unknown: do not refuse
  return static_cast<int64_t>(info.freeram) * info.mem_unit;
}

void check_fits(const MemoryPlan& plan, int ranks, int64_t available, const std::string& who) {
  const int64_t need = checked_mul(plan.total, ranks, kWhat);
  PYLON_CHECK(need <= available, who, " needs ", ranks > 1 ? std::to_string(ranks) + " ranks x " : "",
              plan.describe(), " but this machine has ", gb(available), " available");
}

}  // namespace pylon
