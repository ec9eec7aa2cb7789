// The folders of src/ depend one way (cli -> train/dist -> model -> ops -> backends; profile observes
// from the side; io and core below all): every #include "x/..." in src/ is checked against the
// table below, so that a change that breaks the direction fails here, naming the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

namespace pylon {
namespace {

namespace fs = std::filesystem;

// What each top-level folder of src/ may include besides itself.
const std::map<std::string, std::set<std::string>>& allowed() {
  static const std::map<std::string, std::set<std::string>> table = {
      {"core", {}},
      {"io", {"core"}},
      {"profile", {"core", "io"}},
      {"ops", {"core", "io", "profile"}},
      {"model", {"core", "io", "profile", "ops"}},
      {"dist", {"core", "io", "profile", "ops", "model"}},
      {"train", {"core", "io", "profile", "ops", "model", "dist"}},
      {"cli", {"core", "io", "profile", "ops", "model", "dist", "train"}},
  };
  return table;
}

struct Include {
  std::string file, target;  // file relative to src/; target's folder ("model")
  int line;
  std::string text;
};

std::vector<Include> includes_of_src() {
  const fs::path src = PYLON_SOURCE_DIR;
  const std::regex quoted(R"(^\s*#\s*include\s+"([a-z_]+)/)");
  std::vector<Include> out;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh")) continue;
    std::ifstream in(entry.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (std::regex_search(line, m, quoted))
        out.push_back({fs::relative(entry.path(), src).string(), m[1].str(), n, line});
    }
  }
  return out;
}

TEST(Layering, IncludesFollowTheFolderDirection) {
  const std::vector<Include> includes = includes_of_src();
  ASSERT_GT(includes.size(), 300u) << "found too few includes under " << PYLON_SOURCE_DIR;
  for (const Include& inc : includes) {
    const std::string folder = inc.file.substr(0, inc.file.find('/'));
    const auto rule = allowed().find(folder);
    ASSERT_NE(rule, allowed().end()) << "src/" << folder << "/ is not in the layering table (tests/layering_test.cpp)";
    if (inc.target == folder) continue;
    EXPECT_TRUE(rule->second.count(inc.target))
        << "src/" << inc.file << ":" << inc.line << ": " << folder << "/ may not include " << inc.target
        << "/ (" << inc.text << ")";
  }
}

// STYLE 4: core headers include no CUDA or Vulkan header, nor does the ops interface above the
// backends (ops/*.h), so that every build reads them.
TEST(Layering, CoreAndOpInterfacesIncludeNoDeviceHeaders) {
  const fs::path src = PYLON_SOURCE_DIR;
  const std::regex device(R"(^\s*#\s*include\s+[<"](cuda|cublas|nccl|cupti|vulkan|ops/(cuda|vulkan)/))");
  for (const fs::path& dir : {src / "core", src / "ops"}) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_regular_file() || entry.path().extension() != ".h") continue;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        EXPECT_FALSE(std::regex_search(line, device)) << entry.path().string() << ":" << n << ": " << line;
    }
  }
}

}  // namespace
}  // namespace pylon
