// Reading (validated, memory-mapped) and writing (atomic) the single-file edge model.
#include "io/edge_format.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checksum.h"
#include "io/json_fields.h"
#include "io/safetensors.h"

namespace pylon {
namespace {

using nlohmann::json;

constexpr char kMagic[8] = {'P', 'Y', 'L', 'O', 'N', 'E', 'D', 'G'};

uint64_t align_up(uint64_t n) { return (n + kEdgeAlignment - 1) / kEdgeAlignment * kEdgeAlignment; }

template <typename T>
T read_le(const std::byte* p) {  // the hosts Pylon targets are little-endian
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool parse_edge_dtype(const std::string& s, EdgeDType* out) {
  for (EdgeDType d : {EdgeDType::f32, EdgeDType::f16, EdgeDType::int8, EdgeDType::int4})
    if (s == edge_dtype_name(d)) {
      *out = d;
      return true;
    }
  return false;
}

// Control characters and bad UTF-8 would break the one-line message: JSON-quote names.
std::string quoted_name(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// The header's fields (JsonFields), and the check of a blob's place in the file.
class HeaderReader : public JsonFields {
 public:
  using JsonFields::JsonFields;
  // A blob [offset, offset + length) must start 4096-aligned after the JSON and end in the file.
  void check_blob(uint64_t offset, uint64_t length, uint64_t data_start, uint64_t file_size,
                  const std::string& what) const {
    if (offset % kEdgeAlignment != 0) fail(what, " offset ", offset, " is not a multiple of 4096");
    if (offset < data_start) fail(what, " offset ", offset, " lies inside the header");
    if (offset > file_size || length > file_size - offset)
      fail(what, " [", offset, ", +", length, ") runs past the end of the file (", file_size,
           " bytes; truncated?)");
  }
};

// A version 2 checksum field: 16 lowercase hex digits.
uint64_t read_checksum(const HeaderReader& h, const json& j, const std::string& where) {
  const std::string text = h.text(j, "xxh3_64", where);
  uint64_t v = 0;
  bool ok = text.size() == 16;
  for (const char c : text) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    ok = ok && d >= 0;
    v = v << 4 | static_cast<uint64_t>(d < 0 ? 0 : d);
  }
  if (!ok) h.fail(where, " xxh3_64 is not 16 hex digits");
  return v;
}

uint64_t tensor_checksum(const void* values, uint64_t values_n, const void* scales, uint64_t scales_n) {
  Xxh3Stream hash;
  hash.update(values, values_n);
  hash.update(scales, scales_n);
  return hash.digest();
}

// The index of the first NaN or Inf among n f32 or f16 values (exponent bits all ones), or n.
// Checked in blocks so the test vectorizes.
uint64_t first_non_finite(const std::byte* p, uint64_t n, bool f16) {
  constexpr uint64_t kBlock = 1024;
  for (uint64_t b = 0; b < n; b += kBlock) {
    const uint64_t e = std::min(n, b + kBlock);
    uint32_t any = 0;
    if (f16) {
      for (uint64_t i = b; i < e; ++i) any |= static_cast<uint32_t>((read_le<uint16_t>(p + 2 * i) & 0x7c00u) == 0x7c00u);
    } else {
      for (uint64_t i = b; i < e; ++i)
        any |= static_cast<uint32_t>((read_le<uint32_t>(p + 4 * i) & 0x7f800000u) == 0x7f800000u);
    }
    if (!any) continue;
    for (uint64_t i = b; i < e; ++i)
      if (f16 ? (read_le<uint16_t>(p + 2 * i) & 0x7c00u) == 0x7c00u
              : (read_le<uint32_t>(p + 4 * i) & 0x7f800000u) == 0x7f800000u)
        return i;
  }
  return n;
}

EdgeTensor read_tensor(const HeaderReader& h, const json& j, size_t index, uint32_t version) {
  EdgeTensor t;
  const std::string where = "tensor " + std::to_string(index);
  t.name = h.text(j, "name", where);
  const std::string w = "tensor " + quoted_name(t.name);
  if (!parse_edge_dtype(h.text(j, "dtype", w), &t.dtype))
    h.fail(w, " has unknown dtype ", quoted_name(j.at("dtype").get<std::string>()));
  const json& shape = h.field(j, "shape", w);
  if (!shape.is_array() || shape.empty() || shape.size() > 2) h.fail(w, " shape is not 1-D or 2-D");
  for (const json& d : shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() == 0 || d.get<uint64_t>() > (1u << 30))
      h.fail(w, " has a bad shape dimension");
    t.shape.push_back(d.get<int64_t>());
  }
  t.offset = h.u64(j, "offset", w);
  t.length = h.u64(j, "length", w);
  if (version >= 2) t.xxh3 = read_checksum(h, j, w);
  if (!t.quantized()) return t;
  if (t.shape.size() != 2) h.fail(w, " is ", edge_dtype_name(t.dtype), " but not a matrix");
  const json& q = h.field(j, "quant", w);
  if (!parse_edge_dtype(h.text(q, "scale_dtype", w + " quant"), &t.scale_dtype) ||
      (t.scale_dtype != EdgeDType::f32 &&
       !(t.dtype == EdgeDType::int4 && t.scale_dtype == EdgeDType::f16)))
    h.fail(w, " has an unsupported scale dtype");
  t.scale_offset = h.u64(q, "scale_offset", w + " quant");
  t.scale_length = h.u64(q, "scale_length", w + " quant");
  if (t.dtype == EdgeDType::int4) {
    const uint64_t g = h.u64(q, "group_size", w + " quant");
    if (g != 32 && g != 64) h.fail(w, " group size ", g, " is not 32 or 64");
    t.group_size = static_cast<int>(g);
  }
  return t;
}

}  // namespace

const char* edge_dtype_name(EdgeDType d) {
  switch (d) {
    case EdgeDType::f32: return "f32";
    case EdgeDType::f16: return "f16";
    case EdgeDType::int8: return "int8";
    case EdgeDType::int4: return "int4";
  }
  return "?";
}

int64_t EdgeTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t edge_value_bytes(const EdgeTensor& t) {
  const auto n = static_cast<uint64_t>(t.numel());
  switch (t.dtype) {
    case EdgeDType::f32: return 4 * n;
    case EdgeDType::f16: return 2 * n;
    case EdgeDType::int8: return n;
    case EdgeDType::int4: return static_cast<uint64_t>(t.shape[0]) * ((t.shape[1] + 1) / 2);
  }
  return 0;
}

uint64_t edge_scale_bytes(const EdgeTensor& t) {
  const uint64_t scale_size = t.scale_dtype == EdgeDType::f16 ? 2 : 4;
  if (t.dtype == EdgeDType::int8) return static_cast<uint64_t>(t.shape[0]) * scale_size;
  if (t.dtype == EdgeDType::int4) {
    const auto groups = static_cast<uint64_t>((t.shape[1] + t.group_size - 1) / t.group_size);
    return static_cast<uint64_t>(t.shape[0]) * groups * scale_size;
  }
  return 0;
}

uint32_t crc32(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

bool EdgeFile::has_magic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char magic[8] = {};
  const bool ok = std::fread(magic, 1, 8, f) == 8 && std::memcmp(magic, kMagic, 8) == 0;
  std::fclose(f);
  return ok;
}

EdgeFile::EdgeFile(const std::string& path) : file_(path) {
  const HeaderReader h(path);
  const std::byte* p = file_.data();
  const uint64_t size = file_.size();
  if (size < kEdgeFixedHeaderBytes) h.fail("too short for an edge model (", size, " bytes)");
  if (std::memcmp(p, kMagic, 8) != 0) h.fail("not a Pylon edge model (bad magic)");
  const auto version = read_le<uint32_t>(p + 8);
  if (version < kEdgeOldestVersion || version > kEdgeVersion)
    h.fail("edge format version ", version, "; this build reads ", kEdgeOldestVersion, " to ", kEdgeVersion);
  version_ = version;
  const auto checksum = read_le<uint32_t>(p + 12);
  json_bytes_ = read_le<uint64_t>(p + 16);
  if (json_bytes_ > size - kEdgeFixedHeaderBytes)
    h.fail("header length ", json_bytes_, " runs past the end of the file (", size, " bytes; truncated?)");
  if (size % kEdgeAlignment != 0)
    h.fail("size ", size, " is not a multiple of 4096 (truncated?)");
  const char* text = reinterpret_cast<const char*>(p + kEdgeFixedHeaderBytes);
  if (crc32(text, json_bytes_) != checksum) h.fail("header checksum mismatch (corrupt header)");

  json header;
  try {
    header = json::parse(text, text + json_bytes_);
  } catch (const json::exception&) {
    h.fail("header is not valid JSON");
  }
  if (!header.is_object()) h.fail("header is not a JSON object");
  config_ = h.field(header, "config", "header");
  if (!config_.is_object()) h.fail("header.config is not an object");

  const uint64_t data_start = align_up(kEdgeFixedHeaderBytes + json_bytes_);
  std::vector<std::pair<uint64_t, uint64_t>> blobs;  // [begin, end), to check overlaps
  if (header.contains("tokenizer")) {
    const json& t = header.at("tokenizer");
    tokenizer_offset_ = h.u64(t, "offset", "tokenizer");
    tokenizer_length_ = h.u64(t, "length", "tokenizer");
    if (tokenizer_length_ == 0) h.fail("tokenizer is empty");
    if (version >= 2) tokenizer_xxh3_ = read_checksum(h, t, "tokenizer");
    h.check_blob(tokenizer_offset_, tokenizer_length_, data_start, size, "tokenizer");
    blobs.emplace_back(tokenizer_offset_, tokenizer_offset_ + tokenizer_length_);
  }

  const json& list = h.field(header, "tensors", "header");
  if (!list.is_array()) h.fail("header.tensors is not a list");
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    EdgeTensor t = read_tensor(h, list[i], i, version);
    const std::string w = "tensor " + quoted_name(t.name);
    if (!names.insert(t.name).second) h.fail(w, " appears twice");
    if (t.length != edge_value_bytes(t))
      h.fail(w, " length ", t.length, " != ", edge_value_bytes(t), " for ", edge_dtype_name(t.dtype),
             " ", shape_text(t.shape));
    h.check_blob(t.offset, t.length, data_start, size, w);
    blobs.emplace_back(t.offset, t.offset + t.length);
    if (t.quantized()) {
      if (t.scale_length != edge_scale_bytes(t))
        h.fail(w, " scale length ", t.scale_length, " != ", edge_scale_bytes(t));
      h.check_blob(t.scale_offset, t.scale_length, data_start, size, w + " scales");
      blobs.emplace_back(t.scale_offset, t.scale_offset + t.scale_length);
    }
    tensors_.push_back(std::move(t));
  }
  std::sort(blobs.begin(), blobs.end());
  for (size_t i = 1; i < blobs.size(); ++i)
    if (blobs[i].first < blobs[i - 1].second) h.fail("two blobs overlap at offset ", blobs[i].first);

}

