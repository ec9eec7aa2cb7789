// File checksums with xxHash's XXH3-64 (Debian's libxxhash): a streaming hasher, whole-file
// digests, and the manifest a folder of files carries (FOLDER/checksums.json; checkpoints,
// train/checkpoint.h). XXH3 is not cryptographic: it catches corruption (flipped bits, truncation,
// edits), not an adversary who rewrites the manifest too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

struct XXH3_state_s;  // xxhash.h's, kept out of this header

namespace pylon {

class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  XXH3_state_s* state_;
};

uint64_t xxh3_64(const void* data, size_t n);
std::string checksum_hex(uint64_t h);  // 16 lowercase hex digits

struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
  bool operator==(const FileDigest&) const = default;
};
FileDigest file_digest(const std::string& path);  // reads the whole file; throws pylon::Error

// FOLDER/checksums.json: {"format": "pylon-checksums-1", "algorithm": "xxh3_64",
//                         "files": {name: {"bytes": n, "xxh3_64": "16 hex digits"}}}
inline constexpr const char* kChecksumManifestName = "checksums.json";

// Writes FOLDER/checksums.json atomically. Names are plain file names inside FOLDER.
void write_checksum_manifest(const std::string& folder, const std::map<std::string, FileDigest>& files);

class ChecksumManifest {
 public:
  // Reads FOLDER/checksums.json when there is one (present() says whether); throws pylon::Error
  // naming it when it is malformed.
  explicit ChecksumManifest(const std::string& folder);
  bool present() const { return present_; }
  const std::map<std::string, FileDigest>& files() const { return files_; }
  bool lists(const std::string& name) const { return files_.count(name) != 0; }
  // Hashes FOLDER/name and compares it with its entry; throws pylon::Error with one line naming
  // the file when it is missing, has another size, or another checksum. No-op when not listed.
  void verify(const std::string& name) const;

 private:
  std::string folder_;
  bool present_ = false;
  std::map<std::string, FileDigest> files_;
};

}  // namespace pylon
