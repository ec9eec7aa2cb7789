// Sharded checkpoints: collective save through a temporary folder, and loading at any world size
// by reading each parameter's elements from the old shard files that hold its dim-0 chunks.
#include "train/checkpoint.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <tuple>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checksum.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/hf_config.h"
#include "model/weights.h"

namespace pylon {
namespace fs = std::filesystem;

namespace {

// An integer field of layout.json or trainer.json as written: get<int64_t>() would read 1.5 as 1
// and 2^64 - 1 as -1 (a checkpoint without checksums.json has nothing else to catch it).
int64_t integer_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& v = j.at(key);
  PYLON_CHECK(v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= INT64_MAX), where, ": \"",
              key, "\" is not a 64-bit integer");
  return v.get<int64_t>();
}

std::string step_folder_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06lld", static_cast<long long>(step));
  return buf;
}

// The step folder of a save directory (via latest) or the folder itself; `marker` must exist in it.
fs::path resolve_step_folder(const std::string& dir, const char* marker) {
  const fs::path p(dir);
  PYLON_CHECK(fs::exists(p), dir, ": no such checkpoint directory");
  if (fs::exists(p / marker)) return p;
  PYLON_CHECK(fs::exists(p / "latest"), dir, ": not a checkpoint (no latest file, no ", marker, ")");
  std::string name = read_text_file((p / "latest").string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  PYLON_CHECK(!name.empty() && name.find('/') == std::string::npos, (p / "latest").string(),
              ": malformed (expected a step folder name)");
  PYLON_CHECK(fs::exists(p / name / marker), (p / "latest").string(), " names ", name,
              ", which has no ", marker);
  return p / name;
}

nlohmann::json read_json(const fs::path& path) {
  const std::string text = read_text_file(path.string());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": malformed JSON: " + e.what());
  }
}

std::string tensor_name(const ShardUnit& u, const char* what) { return u.name + "." + what; }

// The folder's tokenizer: its tokenizer.json, else its tokenizer.model, else "".
std::string tokenizer_in(const fs::path& folder) {
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (fs::is_regular_file(folder / name)) return (folder / name).string();
  return "";
}

// Copies a tokenizer into a step folder under its kind's name: a SentencePiece model as
// tokenizer.model; a tokenizer.json as tokenizer.json with the tokenizer_config.json beside it
// (its bos and eos), so that the folder is a Hugging Face folder that generate and export read.
// Returns the names of the files copied.
std::vector<std::string> copy_tokenizer(const std::string& path, const fs::path& folder) {
  const std::string file = resolve_tokenizer_path(path);  // loaded before the run: check_train_options
  const bool json = is_tokenizer_json(read_text_file(file));
  std::vector<std::string> copied{json ? "tokenizer.json" : "tokenizer.model"};
  std::error_code ec;
  fs::copy_file(file, folder / copied[0], fs::copy_options::overwrite_existing, ec);
  PYLON_CHECK(!ec, file, ": cannot copy tokenizer into checkpoint: ", ec.message());
  const fs::path config = fs::path(file).parent_path() / "tokenizer_config.json";
  if (json && fs::is_regular_file(config)) {
    fs::copy_file(config, folder / "tokenizer_config.json", fs::copy_options::overwrite_existing, ec);
    PYLON_CHECK(!ec, config.string(), ": cannot copy into checkpoint: ", ec.message());
    copied.emplace_back("tokenizer_config.json");
  }
  return copied;
}

// Whether a step folder's file is one of the optimizer's shard files (--resume reads them; loading
// the weights does not).
bool is_shard_file(const std::string& name) { return name.rfind("shard-", 0) == 0; }

}  // namespace

std::string shard_file_name(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%05d-of-%05d.safetensors", rank, world);
  return buf;
}

