// safetensors (https://github.com/huggingface/safetensors format): 8-byte little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets:[begin,end]}, "__metadata__": {str:
// str}}, then the byte buffer. Reading maps the file and validates everything before use.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/checksum.h"
#include "io/mapped_file.h"

namespace pylon {

enum class DType { f32, f16, bf16, f64, i8, u8, i16, u16, i32, u32, i64 };

const char* dtype_name(DType d);  // safetensors spelling: "F32", "BF16", ...
size_t dtype_size(DType d);

struct TensorView {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // into the mapped file
  size_t nbytes = 0;
  int64_t numel() const;
};

class SafetensorsReader {
 public:
  // Maps and validates the file: header length within the file, JSON well formed, known dtypes,
  // offsets inside the buffer, not overlapping, and nbytes == numel * dtype size. tensors() is in
  // name order. `path` may also be a Hugging Face folder: its model.safetensors, or the shards its
  // model.safetensors.index.json maps the tensors to (each tensor in the file the map names, each
  // name once), read as one set (metadata: the first file's keys win).
  // Any violation throws pylon::Error naming the file and the problem.
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;  // nullptr if absent

  // Copies tensor `name` to fp32 (from F32, F16 or BF16), checking that its shape is `shape`.
  // Throws pylon::Error: "<file>: tensor <name> is missing" / "has shape (a, b), expected (c, d)".
  void read_f32(const std::string& name, const std::vector<int64_t>& shape, float* out) const;
  // The same for the flat elements [begin, end) of the tensor (row-major), into out[0, end-begin).
  void read_f32_range(const std::string& name, const std::vector<int64_t>& shape, int64_t begin,
                      int64_t end, float* out) const;

 private:
  // Maps and validates one file, adding its tensors and metadata.
  void add_file(const std::string& file);

  std::string path_;
  std::vector<MappedFile> files_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorView> tensors_;
};

// Reads every F32, F16 and BF16 tensor of the file (in slices, little memory) to check that none
// holds NaN or Inf; throws pylon::Error naming the first such tensor (read_f32_range's check).
void check_all_finite(const SafetensorsReader& file);

// Whether `dir` is a folder holding model.safetensors or model.safetensors.index.json.
bool is_safetensors_folder(const std::string& dir);

struct TensorToWrite {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel * dtype_size(dtype) bytes
};

// Writes atomically (AtomicFile). Tensors are stored in the given order, back to back: the format
// allows no gaps (Python's safetensors rejects them), so only the data start is 8-byte aligned
// (the JSON is padded with spaces); a tensor is aligned when the bytes before it are. Returns the
// file's size and XXH3-64 (io/checksum.h).
FileDigest write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

std::string shape_text(const std::vector<int64_t>& shape);  // "(3, 4)"

}  // namespace pylon
