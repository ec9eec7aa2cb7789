// A Hugging Face model folder made from a golden case: config.json and the case's initial weights
// as model.safetensors (the folder `pylon train --init-from` and `--model` take).
#pragma once

#include <filesystem>
#include <string>

namespace pylon::testing {

// Makes `folder` (created) from PYLON_GOLDEN_DIR/<golden_case>; returns it as a string.
inline std::string hf_folder_from_golden(const std::string& golden_case, const std::filesystem::path& folder) {
  const std::filesystem::path g = std::filesystem::path(PYLON_GOLDEN_DIR) / golden_case;
  std::filesystem::create_directories(folder);
  std::filesystem::copy_file(g / "config.json", folder / "config.json");
  std::filesystem::copy_file(g / "init.safetensors", folder / "model.safetensors");
  return folder.string();
}

}  // namespace pylon::testing
