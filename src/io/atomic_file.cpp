// AtomicFile (write to "<path>.tmp.<pid>", fsync, rename) and small whole-file helpers.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/mapped_file.h"

namespace pylon {
namespace {

// Makes the rename itself durable; best effort (some filesystems refuse fsync on folders).
void fsync_parent_dir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  const int fd = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp." + std::to_string(::getpid())) {
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  PYLON_CHECK(file_, tmp_path_, ": cannot create: ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (file_) std::fclose(file_);
  if (!committed_) std::remove(tmp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  PYLON_ASSERT(file_ && !committed_, "write after commit");
  if (n == 0) return;
  const size_t written = std::fwrite(data, 1, n, file_);
  PYLON_CHECK(written == n, tmp_path_, ": write failed after ", written, " of ", n,
              " bytes: ", std::strerror(errno));
  hash_.update(data, n);
  bytes_ += n;
}

void AtomicFile::commit() {
  PYLON_ASSERT(file_ && !committed_, "commit twice");
  PYLON_CHECK(std::fflush(file_) == 0, tmp_path_, ": write failed: ", std::strerror(errno));
  PYLON_CHECK(::fsync(::fileno(file_)) == 0, tmp_path_, ": fsync failed: ", std::strerror(errno));
  const int closed = std::fclose(file_);
  file_ = nullptr;
  PYLON_CHECK(closed == 0, tmp_path_, ": close failed: ", std::strerror(errno));
  PYLON_CHECK(std::rename(tmp_path_.c_str(), path_.c_str()) == 0, path_,
              ": cannot rename the temporary file into place: ", std::strerror(errno));
  committed_ = true;
  fsync_parent_dir(path_);
}

FileDigest write_file_atomic(const std::string& path, const std::string& contents) {
  // A path that is not a regular file itself (a device, a pipe, a symbolic link such as /dev/stdout)
  // is written in place: a rename would replace the node or the link, not write through it.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    std::FILE* out = std::fopen(path.c_str(), "wb");
    PYLON_CHECK(out, path, ": cannot open for writing: ", std::strerror(errno));
    const bool ok = std::fwrite(contents.data(), 1, contents.size(), out) == contents.size();
    PYLON_CHECK(std::fclose(out) == 0 && ok, path, ": write failed: ", std::strerror(errno));
    return {contents.size(), xxh3_64(contents.data(), contents.size())};
  }
  AtomicFile f(path);
  f.write(contents.data(), contents.size());
  f.commit();
  return f.digest();
}

std::string read_text_file(const std::string& path) {
  const MappedFile file(path);  // a regular file, or one line saying what it is not
  return std::string(reinterpret_cast<const char*>(file.data()), file.size());
}

}  // namespace pylon