std::string save_checkpoint(const std::string& dir, const CheckpointMeta& meta, FsdpModel& model) {
  Communicator& comm = model.comm();
  const ShardLayout& layout = model.layout();
  const int rank = comm.rank(), world = comm.world();
  const std::string name = step_folder_name(meta.step);
  const fs::path final_path = fs::path(dir) / name, tmp = fs::path(dir) / ("." + name + ".tmp");
  std::error_code ec;
  if (rank == 0) {
    fs::create_directories(dir, ec);
    PYLON_CHECK(!ec, dir, ": cannot create checkpoint directory: ", ec.message());
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    PYLON_CHECK(!ec, tmp.string(), ": cannot create: ", ec.message());
  }
  comm.barrier();  // the temporary folder exists

  auto metadata = meta.config.to_metadata();
  metadata["pylon.step"] = std::to_string(meta.step);
  metadata["format"] = "pt";  // what Hugging Face's loader asks of a safetensors file
  std::map<std::string, FileDigest> digests;  // rank 0: every file of the step folder
  FileDigest shard_digest;                    // this rank's shard file
  {
    std::vector<TensorToWrite> tensors;
    for (size_t i = 0; i < layout.units().size(); ++i) {
      const ShardUnit& u = layout.units()[i];
      const UnitShards& s = model.shards()[i];
      tensors.push_back({tensor_name(u, "param"), DType::f32, {u.shard}, s.param.data()});
      tensors.push_back({tensor_name(u, "exp_avg"), DType::f32, {u.shard}, s.m.data()});
      tensors.push_back({tensor_name(u, "exp_avg_sq"), DType::f32, {u.shard}, s.v.data()});
    }
    auto shard_meta = metadata;
    shard_meta["pylon.rank"] = std::to_string(rank);
    shard_meta["pylon.world"] = std::to_string(world);
    shard_digest = write_safetensors((tmp / shard_file_name(rank, world)).string(), tensors, shard_meta);
  }
  const std::vector<float> full = model.gather_full_params(0);  // collective; full on rank 0
  if (rank == 0) {
    digests["model.safetensors"] = write_safetensors((tmp / "model.safetensors").string(),
                                                     weight_tensors(layout.table(), full.data()), metadata);
    // A Hugging Face model's step folder is a Hugging Face folder too.
    if (meta.config.preset.naming == Naming::hugging_face) {
      write_hf_config(tmp.string(), meta.config);
      digests["config.json"] = file_digest((tmp / "config.json").string());
    }
    nlohmann::json l = layout.to_json();
    l["model"] = meta.config.to_metadata();
    digests["layout.json"] = write_file_atomic((tmp / "layout.json").string(), l.dump(1) + "\n");
    nlohmann::json trainer = meta.trainer;
    trainer["step"] = meta.step;
    trainer["world"] = world;
    digests["trainer.json"] = write_file_atomic((tmp / "trainer.json").string(), trainer.dump(2) + "\n");
    if (!meta.tokenizer_path.empty())
      for (const std::string& copied : copy_tokenizer(meta.tokenizer_path, tmp))
        digests[copied] = file_digest((tmp / copied).string());
  }
  comm.barrier();  // every shard is written
  // Each rank's shard digest (hashed as it was written) goes to rank 0, which writes the manifest.
  for (int q = 0; q < world; ++q) {
    uint64_t d[2] = {shard_digest.bytes, shard_digest.xxh3};
    comm.broadcast(d, sizeof d, q);
    if (rank == 0) digests[shard_file_name(q, world)] = {d[0], d[1]};
  }
  if (rank == 0) {
    write_checksum_manifest(tmp.string(), digests);
    fs::remove_all(final_path, ec);  // a re-save of the same step replaces it
    fs::rename(tmp, final_path, ec);
    PYLON_CHECK(!ec, final_path.string(), ": cannot rename checkpoint into place: ", ec.message());
    write_file_atomic((fs::path(dir) / "latest").string(), name + "\n");
  }
  comm.barrier();  // no rank returns before the checkpoint is in place
  return final_path.string();
}

