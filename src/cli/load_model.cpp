#include "cli/load_model.h"

#include <cstdio>
#include <filesystem>

#include "core/env.h"
#include "io/edge_format.h"
#include "io/safetensors.h"
#include "model/edge_model.h"
#include "model/edge_weights.h"
#include "model/params.h"
#include "model/weights.h"
#include "train/checkpoint.h"

namespace pylon {

bool is_edge_file(const std::string& arg) {
  return std::filesystem::is_regular_file(arg) && EdgeFile::has_magic(arg);
}

LoadedModel load_model(const std::string& arg, const ModelConfig& fallback, bool preset_given,
                       bool heads_given) {
  LoadedModel m;
  if (is_edge_file(arg)) {
    const EdgeModel edge(arg);
    const EdgeFile& file = edge.file;
    m.config = edge.config;
    const ParamTable table = param_table(m.config);
    m.params.resize(table.total);
    load_edge_weights(file, table, m.params.data());
    m.tokenizer_model = std::string(file.tokenizer());
    return m;
  }
  const std::string path = resolve_model_path(arg, &m.tokenizer);
  if (!verify_checkpoint_files(path)) std::fprintf(stderr, "%s\n", checkpoint_without_checksums_warning(path).c_str());
  const SafetensorsReader file(path);
  m.config = config_from_weights(file, fallback, preset_given, heads_given);
  const ParamTable table = param_table(m.config);
  m.params.resize(table.total);
  load_weights(file, table, m.params.data());
  return m;
}

#if PYLON_HAVE_VULKAN
VulkanOptions vulkan_options_from_flags(const std::string& device, bool no_coopmat, const std::string& weights) {
  VulkanOptions o = parse_vulkan_options(device, !no_coopmat, weights);
  o.fail_allocation = env_int("PYLON_TEST_VK_FAIL_ALLOC", 0, 0, 1 << 30);
  return o;
}
#endif

}  // namespace pylon
