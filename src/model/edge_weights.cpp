// Encoding MiniLLM parameters as edge tensors (f32 / f16 / int8 / int4) and decoding them to fp32.
#include "model/edge_weights.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "ops/cpu/quantized.h"

namespace pylon {
namespace {

template <typename T>
std::vector<std::byte> to_bytes(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<std::byte> encode_floats(const float* x, int64_t n, EdgeDType dtype) {
  if (dtype == EdgeDType::f32) return to_bytes(std::vector<float>(x, x + n));
  std::vector<uint16_t> h(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) h[i] = float_to_half(x[i]);
  return to_bytes(h);
}

void decode_floats(const std::byte* p, int64_t n, EdgeDType dtype, float* out) {
  if (dtype == EdgeDType::f32) {
    std::memcpy(out, p, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out[i] = half_to_float(h);
  }
}

}  // namespace

bool is_quantizable(const ParamTable& t, size_t i) {
  return t.params[i].shape.size() == 2 && static_cast<int>(i) != t.embed;
}

std::vector<EdgeTensorToWrite> encode_edge_tensors(const ParamTable& table, const float* flat,
                                                   const EdgeQuant& quant) {
  PYLON_CHECK(quant.group_size == 32 || quant.group_size == 64, "int4 group size ",
              quant.group_size, " is not 32 or 64");
  const EdgeDType other = quant.matrices == EdgeDType::f32 ? EdgeDType::f32 : EdgeDType::f16;
  std::vector<EdgeTensorToWrite> out;
  for (size_t i = 0; i < table.params.size(); ++i) {
    const ParamInfo& p = table.params[i];
    EdgeTensorToWrite t;
    t.info.name = p.name;
    t.info.shape = p.shape;
    const float* w = flat + p.offset;
    t.info.dtype = is_quantizable(table, i) ? quant.matrices : other;
    if (t.info.dtype == EdgeDType::int8) {  // (out, in) int8, scales (out) f32
      const int64_t rows = p.shape[0], cols = p.shape[1];
      std::vector<int8_t> q(static_cast<size_t>(rows * cols));
      std::vector<float> scales(static_cast<size_t>(rows));
      quantize_int8_rows(w, rows, cols, q.data(), scales.data());
      t.values = to_bytes(q);
      t.scales = to_bytes(scales);
    } else if (t.info.dtype == EdgeDType::int4) {  // (out, ceil(in/2)) nibbles, scales (out, groups)
      const int64_t rows = p.shape[0], cols = p.shape[1];
      t.info.group_size = quant.group_size;
      t.info.scale_dtype = quant.int4_scales;
      std::vector<uint8_t> q(static_cast<size_t>(rows * int4_row_bytes(cols)));
      std::vector<float> scales(static_cast<size_t>(rows * int4_groups(cols, quant.group_size)));
      quantize_int4_groups(w, rows, cols, quant.group_size, quant.int4_scales == EdgeDType::f16,
                           q.data(), scales.data());
      t.values = to_bytes(q);
      t.scales = encode_floats(scales.data(), static_cast<int64_t>(scales.size()), quant.int4_scales);
    } else {
      t.values = encode_floats(w, p.numel, t.info.dtype);
    }
    out.push_back(std::move(t));
  }
  return out;
}

void decode_edge_tensor(const EdgeFile& file, const EdgeTensor& t, float* out) {
  const std::byte* v = file.values(t);
  if (!t.quantized()) {
    decode_floats(v, t.numel(), t.dtype, out);
    return;
  }
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> scales(edge_scale_bytes(t) / (t.scale_dtype == EdgeDType::f16 ? 2 : 4));
  decode_floats(file.scales(t), static_cast<int64_t>(scales.size()), t.scale_dtype, scales.data());
  if (t.dtype == EdgeDType::int8)
    dequantize_int8_rows(reinterpret_cast<const int8_t*>(v), scales.data(), rows, cols, out);
  else
    dequantize_int4_groups(reinterpret_cast<const uint8_t*>(v), scales.data(), rows, cols,
                           t.group_size, out);
}

void load_edge_weights(const EdgeFile& file, const ParamTable& table, float* flat) {
  for (const ParamInfo& p : table.params) {
    const EdgeTensor* t = file.find(p.name);
    PYLON_CHECK(t && t->shape == p.shape, file.path(), ": tensor ", p.name, " does not fit the model");
    decode_edge_tensor(file, *t, flat + p.offset);
  }
}

WeightView edge_weight_view(const EdgeFile& file, const EdgeTensor& t) {
  WeightView v;
  v.dtype = t.dtype;
  v.rows = t.shape.size() == 2 ? t.shape[0] : 1;
  v.cols = t.shape.size() == 2 ? t.shape[1] : t.numel();
  v.values = file.values(t);
  if (t.quantized()) v.scales = file.scales(t);
  v.scale_dtype = t.scale_dtype;
  v.group_size = t.group_size;
  return v;
}

uint64_t edge_bytes_per_token(const EdgeModel& model) {
  const ParamTable table = param_table(model.config);
  const std::string& embed = table.params[static_cast<size_t>(table.embed)].name;
  uint64_t bytes = 0;
  for (const EdgeTensor& t : model.file.tensors()) {
    if (t.name == embed && !model.config.tied_head)
      bytes += t.length / static_cast<uint64_t>(t.shape[0]);  // one row (a tied head reads it all)
    else
      bytes += t.length + t.scale_length;
  }
  return bytes;
}

}  // namespace pylon