CheckpointInfo read_checkpoint_info(const std::string& dir) {
  PYLON_CHECK(!fs::exists(fs::path(dir) / "model.safetensors") || fs::exists(fs::path(dir) / "layout.json"),
              dir, ": has model.safetensors but no layout.json: weights, or a checkpoint from before "
              "sharded checkpoints; start from its weights with --init-from ", dir, "/model.safetensors");
  const fs::path folder = resolve_step_folder(dir, "layout.json");
  CheckpointInfo c;
  c.folder = folder.string();
  // Checked before anything is parsed: an edited or corrupted file is named as such.
  const ChecksumManifest manifest(c.folder);
  c.checksums = manifest.present();
  if (c.checksums) {
    for (const char* name : {"layout.json", "trainer.json"})
      PYLON_CHECK(manifest.lists(name), folder.string(), "/", kChecksumManifestName, ": has no entry for ", name,
                  " (a corrupted manifest)");
    for (const auto& [name, digest] : manifest.files())
      if (!is_shard_file(name) && name != "model.safetensors") manifest.verify(name);  // the small files
  }
  c.layout = read_json(folder / "layout.json");
  c.trainer = read_json(folder / "trainer.json");
  const std::string where = (folder / "layout.json").string();
  try {
    std::map<std::string, std::string> model;
    for (const auto& [k, v] : c.layout.at("model").items()) model[k] = v.get<std::string>();
    c.config.update_from_metadata(model);
    PYLON_CHECK(model.count("pylon.heads") && model.count("pylon.dim"), where, ": no model config");
    const int64_t world = integer_field(c.layout, "world", where);
    PYLON_CHECK(world >= 1 && world <= INT32_MAX, where, ": world size ", world);
    c.world = static_cast<int>(world);
    c.step = integer_field(c.trainer, "step", (folder / "trainer.json").string());
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + " or trainer.json: missing or malformed field: " + e.what());
  }
  c.config.validate();
  PYLON_CHECK(c.world >= 1, where, ": world size ", c.world);
  for (int q = 0; q < c.world; ++q) {
    const fs::path shard = folder / shard_file_name(q, c.world);
    PYLON_CHECK(fs::exists(shard), shard.string(), ": missing: the checkpoint is incomplete");
    PYLON_CHECK(!c.checksums || manifest.lists(shard.filename().string()), folder.string(), "/",
                kChecksumManifestName, ": has no entry for ", shard.filename().string(), " (a corrupted manifest)");
  }
  PYLON_CHECK(c.step >= 0, (folder / "trainer.json").string(), ": negative step");
  c.tokenizer_path = tokenizer_in(folder);
  if (!c.tokenizer_path.empty()) check_tokenizer_file(c.tokenizer_path);  // what --resume copies on
  return c;
}

