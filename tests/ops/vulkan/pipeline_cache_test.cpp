// The pipeline cache's file: where it goes, which files are handed to the driver, and (where the
// driver keeps compute pipelines in a VkPipelineCache) written when a run built pipelines, read
// back by the next run, left alone when nothing new was built, replaced when it is not this
// device's, and merged with what another context saved meanwhile.
#include "ops/vulkan/pipeline_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ops/vulkan/context.h"
#include "ops/vulkan/pipeline.h"
#include "support/temp_dir.h"
#include "support/vulkan_test_util.h"

namespace pylon {
namespace {
namespace fs = std::filesystem;

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A context on the file, one pipeline built in it; whether the file seeded its cache.
bool run_once(const vk::ContextOptions& o) {
  vk::Context ctx(o);
  vk::KernelCache kernels(ctx);
  kernels.get("silu", 1, 4);
  return ctx.pipeline_cache_loaded();
}

// Two contexts on one file at once (a process's several contexts, or two processes), each building
// its own pipeline: whichever saves last keeps the other's too, so a third that builds both adds
// nothing to the file.
void two_at_once_then_both(const vk::ContextOptions& o) {
  {
    vk::Context first(o), second(o);
    vk::KernelCache first_kernels(first), second_kernels(second);
    first_kernels.get("silu", 1, 4);
    second_kernels.get("rope", 5, 20);
    // second_kernels, first_kernels, second (saved), first (merges second's file, saved)
  }
  const std::vector<char> both = read_bytes(o.pipeline_cache);
  {
    vk::Context third(o);
    vk::KernelCache kernels(third);
    kernels.get("silu", 1, 4);
    kernels.get("rope", 5, 20);
  }
  EXPECT_EQ(read_bytes(o.pipeline_cache), both) << "a pipeline was lost when the other context saved";
}

TEST(VulkanPipelineCache, OnlyThisDevicesDataIsHandedToTheDriver) {
  VkPhysicalDeviceProperties props{};
  props.vendorID = 0x10de, props.deviceID = 0x2335;
  for (uint32_t i = 0; i < VK_UUID_SIZE; ++i) props.pipelineCacheUUID[i] = static_cast<uint8_t>(i * 7);
  VkPipelineCacheHeaderVersionOne h{};
  h.headerSize = sizeof(h), h.headerVersion = VK_PIPELINE_CACHE_HEADER_VERSION_ONE;
  h.vendorID = props.vendorID, h.deviceID = props.deviceID;
  std::memcpy(h.pipelineCacheUUID, props.pipelineCacheUUID, VK_UUID_SIZE);
  std::vector<char> good(sizeof(h) + 100, 'd');
  std::memcpy(good.data(), &h, sizeof(h));
  EXPECT_TRUE(vk::pipeline_cache_data_is_for(good.data(), good.size(), props));
  EXPECT_TRUE(vk::pipeline_cache_data_is_for(good.data(), sizeof(h), props));  // a header alone
  EXPECT_FALSE(vk::pipeline_cache_data_is_for(good.data(), sizeof(h) - 1, props));
  EXPECT_FALSE(vk::pipeline_cache_data_is_for(nullptr, 0, props));
  const auto with = [&](auto change) {
    VkPipelineCacheHeaderVersionOne b = h;
    change(b);
    std::vector<char> bytes = good;
    std::memcpy(bytes.data(), &b, sizeof(b));
    return vk::pipeline_cache_data_is_for(bytes.data(), bytes.size(), props);
  };
  EXPECT_FALSE(with([](auto& b) { b.vendorID ^= 1; }));
  EXPECT_FALSE(with([](auto& b) { b.deviceID ^= 1; }));
  EXPECT_FALSE(with([](auto& b) { b.pipelineCacheUUID[15] ^= 1; }));  // another driver build
  EXPECT_FALSE(with([](auto& b) { b.headerVersion = static_cast<VkPipelineCacheHeaderVersion>(2); }));
  EXPECT_FALSE(with([](auto& b) { b.headerSize = 16; }));
  EXPECT_FALSE(with([&](auto& b) { b.headerSize = static_cast<uint32_t>(good.size() + 1); }));
}

TEST(VulkanPipelineCache, PathFromTheOptionTheEnvironmentOrTheCacheFolder) {
  const char* saved = std::getenv("PYLON_VK_PIPELINE_CACHE");
  const std::string keep = saved ? saved : "";
  const char* saved_root = std::getenv("PYLON_DATA_DIR");
  const std::string keep_root = saved_root ? saved_root : "";
  ::unsetenv("PYLON_VK_PIPELINE_CACHE");
  ::setenv("PYLON_DATA_DIR", "/some/root", 1);
  EXPECT_EQ(vk::pipeline_cache_path("", 0x10de, 0x2335), "/some/root/vulkan/pipelines-10de-2335.bin");
  EXPECT_EQ(vk::pipeline_cache_path("/a/b.bin", 1, 2), "/a/b.bin");
  EXPECT_EQ(vk::pipeline_cache_path("off", 1, 2), "");
  ::setenv("PYLON_VK_PIPELINE_CACHE", "/env/c.bin", 1);
  EXPECT_EQ(vk::pipeline_cache_path("", 1, 2), "/env/c.bin");
  EXPECT_EQ(vk::pipeline_cache_path("/a/b.bin", 1, 2), "/a/b.bin");  // the option first
  ::setenv("PYLON_VK_PIPELINE_CACHE", "off", 1);
  EXPECT_EQ(vk::pipeline_cache_path("", 1, 2), "");
  if (saved) ::setenv("PYLON_VK_PIPELINE_CACHE", keep.c_str(), 1);
  else ::unsetenv("PYLON_VK_PIPELINE_CACHE");
  if (saved_root) ::setenv("PYLON_DATA_DIR", keep_root.c_str(), 1);
  else ::unsetenv("PYLON_DATA_DIR");
}

TEST(VulkanPipelineCache, SavedReloadedAndForeignFilesReplaced) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir dir;
  {  // off: no file, an empty cache all the same
    vk::ContextOptions off;
    off.pipeline_cache = "off";
    vk::Context none(off);
    EXPECT_EQ(none.pipeline_cache_file(), "");
    EXPECT_FALSE(none.pipeline_cache_loaded());
  }
  vk::ContextOptions o;
  o.pipeline_cache = dir.file("made/on/save/pipelines.bin");
  EXPECT_FALSE(run_once(o));  // no file yet
  if (!fs::exists(o.pipeline_cache))
    GTEST_SKIP() << "this driver keeps no compute pipelines in a VkPipelineCache (lavapipe: Mesa 22.3 and 25.0)";
  {  // an unwritable place (under a regular file): the save fails, the run goes on, no file
    write_bytes(dir.file("plain"), {'x'});
    vk::ContextOptions blocked;
    blocked.pipeline_cache = dir.file("plain/pipelines.bin");
    EXPECT_FALSE(run_once(blocked));
    EXPECT_FALSE(fs::exists(blocked.pipeline_cache));
  }
  const std::vector<char> good = read_bytes(o.pipeline_cache);
  ASSERT_GT(good.size(), sizeof(VkPipelineCacheHeaderVersionOne));
  EXPECT_TRUE(run_once(o));  // read back; nothing new built, so not rewritten
  EXPECT_EQ(read_bytes(o.pipeline_cache), good);
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(o.pipeline_cache).parent_path()))
    EXPECT_EQ(e.path().string(), o.pipeline_cache) << "a temporary file left behind";
  // Not this device's, or not a cache: ignored (the run goes on with an empty cache), replaced.
  std::vector<char> other_driver = good, long_header = good;
  other_driver[16] = static_cast<char>(other_driver[16] ^ 1);  // pipelineCacheUUID's first byte
  long_header[3] = 0x7f;                                       // headerSize past the file
  const std::vector<std::vector<char>> foreign = {
      {}, std::vector<char>(good.begin(), good.begin() + 20), other_driver, long_header, std::vector<char>(4096, 'x')};
  for (size_t i = 0; i < foreign.size(); ++i) {
    write_bytes(o.pipeline_cache, foreign[i]);
    EXPECT_FALSE(run_once(o)) << "foreign file " << i;
    EXPECT_TRUE(run_once(o)) << "not replaced after foreign file " << i;
  }
  fs::remove(o.pipeline_cache);
  two_at_once_then_both(o);
}

}  // namespace
}  // namespace pylon
