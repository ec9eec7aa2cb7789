// safetensors reading (validate everything, then views into the mapped file) and atomic writing.
#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/half.h"
#include "io/atomic_file.h"

namespace pylon {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

// The index of the first NaN or +-Inf (exponent bits all ones) in x[0, n), or n. Checked in blocks
// so the test vectorizes.
size_t first_non_finite(const float* x, size_t n) {
  constexpr size_t kBlock = 1024;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t e = std::min(n, b + kBlock);
    uint32_t any = 0;
    for (size_t i = b; i < e; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, 4);
      any |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (!any) continue;
    for (size_t i = b; i < e; ++i)
      if (!std::isfinite(x[i])) return i;
  }
  return n;
}

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i8, DType::u8,
                                DType::i16, DType::u16, DType::i32, DType::u32, DType::i64};

bool parse_dtype(const std::string& text, DType* out) {
  for (DType d : kAllDTypes)
    if (text == dtype_name(d)) {
      *out = d;
      return true;
    }
  return false;
}

// numel * element size without overflow; false if either exceeds INT64_MAX.
bool checked_nbytes(const std::vector<int64_t>& shape, size_t elem, uint64_t* nbytes) {
  uint64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(elem), &n)) return false;
  *nbytes = n;
  return n <= static_cast<uint64_t>(INT64_MAX);
}

// A JSON value that must be a non-negative integer <= INT64_MAX.
bool json_to_count(const nlohmann::json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = v.get<int64_t>();
    return true;
  }
  return false;
}

// A name from the file, JSON-quoted so that a message stays one printable line.
std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

float bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace

const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::f64: return "F64";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
    case DType::i16: return "I16";
    case DType::u16: return "U16";
    case DType::i32: return "I32";
    case DType::u32: return "U32";
    case DType::i64: return "I64";
  }
  PYLON_ASSERT(false, "bad DType ", static_cast<int>(d));
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::i8: case DType::u8: return 1;
    case DType::f16: case DType::bf16: case DType::i16: case DType::u16: return 2;
    case DType::f32: case DType::i32: case DType::u32: return 4;
    case DType::f64: case DType::i64: return 8;
  }
  PYLON_ASSERT(false, "bad DType ", static_cast<int>(d));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

bool is_safetensors_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  return fs::is_directory(dir, ec) && (fs::is_regular_file(fs::path(dir) / "model.safetensors", ec) ||
                                       fs::is_regular_file(fs::path(dir) / "model.safetensors.index.json", ec));
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    add_file(path);
  } else if (const fs::path index = fs::path(path) / "model.safetensors.index.json"; fs::exists(index, ec)) {
    // {"metadata": {...}, "weight_map": {tensor: file}}: the files in the order of first mention.
    const std::string where = index.string();
    nlohmann::json root;
    try {
      root = nlohmann::json::parse(read_text_file(where));
    } catch (const nlohmann::json::exception& e) {
      PYLON_CHECK(false, where, ": not valid JSON: ", e.what());
    }
    PYLON_CHECK(root.is_object() && root.contains("weight_map") && root["weight_map"].is_object(), where,
                ": no weight_map object");
    std::map<std::string, std::string> file_of;  // tensor -> file
    std::vector<std::string> files;
    for (const auto& [name, file] : root["weight_map"].items()) {
      PYLON_CHECK(file.is_string(), where, ": weight_map's ", quoted(name), " is not a file name");
      const std::string f = file.get<std::string>();
      PYLON_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", where,
                  ": weight_map's ", quoted(name), " names ", quoted(f), ", not a file of the folder");
      file_of[name] = f;
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
    PYLON_CHECK(!files.empty(), where, ": weight_map is empty");
    for (const std::string& f : files) {
      const size_t before = tensors_.size();
      add_file((fs::path(path) / f).string());
      for (size_t i = before; i < tensors_.size(); ++i) {
        auto it = file_of.find(tensors_[i].name);
        PYLON_CHECK(it != file_of.end() && it->second == f, where, ": tensor ", quoted(tensors_[i].name), " is in ",
                    f, " but the weight_map ", it == file_of.end() ? "does not name it" : "puts it in " + it->second);
      }
    }
    PYLON_CHECK(tensors_.size() == file_of.size(), where, ": the weight_map names ", file_of.size(),
                " tensors, the files hold ", tensors_.size());
  } else {
    PYLON_CHECK(fs::exists(fs::path(path) / "model.safetensors", ec), path,
                ": a folder without model.safetensors or model.safetensors.index.json");
    add_file((fs::path(path) / "model.safetensors").string());
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  for (size_t i = 1; i < tensors_.size(); ++i)
    PYLON_CHECK(tensors_[i].name != tensors_[i - 1].name, path, ": tensor ", quoted(tensors_[i].name),
                " appears in two files");
}

