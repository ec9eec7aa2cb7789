// The single-file edge model (DESIGN §6): a fixed little-endian header, a JSON header (model
// config, tokenizer blob, tensor table), then every tensor and the tokenizer aligned to 4096 bytes,
// so a mmap of the file can be handed to a GPU (or imported by Vulkan) without copying.
//
//   bytes 0..7    magic "PYLONEDG"
//   bytes 8..11   u32 version (2; version 1 files, without tensor checksums, still load)
//   bytes 12..15  u32 CRC-32 (zlib's) of the JSON header
//   bytes 16..23  u64 JSON header length N
//   bytes 24..    N bytes of JSON: {"config": {...} (the model's: model/edge_model.h), "tokenizer": {offset, length} (optional: a SentencePiece
//                 .model's bytes or a tokenizer.json's text, Tokenizer::to_bytes),
//                 "tensors": [{name, shape, dtype, offset, length, quant?, xxh3_64}]}, quant = {scale_dtype,
//                 scale_offset, scale_length, group_size (int4)}; offsets are from the file start.
//                 Version 2: each tensor's xxh3_64 (16 hex digits) is XXH3-64 of its value bytes
//                 followed by its scale bytes; the tokenizer's, of its bytes.
//   then the blobs, each at a multiple of 4096, zero padding between them and after the last:
//   the file size is a multiple of 4096.
// Tensor data: f32 / f16 row-major; int8 (out, in) with fp32 scales (out); int4 (out, ceil(in/2))
// nibbles with scales (out, ceil(in/group)) in f16 or f32 (layouts: ops/cpu/quantized.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/mapped_file.h"

namespace pylon {

enum class EdgeDType { f32, f16, int8, int4 };
const char* edge_dtype_name(EdgeDType d);  // "f32", "f16", "int8", "int4"

constexpr uint64_t kEdgeAlignment = 4096;
constexpr uint32_t kEdgeVersion = 2;         // written
constexpr uint32_t kEdgeOldestVersion = 1;   // read: 1 has no tensor checksums
constexpr size_t kEdgeFixedHeaderBytes = 24;

struct EdgeTensor {
  std::string name;
  EdgeDType dtype = EdgeDType::f32;
  std::vector<int64_t> shape;              // PyTorch shape: (out, in) for matrices
  int group_size = 0;                      // int4: columns per scale
  EdgeDType scale_dtype = EdgeDType::f32;  // int8: f32; int4: f16 or f32
  uint64_t offset = 0, length = 0;              // the values, from the file start
  uint64_t scale_offset = 0, scale_length = 0;  // int8 / int4 only
  uint64_t xxh3 = 0;                            // version 2: XXH3-64 of values then scales
  bool quantized() const { return dtype == EdgeDType::int8 || dtype == EdgeDType::int4; }
  int64_t numel() const;
};

// Bytes of a tensor's values and of its scales (0 when not quantized).
uint64_t edge_value_bytes(const EdgeTensor& t);
uint64_t edge_scale_bytes(const EdgeTensor& t);

class EdgeFile {
 public:
  // Maps and validates the whole file: magic, version, header length and checksum, file size, JSON,
  // a config object, every offset in range and 4096-aligned, blobs not overlapping, lengths
  // consistent with dtypes and shapes, names unique. Any violation throws pylon::Error with one line
  // naming the file. Whether the config and the tensors form a model is the model's to check
  // (model/edge_model.h).
  explicit EdgeFile(const std::string& path);
  static bool has_magic(const std::string& path);  // false for unreadable or short files

  uint32_t version() const { return version_; }
  bool has_checksums() const { return version_ >= 2; }
  // Reads every tensor's data (and the tokenizer's): its checksum (version 2) and, for f32 and f16
  // values and scales, that none is NaN or Inf. Throws pylon::Error naming the file and the first
  // bad tensor; returns the number of tensors checked. Costs one pass over the file (the figures:
  // bench/robustness_notes.md).
  size_t verify_tensors() const;
  const std::string& path() const { return file_.path(); }
  const nlohmann::json& config() const { return config_; }  // a JSON object
  const std::vector<EdgeTensor>& tensors() const { return tensors_; }
  const EdgeTensor* find(const std::string& name) const;  // nullptr if absent
  const std::byte* values(const EdgeTensor& t) const { return file_.data() + t.offset; }
  const std::byte* scales(const EdgeTensor& t) const { return file_.data() + t.scale_offset; }
  std::string_view tokenizer() const;  // the tokenizer's bytes (Tokenizer::from_bytes), empty if none
  const MappedFile& mapped() const { return file_; }  // the whole file, for zero-copy import
  uint64_t header_json_bytes() const { return json_bytes_; }

 private:
  MappedFile file_;
  nlohmann::json config_;
  std::vector<EdgeTensor> tensors_;
  uint64_t tokenizer_offset_ = 0, tokenizer_length_ = 0, json_bytes_ = 0, tokenizer_xxh3_ = 0;
  uint32_t version_ = 0;
};

struct EdgeTensorToWrite {
  EdgeTensor info;  // name, dtype, shape, group_size, scale_dtype; the writer sets the offsets
  std::vector<std::byte> values, scales;
};

// Writes atomically (AtomicFile). config: a JSON object; tokenizer: Tokenizer::to_bytes, or empty.
void write_edge_file(const std::string& path, const nlohmann::json& config,
                     const std::vector<EdgeTensorToWrite>& tensors, std::string_view tokenizer);

uint32_t crc32(const void* data, size_t n);  // zlib's CRC-32

}  // namespace pylon
