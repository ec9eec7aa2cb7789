// Crash-safe file writing: bytes go to "<path>.tmp.<pid>", are flushed and fsync'd, then renamed
// over <path>. A crash or an exception never leaves a half-written <path>.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace pylon {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // opens the temporary file; throws pylon::Error
  ~AtomicFile();                          // removes the temporary file unless commit() ran
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);  // throws pylon::Error on a short write (disk full)
  void commit();                           // flush, fsync, rename; throws pylon::Error

 private:
  std::string path_, tmp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

// Writes a whole small file atomically. A path that is not a regular file itself (a device, a pipe,
// a symbolic link such as /dev/stdout) is written in place: a rename would replace it.
void write_file_atomic(const std::string& path, const std::string& contents);
std::string read_text_file(const std::string& path);  // throws pylon::Error if unreadable

}  // namespace pylon