void SafetensorsReader::add_file(const std::string& path) {
  files_.emplace_back(path);
  const MappedFile& file_ = files_.back();
  const size_t size = file_.size();
  PYLON_CHECK(size >= 8, path, ": too short for a safetensors file (", size, " bytes)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_.data(), 8);
  PYLON_CHECK(header_len <= kMaxHeaderBytes, path, ": header length ", header_len,
              " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  PYLON_CHECK(header_len <= size - 8, path, ": header length ", header_len,
              " runs past the end of the file (", size, " bytes)");
  const char* header = reinterpret_cast<const char*>(file_.data()) + 8;
  const std::byte* buffer = file_.data() + 8 + header_len;
  const uint64_t buffer_size = size - 8 - header_len;

  nlohmann::json root;
  try {
    root = nlohmann::json::parse(header, header + header_len);
  } catch (const nlohmann::json::exception& e) {
    PYLON_CHECK(false, path, ": header is not valid JSON: ", e.what());
  }
  PYLON_CHECK(root.is_object(), path, ": header is not a JSON object");

  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      PYLON_CHECK(entry.is_object(), path, ": __metadata__ is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        PYLON_CHECK(value.is_string(), path, ": __metadata__ value for ", quoted(key), " is not a string");
        metadata_.emplace(key, value.get<std::string>());  // the first file's value wins
      }
      continue;
    }
    const std::string where = path + ": tensor " + quoted(name);
    PYLON_CHECK(entry.is_object(), where, " is not a JSON object");
    PYLON_CHECK(entry.contains("dtype") && entry.contains("shape") && entry.contains("data_offsets"),
                where, " needs dtype, shape and data_offsets");
    TensorView t;
    t.name = name;
    const auto& dtype = entry["dtype"];
    PYLON_CHECK(dtype.is_string(), where, ": dtype is not a string");
    PYLON_CHECK(parse_dtype(dtype.get<std::string>(), &t.dtype), where, ": unknown dtype ",
                quoted(dtype.get<std::string>()));
    const auto& shape = entry["shape"];
    PYLON_CHECK(shape.is_array(), where, ": shape is not an array");
    for (const auto& d : shape) {
      int64_t v = 0;
      PYLON_CHECK(json_to_count(d, &v), where, ": shape has an entry that is not a non-negative integer");
      t.shape.push_back(v);
    }
    uint64_t nbytes = 0;
    PYLON_CHECK(checked_nbytes(t.shape, dtype_size(t.dtype), &nbytes), where, ": shape ",
                shape_text(t.shape), " is too large");
    const auto& offsets = entry["data_offsets"];
    int64_t begin = 0, end = 0;
    PYLON_CHECK(offsets.is_array() && offsets.size() == 2 && json_to_count(offsets[0], &begin) &&
                    json_to_count(offsets[1], &end),
                where, ": data_offsets is not [begin, end] of non-negative integers");
    PYLON_CHECK(begin <= end, where, ": data_offsets [", begin, ", ", end, "] run backwards");
    PYLON_CHECK(static_cast<uint64_t>(end) <= buffer_size, where, ": data_offsets [", begin, ", ", end,
                "] run past the end of the data (", buffer_size, " bytes)");
    PYLON_CHECK(static_cast<uint64_t>(end - begin) == nbytes, where, ": data_offsets hold ",
                end - begin, " bytes but ", dtype_name(t.dtype), " ", shape_text(t.shape), " needs ",
                nbytes);
    t.data = buffer + begin;
    t.nbytes = static_cast<size_t>(nbytes);
    tensors_.push_back(std::move(t));
  }

  // No two tensors may share bytes (gaps between them are tolerated).
  std::vector<const TensorView*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorView* a, const TensorView* b) {
    return a->data != b->data ? a->data < b->data : a->nbytes < b->nbytes;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorView& prev = *by_offset[i - 1];
    PYLON_CHECK(by_offset[i]->data >= prev.data + prev.nbytes, path, ": tensors ", quoted(prev.name),
                " and ", quoted(by_offset[i]->name), " overlap");
  }
}

