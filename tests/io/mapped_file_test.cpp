// MappedFile: contents, the empty file, errors that name the path, moves.
#include "io/mapped_file.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "test_util.h"

namespace pylon {
namespace {

TEST(MappedFile, MapsTheContents) {
  test::TempDir dir;
  test::write_bytes(dir.file("a"), "abcdef");
  MappedFile f(dir.file("a"));
  ASSERT_EQ(f.size(), 6u);
  EXPECT_EQ(std::memcmp(f.data(), "abcdef", 6), 0);
  EXPECT_EQ(f.path(), dir.file("a"));
}

TEST(MappedFile, EmptyFileHasSizeZero) {
  test::TempDir dir;
  test::write_bytes(dir.file("empty"), "");
  MappedFile f(dir.file("empty"));
  EXPECT_EQ(f.size(), 0u);
  EXPECT_EQ(f.data(), nullptr);
}

TEST(MappedFile, ErrorsNameThePathAndReason) {
  test::TempDir dir;
  try {
    MappedFile f(dir.file("missing"));
    FAIL() << "expected pylon::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir.file("missing")), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::strerror(ENOENT)), std::string::npos) << msg;
  }
  EXPECT_THROW(MappedFile(dir.path().string()), Error);  // a folder
}

TEST(MappedFile, MovesOwnership) {
  test::TempDir dir;
  test::write_bytes(dir.file("a"), "xyz");
  MappedFile a(dir.file("a"));
  MappedFile b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(b.size(), 3u);
  MappedFile c;
  c = std::move(b);
  EXPECT_EQ(std::memcmp(c.data(), "xyz", 3), 0);
}

}  // namespace
}  // namespace pylon
