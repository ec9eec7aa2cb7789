#include "model/vulkan/vulkan_decoder.h"

#include "core/error.h"
#include "model/params.h"
#include "model/recipe.h"

namespace pylon {

VulkanOptions parse_vulkan_options(const std::string& device, bool allow_coopmat,
                                   const std::string& weights) {
  VulkanOptions options;
  options.allow_coopmat = allow_coopmat;
  options.weights = weights;
  if (device == "vulkan") return options;
  const std::string prefix = "vulkan:";
  PYLON_CHECK(device.rfind(prefix, 0) == 0 && device.size() > prefix.size() &&
                  device.find_first_not_of("0123456789", prefix.size()) == std::string::npos &&
                  device.size() - prefix.size() <= 4,
              "--device ", device, ": expected vulkan or vulkan:N");
  options.device_index = std::stoi(device.substr(prefix.size()));
  return options;
}

namespace {

// The edge file at `path`, refusing anything else (a checkpoint, say) with a line saying so.
std::string edge_path(const std::string& path) {
  PYLON_CHECK(EdgeFile::has_magic(path), "Vulkan runs edge files: ", path, " is not one (make it with pylon export)");
  return path;
}

std::unique_ptr<vk::VulkanInference> vulkan_ops(const EdgeModel& edge, const VulkanOptions& options,
                                                int max_tokens, vk::VulkanInference** out) {
  std::vector<std::string> names;
  for (const ParamInfo& p : param_table(edge.config).params) names.push_back(p.name);
  auto ops = std::make_unique<vk::VulkanInference>(inference_spec(edge.config, max_tokens), edge.file, names, options);
  *out = ops.get();
  return ops;
}

}  // namespace

VulkanDecoder::VulkanDecoder(const std::string& path, const VulkanOptions& options, int max_tokens)
    : edge_(edge_path(path)), decoder_(edge_.config, vulkan_ops(edge_, options, max_tokens, &ops_), max_tokens) {}

const ModelConfig& VulkanDecoder::config() const { return edge_.config; }
std::string VulkanDecoder::tokenizer_model() const { return std::string(edge_.file.tokenizer()); }
std::string VulkanDecoder::describe() const { return ops_->describe(); }
const float* VulkanDecoder::feed(const int32_t* tokens, int n) { return decoder_.feed(tokens, n); }
int VulkanDecoder::position() const { return decoder_.position(); }
int VulkanDecoder::max_tokens() const { return decoder_.max_tokens(); }
void VulkanDecoder::reset() { decoder_.reset(); }
bool VulkanDecoder::use_coopmat(bool on) { return ops_->use_coopmat(on); }
bool VulkanDecoder::use_coopmat2(bool on, int tokens) { return ops_->use_coopmat2(on, tokens); }
void VulkanDecoder::set_coopmat2_dequant_tokens(uint32_t tokens) { ops_->set_coopmat2_dequant_tokens(tokens); }
void VulkanDecoder::set_coopmat2_tile(uint32_t tokens, uint32_t rows, uint32_t k, uint32_t splits) {
  ops_->set_coopmat2_tile(tokens, rows, k, splits);
}
void VulkanDecoder::time_dispatches(vk::GpuTimes* times) { ops_->time_dispatches(times); }
uint32_t VulkanDecoder::persistent_grid() const { return ops_->persistent_grid(); }
uint32_t VulkanDecoder::persistent_dispatches() const { return ops_->persistent_dispatches(); }
int VulkanDecoder::persistent_gave_up_at() const { return ops_->persistent_gave_up_at(); }
vk::LayerTimeline VulkanDecoder::layer_timeline() { return ops_->layer_timeline(); }

}  // namespace pylon