const TensorView* SafetensorsReader::find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorView& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

void SafetensorsReader::read_f32(const std::string& name, const std::vector<int64_t>& shape,
                                 float* out) const {
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  read_f32_range(name, shape, 0, numel, out);
}

void SafetensorsReader::read_f32_range(const std::string& name, const std::vector<int64_t>& shape,
                                       int64_t begin, int64_t end, float* out) const {
  const TensorView* t = find(name);
  PYLON_CHECK(t, path(), ": tensor ", name, " is missing");
  PYLON_CHECK(t->shape == shape, path(), ": tensor ", name, " has shape ", shape_text(t->shape),
              ", expected ", shape_text(shape));
  PYLON_ASSERT(0 <= begin && begin <= end && end <= t->numel(), "range [", begin, ", ", end,
               ") of ", name);
  const size_t first = static_cast<size_t>(begin), n = static_cast<size_t>(end - begin);
  switch (t->dtype) {
    case DType::f32:
      if (n) std::memcpy(out, t->data + 4 * first, n * 4);
      break;
    case DType::f16:
    case DType::bf16: {
      const bool is_f16 = t->dtype == DType::f16;
      for (size_t i = 0; i < n; ++i) {
        uint16_t bits = 0;
        std::memcpy(&bits, t->data + 2 * (first + i), 2);
        out[i] = is_f16 ? half_to_float(bits) : bf16_to_float(bits);
      }
      break;
    }
    default:
      PYLON_CHECK(false, path(), ": tensor ", name, " has dtype ", dtype_name(t->dtype),
                  ", expected F32, F16 or BF16");
  }
  // Weights and optimizer state are finite: NaN or Inf here is corruption (or a diverged run).
  const size_t bad = first_non_finite(out, n);
  PYLON_CHECK(bad == n, path(), ": tensor ", name, " holds ", std::isnan(out[bad]) ? "NaN" : "Inf",
              " at element ", first + bad, ": refusing non-finite weights (a corrupted or diverged file)");
}

void check_all_finite(const SafetensorsReader& file) {
  constexpr int64_t kSlice = int64_t{1} << 20;
  std::vector<float> buffer;
  for (const TensorView& t : file.tensors()) {
    if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16) continue;
    const int64_t n = t.numel();
    buffer.resize(static_cast<size_t>(std::min(n, kSlice)));
    for (int64_t b = 0; b < n; b += kSlice) file.read_f32_range(t.name, t.shape, b, std::min(n, b + kSlice), buffer.data());
  }
}

FileDigest write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Header keys in the given order; tensors back to back, as the format requires (no gaps).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    PYLON_CHECK(t.name != "__metadata__", path, ": a tensor cannot be named __metadata__");
    PYLON_CHECK(names.insert(t.name).second, path, ": tensor '", t.name, "' given twice");
    uint64_t nbytes = 0;
    PYLON_CHECK(checked_nbytes(t.shape, dtype_size(t.dtype), &nbytes), path, ": tensor '", t.name,
                "' has a bad shape ", shape_text(t.shape));
    PYLON_ASSERT(t.data || nbytes == 0, "tensor ", t.name, " has no data");
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    sizes.push_back(nbytes);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    PYLON_CHECK(false, path, ": a tensor name or metadata string is not valid UTF-8");
  }
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data then starts on an 8-byte boundary
  const uint64_t header_len = text.size();

  AtomicFile f(path);
  f.write(&header_len, 8);
  f.write(text.data(), text.size());
  for (size_t i = 0; i < tensors.size(); ++i) f.write(tensors[i].data, sizes[i]);
  f.commit();
  return f.digest();
}

}  // namespace pylon