size_t EdgeFile::verify_tensors() const {
  const HeaderReader h(path());
  if (has_checksums() && tokenizer_length_ && xxh3_64(file_.data() + tokenizer_offset_, tokenizer_length_) != tokenizer_xxh3_)
    h.fail("tokenizer checksum mismatch (corrupted data)");
  for (const EdgeTensor& t : tensors_) {
    const std::string w = "tensor " + quoted_name(t.name);
    if (has_checksums() && tensor_checksum(values(t), t.length, scales(t), t.scale_length) != t.xxh3)
      h.fail(w, " checksum mismatch (corrupted data)");
    auto check_finite = [&](const std::byte* p, uint64_t bytes, EdgeDType d, const char* what) {
      if (d != EdgeDType::f32 && d != EdgeDType::f16) return;
      const uint64_t size = d == EdgeDType::f16 ? 2 : 4, n = bytes / size;
      const uint64_t bad = first_non_finite(p, n, d == EdgeDType::f16);
      if (bad != n) h.fail(w, " holds NaN or Inf in its ", what, " at element ", bad, ": refusing non-finite weights");
    };
    check_finite(values(t), t.length, t.dtype, "values");
    if (t.quantized()) check_finite(scales(t), t.scale_length, t.scale_dtype, "scales");
  }
  return tensors_.size();
}

