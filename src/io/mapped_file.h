// A read-only memory map of a whole file (RAII, move-only).
#pragma once

#include <cstddef>
#include <string>

namespace pylon {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws pylon::Error naming the path and why
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pylon
