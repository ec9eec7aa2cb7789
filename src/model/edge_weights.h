// MiniLLM parameters <-> edge-file tensors: encoding the flat fp32 buffer at a chosen precision
// (export), decoding an edge file back into the flat fp32 buffer, and views of the tensors in place
// (the CPU decoder).
#pragma once

#include <cstdint>
#include <vector>

#include "io/edge_format.h"
#include "model/edge_model.h"
#include "model/params.h"
#include "ops/cpu/weight_view.h"

namespace pylon {

struct EdgeQuant {
  // Precision of the 2-D matrices of the blocks and the head: f32, f16, int8 or int4. The
  // embedding table, norms and biases are stored in f16 (f32 when matrices is f32).
  EdgeDType matrices = EdgeDType::f16;
  int group_size = 32;                     // int4: 32 or 64 columns per scale
  EdgeDType int4_scales = EdgeDType::f16;  // f16 or f32
};

// True for the weights EdgeQuant::matrices applies to (all 2-D parameters but the embedding).
bool is_quantizable(const ParamTable& t, size_t param);

std::vector<EdgeTensorToWrite> encode_edge_tensors(const ParamTable& table, const float* flat,
                                                   const EdgeQuant& quant);

// Dequantizes tensor t of the file into out (numel fp32 values, row-major).
void decode_edge_tensor(const EdgeFile& file, const EdgeTensor& t, float* out);
// Every parameter of table (the file's config's) into flat (table.total).
void load_edge_weights(const EdgeFile& file, const ParamTable& table, float* flat);

// Tensor t in place in the mapped file, in its stored encoding (1-D tensors: one row).
WeightView edge_weight_view(const EdgeFile& file, const EdgeTensor& t);

// Weight bytes one decoded token reads: every tensor and its scales, but one row of the embedding
// (all of it where it is the head too).
uint64_t edge_bytes_per_token(const EdgeModel& model);

}  // namespace pylon