const EdgeTensor* EdgeFile::find(const std::string& name) const {
  for (const EdgeTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::string_view EdgeFile::tokenizer() const {
  return {reinterpret_cast<const char*>(file_.data() + tokenizer_offset_), tokenizer_length_};
}

void write_edge_file(const std::string& path, const json& config,
                     const std::vector<EdgeTensorToWrite>& tensors, std::string_view tokenizer) {
  std::vector<uint64_t> checksums;
  for (const EdgeTensorToWrite& t : tensors)
    checksums.push_back(tensor_checksum(t.values.data(), t.values.size(), t.scales.data(), t.scales.size()));
  // Offsets depend on where the data starts, which depends on the JSON's length: grow until stable.
  uint64_t data_start = kEdgeAlignment;
  json header;
  std::vector<std::pair<uint64_t, const void*>> blobs;  // (offset, bytes) with sizes below
  std::vector<uint64_t> sizes;
  for (;;) {
    blobs.clear();
    sizes.clear();
    uint64_t at = data_start;
    auto place = [&](const void* data, uint64_t n) {
      const uint64_t offset = at;
      blobs.emplace_back(offset, data);
      sizes.push_back(n);
      at = align_up(at + n);
      return offset;
    };
    header = json::object();
    header["config"] = config;
    if (!tokenizer.empty())
      header["tokenizer"] = {{"offset", place(tokenizer.data(), tokenizer.size())},
                             {"length", tokenizer.size()},
                             {"xxh3_64", checksum_hex(xxh3_64(tokenizer.data(), tokenizer.size()))}};
    header["tensors"] = json::array();
    for (const EdgeTensorToWrite& t : tensors) {
      PYLON_ASSERT(t.values.size() == edge_value_bytes(t.info), t.info.name);
      json j = {{"name", t.info.name}, {"shape", t.info.shape},
                {"dtype", edge_dtype_name(t.info.dtype)},
                {"offset", place(t.values.data(), t.values.size())}, {"length", t.values.size()}};
      if (t.info.quantized()) {
        PYLON_ASSERT(t.scales.size() == edge_scale_bytes(t.info), t.info.name);
        j["quant"] = {{"scale_dtype", edge_dtype_name(t.info.scale_dtype)},
                      {"scale_offset", place(t.scales.data(), t.scales.size())},
                      {"scale_length", t.scales.size()}};
        if (t.info.dtype == EdgeDType::int4) j["quant"]["group_size"] = t.info.group_size;
      }
      j["xxh3_64"] = checksum_hex(checksums[static_cast<size_t>(&t - tensors.data())]);
      header["tensors"].push_back(std::move(j));
    }
    const uint64_t needed = align_up(kEdgeFixedHeaderBytes + header.dump().size());
    if (needed <= data_start) break;
    data_start = needed;
  }

  const std::string text = header.dump();
  AtomicFile out(path);
  out.write(kMagic, 8);
  const uint32_t version = kEdgeVersion, checksum = crc32(text.data(), text.size());
  const uint64_t json_bytes = text.size();
  out.write(&version, 4);
  out.write(&checksum, 4);
  out.write(&json_bytes, 8);
  out.write(text.data(), text.size());
  uint64_t at = kEdgeFixedHeaderBytes + text.size();
  const std::vector<char> zeros(kEdgeAlignment, 0);
  for (size_t i = 0; i < blobs.size(); ++i) {
    const uint64_t pad = blobs[i].first - at;
    PYLON_ASSERT(pad < kEdgeAlignment);
    out.write(zeros.data(), pad);
    out.write(blobs[i].second, sizes[i]);
    at = blobs[i].first + sizes[i];
  }
  out.write(zeros.data(), align_up(at) - at);  // the last blob, too, ends on a 4096 boundary
  out.commit();
}

}  // namespace pylon
