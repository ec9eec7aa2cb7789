// The metrics schema: one JSON object per optimizer step (--metrics FILE.jsonl, written by rank 0),
// the same fields on every device. docs/formats.md documents each field; a test keeps the two equal
// and checks the rows of CPU and CUDA runs against this list.
#pragma once

#include <vector>

namespace pylon {

struct MetricField {
  const char* name;
  const char* when;  // "always", "world > 1", "validation", "cuda", "nvml" (GPUs whose driver reports power)
  const char* meaning;
};

const std::vector<MetricField>& metrics_schema();

}  // namespace pylon
