// AtomicFile: commit renames into place, no commit leaves nothing, the old file survives until commit.
#include "io/atomic_file.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "test_util.h"

namespace pylon {
namespace {

size_t count_entries(const std::filesystem::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

TEST(AtomicFile, CommitWritesTheFileAndNoTemporary) {
  test::TempDir dir;
  const std::string path = dir.file("out.bin");
  {
    AtomicFile f(path);
    f.write("hello ", 6);
    f.write("world", 5);
    f.write(nullptr, 0);
    f.commit();
  }
  EXPECT_EQ(test::read_bytes(path), "hello world");
  EXPECT_EQ(count_entries(dir.path()), 1u);
}

TEST(AtomicFile, NoCommitLeavesNothing) {
  test::TempDir dir;
  const std::string path = dir.file("out.bin");
  {
    AtomicFile f(path);
    f.write("partial", 7);
    EXPECT_EQ(count_entries(dir.path()), 1u);  // only the temporary
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(count_entries(dir.path()), 0u);
}

TEST(AtomicFile, OverwriteKeepsTheOldFileUntilCommit) {
  test::TempDir dir;
  const std::string path = dir.file("out.txt");
  write_file_atomic(path, "old");
  {
    AtomicFile f(path);
    f.write("new contents", 12);
    EXPECT_EQ(read_text_file(path), "old");
    f.commit();
    EXPECT_EQ(read_text_file(path), "new contents");
  }
  {
    AtomicFile f(path);
    f.write("abandoned", 9);
  }
  EXPECT_EQ(read_text_file(path), "new contents");
  EXPECT_EQ(count_entries(dir.path()), 1u);
}

TEST(AtomicFile, ErrorsNameThePath) {
  test::TempDir dir;
  const std::string path = dir.file("no/such/folder/out.bin");
  try {
    AtomicFile f(path);
    FAIL() << "expected pylon::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_text_file(dir.file("missing.txt")), Error);
  EXPECT_THROW(read_text_file(dir.path().string()), Error);  // a folder
}

TEST(AtomicFile, ReadTextFileRoundTripsBinary) {
  test::TempDir dir;
  const std::string bytes("a\0b\n\xff", 5);
  write_file_atomic(dir.file("x"), bytes);
  EXPECT_EQ(read_text_file(dir.file("x")), bytes);
  write_file_atomic(dir.file("empty"), "");
  EXPECT_EQ(read_text_file(dir.file("empty")), "");
}

// A symbolic link (as /dev/stdout is) and a device are written through, not replaced: a rename over
// /dev/stdout turned the link into a regular file (as root) when `roofline --json /dev/stdout` ran.
TEST(AtomicFile, WriteFileAtomicWritesThroughLinksAndDevices) {
  test::TempDir dir;
  write_file_atomic(dir.file("target"), "old");
  std::filesystem::create_symlink(dir.file("target"), dir.file("link"));
  write_file_atomic(dir.file("link"), "new");
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("link")));
  EXPECT_EQ(read_text_file(dir.file("target")), "new");
  write_file_atomic("/dev/null", "nothing");
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

}  // namespace
}  // namespace pylon
