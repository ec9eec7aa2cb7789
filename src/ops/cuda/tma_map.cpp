// cuTensorMapEncodeTiled reached through the runtime's driver entry point (no -lcuda link, so the
// binaries still start where there is no driver).
#include "ops/cuda/tma_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "ops/cuda/check.h"

namespace pylon::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(const char* who) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  PYLON_CHECK(encode != nullptr, who, ": the CUDA driver has no cuTensorMapEncodeTiled");
  return encode;
}

}  // namespace

CUtensorMap bf16_rows_tensor_map(const __nv_bfloat16* base, int64_t cols, int T, int B, int box_rows,
                                 const char* who) {
  CUtensorMap map;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(T), static_cast<cuuint64_t>(B)};
  const cuuint64_t row_bytes = static_cast<cuuint64_t>(cols) * sizeof(__nv_bfloat16);
  const cuuint64_t strides[2] = {row_bytes, row_bytes * static_cast<cuuint64_t>(T)};  // of dims 1 and 2
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder(who)(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
                                             const_cast<__nv_bfloat16*>(base), dims, strides, box, element_strides,
                                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  PYLON_CHECK(r == CUDA_SUCCESS, who, ": cuTensorMapEncodeTiled failed with CUresult ", static_cast<int>(r),
              " (cols=", cols, " T=", T, " B=", B, " box rows=", box_rows, ")");
  return map;
}

}  // namespace pylon::cuda
