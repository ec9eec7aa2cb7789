// XXH3-64 over byte streams and files, and the checksums.json manifest of a folder.
#include "io/checksum.h"

#include <xxhash.h>

#include <cstdio>
#include <filesystem>
#include <new>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace pylon {
namespace fs = std::filesystem;

namespace {
constexpr const char* kManifestFormat = "pylon-checksums-1";
constexpr const char* kAlgorithm = "xxh3_64";

bool parse_hex(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (const char c : s) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}
}  // namespace

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  if (!state_) throw std::bad_alloc();
  XXH3_64bits_reset(state_);
}

Xxh3Stream::~Xxh3Stream() { XXH3_freeState(state_); }

void Xxh3Stream::update(const void* data, size_t n) {
  if (n) XXH3_64bits_update(state_, data, n);
}

uint64_t Xxh3Stream::digest() const { return XXH3_64bits_digest(state_); }

uint64_t xxh3_64(const void* data, size_t n) { return XXH3_64bits(data, n); }

std::string checksum_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

FileDigest file_digest(const std::string& path) {
  const MappedFile file(path);
  return {file.size(), xxh3_64(file.data(), file.size())};
}

void write_checksum_manifest(const std::string& folder, const std::map<std::string, FileDigest>& files) {
  nlohmann::json j = {{"format", kManifestFormat}, {"algorithm", kAlgorithm}, {"files", nlohmann::json::object()}};
  for (const auto& [name, d] : files) j["files"][name] = {{"bytes", d.bytes}, {"xxh3_64", checksum_hex(d.xxh3)}};
  write_file_atomic((fs::path(folder) / kChecksumManifestName).string(), j.dump(1) + "\n");
}

ChecksumManifest::ChecksumManifest(const std::string& folder) : folder_(folder) {
  const fs::path path = fs::path(folder) / kChecksumManifestName;
  if (!fs::exists(path)) return;
  present_ = true;
  const std::string where = path.string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(where));
  } catch (const nlohmann::json::exception&) {
    throw Error(where + ": malformed JSON (a corrupted checksum manifest)");
  }
  PYLON_CHECK(j.is_object() && j.value("format", "") == kManifestFormat && j.value("algorithm", "") == kAlgorithm &&
                  j.contains("files") && j["files"].is_object(),
              where, ": not a ", kManifestFormat, " manifest with ", kAlgorithm, " checksums");
  for (const auto& [name, e] : j["files"].items()) {
    FileDigest d;
    const bool ok = e.is_object() && e.contains("bytes") && e["bytes"].is_number_unsigned() && e.contains("xxh3_64") &&
                    e["xxh3_64"].is_string() && parse_hex(e["xxh3_64"].get<std::string>(), &d.xxh3) &&
                    !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
    PYLON_CHECK(ok, where, ": malformed entry for '", name.substr(0, 64), "'");
    d.bytes = e["bytes"].get<uint64_t>();
    files_[name] = d;
  }
}

void ChecksumManifest::verify(const std::string& name) const {
  const auto it = files_.find(name);
  if (it == files_.end()) return;
  const std::string path = (fs::path(folder_) / name).string();
  PYLON_CHECK(fs::exists(path), path, ": missing, but ", kChecksumManifestName, " lists it (an incomplete checkpoint)");
  const FileDigest d = file_digest(path);
  PYLON_CHECK(d.bytes == it->second.bytes, path, ": ", d.bytes, " bytes, but ", kChecksumManifestName, " records ",
              it->second.bytes, ": the file is truncated, corrupted or was edited; refusing to use it");
  PYLON_CHECK(d.xxh3 == it->second.xxh3, path, ": checksum mismatch (xxh3_64 ", checksum_hex(d.xxh3), ", ",
              kChecksumManifestName, " records ", checksum_hex(it->second.xxh3),
              "): the file is corrupted or was edited; refusing to use it");
}

}  // namespace pylon
