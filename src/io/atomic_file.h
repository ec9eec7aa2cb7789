// Crash-safe file writing: bytes go to "<path>.tmp.<pid>", are flushed and fsync'd, then renamed
// over <path>. A crash or an exception never leaves a half-written <path>. The bytes are hashed as
// they are written (XXH3-64, io/checksum.h), so a writer gets the file's checksum without reading it.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

#include "io/checksum.h"

namespace pylon {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // opens the temporary file; throws pylon::Error
  ~AtomicFile();                          // removes the temporary file unless commit() ran
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);  // throws pylon::Error on a short write (disk full)
  void commit();                           // flush, fsync, rename; throws pylon::Error
  FileDigest digest() const { return {bytes_, hash_.digest()}; }  // of the bytes written so far

 private:
  std::string path_, tmp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
  Xxh3Stream hash_;
  uint64_t bytes_ = 0;
};

// Writes a whole small file atomically; returns its digest. A path that is not a regular file
// itself (a device, a pipe, a symbolic link such as /dev/stdout) is written in place: a rename
// would replace it.
FileDigest write_file_atomic(const std::string& path, const std::string& contents);
std::string read_text_file(const std::string& path);  // throws pylon::Error if unreadable

}  // namespace pylon