void load_checkpoint_shards(const CheckpointInfo& c, const ShardLayout& to, int rank,
                            std::vector<UnitShards>& out) {
  const std::string where = c.folder + "/layout.json";
  std::map<int, std::unique_ptr<SafetensorsReader>> files;  // old rank -> its shard file
  const ChecksumManifest manifest(c.folder);
  auto file = [&](int q) -> const SafetensorsReader& {
    auto& f = files[q];
    if (!f) {
      const std::string path = c.folder + "/" + shard_file_name(q, c.world);
      PYLON_CHECK(fs::exists(path), path, ": missing: the checkpoint is incomplete");
      manifest.verify(shard_file_name(q, c.world));  // the whole file, before any of it is used
      f = std::make_unique<SafetensorsReader>(path);
    }
    return *f;
  };
  try {
    const nlohmann::json& units = c.layout.at("units");
    PYLON_CHECK(units.size() == to.units().size(), c.folder, ": checkpoint has ", units.size(),
                " units, this model ", to.units().size(), " (a different model)");
    const std::string format = c.layout.value("format", std::string("?"));
    PYLON_CHECK(format == kShardFormat, where, ": shard format '", format, "', not ", kShardFormat,
                " (an earlier Pylon's flat shards?); start from its weights with --init-from ", c.folder,
                "/model.safetensors");
    out.resize(to.units().size());
    for (size_t i = 0; i < to.units().size(); ++i) {
      const ShardUnit& u = to.units()[i];
      const nlohmann::json& old = units[i];
      const nlohmann::json& old_params = old.at("params");
      // The same parameters in the same order, else the optimizer state means nothing here.
      PYLON_CHECK(old.at("name") == nlohmann::json(u.name) && old.at("numel") == nlohmann::json(u.numel) &&
                      old_params.size() == u.params.size(),
                  where, ": unit ", i, " (", old.value("name", "?"), ") differs from this model's ", u.name,
                  " (a different model)");
      const int64_t old_shard = integer_field(old, "shard", where);
      // Each product is compared only when it cannot overflow (a hostile layout.json's numbers).
      PYLON_CHECK(old_shard > 0 && old_shard <= INT64_MAX / c.world && old_shard * c.world >= u.numel, where,
                  ": unit ", u.name,
                  " has a bad shard size ", old_shard);
      UnitShards& s = out[i];
      for (auto* v : {&s.param, &s.m, &s.v}) v->assign(static_cast<size_t>(u.shard), 0.f);
      for (size_t j = 0; j < u.params.size(); ++j) {
        const UnitParam& p = u.params[j];
        const ParamInfo& info = to.table().params[static_cast<size_t>(p.param)];
        const nlohmann::json& q = old_params[j];
        PYLON_CHECK(q.at("name") == nlohmann::json(info.name) && q.at("shape") == nlohmann::json(info.shape) &&
                        q.at("numel") == nlohmann::json(p.numel),
                    where, ": unit ", u.name, " parameter ", j, " (", q.value("name", "?"),
                    ") differs from this model's ", info.name, " (a different model)");
      }
      // Where element k of the unit's parameter j lies in the old shards: old rank, offset in its
      // shard tensor, and the first element after k that lies elsewhere.
      auto locate = [&](size_t j, int64_t k) -> std::tuple<int, int64_t, int64_t> {
        const nlohmann::json& q = old_params[j];
        const int64_t numel = integer_field(q, "numel", where);
        const int64_t chunk = integer_field(q, "chunk", where), at = integer_field(q, "shard_offset", where);
        PYLON_CHECK(chunk > 0 && chunk <= INT64_MAX / c.world && chunk * c.world >= numel && at >= 0 &&
                        at <= old_shard - chunk,
                    where, ": unit ",
                    u.name, " parameter ", j, " has a bad chunk ", chunk, " at ", at);
        const int64_t r = k / chunk;
        return {static_cast<int>(r), at + (k - r * chunk), std::min(numel, (r + 1) * chunk)};
      };
      const std::vector<int64_t> shape{old_shard};
      for (size_t j = 0; j < u.params.size(); ++j) {
        const UnitParam& p = u.params[j];
        for (int64_t k = p.first(rank); k < p.last(rank);) {
          const auto [q, b, end] = locate(j, k);
          PYLON_CHECK(q >= 0 && q < c.world && end > k, where, ": unit ", u.name, " parameter ", j,
                      ": element ", k, " lies in no shard");
          const int64_t stop = std::min(p.last(rank), end), e = b + (stop - k);
          const size_t to_at = static_cast<size_t>(p.shard_offset + (k - p.first(rank)));
          const SafetensorsReader& f = file(q);
          f.read_f32_range(tensor_name(u, "param"), shape, b, e, s.param.data() + to_at);
          f.read_f32_range(tensor_name(u, "exp_avg"), shape, b, e, s.m.data() + to_at);
          f.read_f32_range(tensor_name(u, "exp_avg_sq"), shape, b, e, s.v.data() + to_at);
          k = stop;
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": missing or malformed field: " + e.what());
  }
}

void verify_checkpoint_shards(const CheckpointInfo& c) {
  const ChecksumManifest manifest(c.folder);
  for (int q = 0; q < c.world; ++q) manifest.verify(shard_file_name(q, c.world));
}

bool verify_checkpoint_files(const std::string& path) {
  const bool folder = fs::is_directory(path);
  fs::path dir = folder ? fs::path(path) : fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const ChecksumManifest manifest(dir.string());
  if (!manifest.present()) return !fs::exists(dir / "layout.json");  // a step folder from before checksums
  if (!folder) {
    manifest.verify(fs::path(path).filename().string());
    return true;
  }
  for (const auto& [name, digest] : manifest.files())
    if (!is_shard_file(name)) manifest.verify(name);  // the optimizer's shards are --resume's to check
  return true;
}

std::string checkpoint_without_checksums_warning(const std::string& path) {
  return "warning: " + path + ": a Pylon checkpoint without " + kChecksumManifestName +
         " (written before checksums): its files are not verified";
}

std::string resolve_model_path(const std::string& arg, std::string* tokenizer) {
  PYLON_CHECK(fs::exists(arg), arg, ": no such file or directory");
  if (tokenizer) tokenizer->clear();
  if (!fs::is_directory(arg)) return arg;
  // A folder of weights (a step folder, a Hugging Face folder, sharded or not), else a save
  // directory's latest step.
  const fs::path folder = is_safetensors_folder(arg) ? fs::path(arg) : resolve_step_folder(arg, "model.safetensors");
  if (tokenizer) *tokenizer = tokenizer_in(folder);
  return folder.string();
}

}  // namespace pylon
