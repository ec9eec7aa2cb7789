// AdamW on the CPU (the reference of ops/adamw.h's contract) and the gradient reductions around it.
#pragma once

#include <cstdint>

#include "ops/adamw.h"

namespace pylon::cpu {

// One update of n parameters at optimizer step t (1-based) with learning rate lr (ops/adamw.h).
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                  const AdamWConfig& c, int64_t t);

// Σ g² accumulated in double.
double sum_of_squares(const float* g, int64_t n);
void scale_in_place(float* x, int64_t n, float s);

}  // namespace pylon::cpu
