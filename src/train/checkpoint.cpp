#include "train/checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/weights.h"

namespace pylon {
namespace fs = std::filesystem;

namespace {

std::string step_folder_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06lld", static_cast<long long>(step));
  return buf;
}

fs::path resolve_step_folder(const std::string& dir) {
  const fs::path p(dir);
  PYLON_CHECK(fs::exists(p), dir, ": no such checkpoint directory");
  if (fs::exists(p / "model.safetensors")) return p;
  PYLON_CHECK(fs::exists(p / "latest"), dir, ": not a checkpoint (no latest file, no model.safetensors)");
  std::string name = read_text_file((p / "latest").string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  PYLON_CHECK(!name.empty() && name.find('/') == std::string::npos, (p / "latest").string(),
              ": malformed (expected a step folder name)");
  PYLON_CHECK(fs::exists(p / name / "model.safetensors"), (p / "latest").string(), " names ", name,
              ", which has no model.safetensors");
  return p / name;
}

}  // namespace

std::string save_checkpoint(const std::string& dir, const CheckpointData& c) {
  const ParamTable table = param_table(c.config);
  PYLON_ASSERT(static_cast<int64_t>(c.params.size()) == table.total);
  std::error_code ec;
  fs::create_directories(dir, ec);
  PYLON_CHECK(!ec, dir, ": cannot create checkpoint directory: ", ec.message());
  const std::string name = step_folder_name(c.step);
  const fs::path final_path = fs::path(dir) / name;
  const fs::path tmp = fs::path(dir) / ("." + name + ".tmp." + std::to_string(getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  PYLON_CHECK(!ec, tmp.string(), ": cannot create: ", ec.message());

  auto meta = c.config.to_metadata();
  meta["pylon.step"] = std::to_string(c.step);
  write_safetensors((tmp / "model.safetensors").string(), weight_tensors(table, c.params.data()), meta);
  if (!c.m.empty()) {
    auto tensors = weight_tensors(table, c.m.data(), "exp_avg.");
    auto vs = weight_tensors(table, c.v.data(), "exp_avg_sq.");
    tensors.insert(tensors.end(), vs.begin(), vs.end());
    write_safetensors((tmp / "optimizer.safetensors").string(), tensors, meta);
  }
  nlohmann::json trainer = c.trainer;
  trainer["step"] = c.step;
  write_file_atomic((tmp / "trainer.json").string(), trainer.dump(2) + "\n");
  if (!c.tokenizer_path.empty()) {
    fs::copy_file(c.tokenizer_path, tmp / "tokenizer.model", fs::copy_options::overwrite_existing, ec);
    PYLON_CHECK(!ec, c.tokenizer_path, ": cannot copy tokenizer into checkpoint: ", ec.message());
  }
  fs::remove_all(final_path, ec);  // a re-save of the same step replaces it
  fs::rename(tmp, final_path, ec);
  PYLON_CHECK(!ec, final_path.string(), ": cannot rename checkpoint into place: ", ec.message());
  write_file_atomic((fs::path(dir) / "latest").string(), name + "\n");
  return final_path.string();
}

CheckpointData load_checkpoint(const std::string& dir) {
  const fs::path folder = resolve_step_folder(dir);
  CheckpointData c;
  const SafetensorsReader model((folder / "model.safetensors").string());
  c.config = config_from_weights(model, c.config, false, false);
  PYLON_CHECK(model.metadata().count("pylon.heads"), model.path(),
              ": lacks pylon.* metadata: not a Pylon checkpoint (use --init-from for plain weights)");
  const ParamTable table = param_table(c.config);
  c.params.resize(table.total);
  load_weights(model, table, c.params.data());

  const fs::path opt = folder / "optimizer.safetensors";
  PYLON_CHECK(fs::exists(opt), opt.string(), ": missing: cannot resume the optimizer");
  const SafetensorsReader optimizer(opt.string());
  c.m.resize(table.total), c.v.resize(table.total);
  for (const auto& p : table.params) {
    optimizer.read_f32("exp_avg." + p.name, p.shape, c.m.data() + p.offset);
    optimizer.read_f32("exp_avg_sq." + p.name, p.shape, c.v.data() + p.offset);
  }
  const std::string text = read_text_file((folder / "trainer.json").string());
  try {
    c.trainer = nlohmann::json::parse(text);
    c.step = c.trainer.at("step").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error((folder / "trainer.json").string() + ": malformed: " + e.what());
  }
  PYLON_CHECK(c.step >= 0, (folder / "trainer.json").string(), ": negative step");
  if (fs::exists(folder / "tokenizer.model")) c.tokenizer_path = (folder / "tokenizer.model").string();
  return c;
}

std::string resolve_model_path(const std::string& arg, std::string* tokenizer) {
  PYLON_CHECK(fs::exists(arg), arg, ": no such file or directory");
  if (tokenizer) tokenizer->clear();
  if (!fs::is_directory(arg)) return arg;
  const fs::path folder = resolve_step_folder(arg);
  if (tokenizer && fs::exists(folder / "tokenizer.model"))
    *tokenizer = (folder / "tokenizer.model").string();
  return (folder / "model.safetensors").string();
}

}  // namespace pylon
