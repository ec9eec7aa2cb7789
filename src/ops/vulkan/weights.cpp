#include "ops/vulkan/weights.h"

#include <algorithm>

#include "core/error.h"

namespace pylon::vk {
namespace {

HostTensor host_tensor(const EdgeFile& f, const EdgeTensor& t) {
  HostTensor h;
  h.dtype = t.dtype;
  h.rows = t.shape.size() == 2 ? t.shape[0] : 1;
  h.cols = t.shape.back();
  h.group = t.group_size;
  h.scale_f16 = t.scale_dtype == EdgeDType::f16;
  h.values = f.values(t);
  if (t.quantized()) h.scales = f.scales(t), h.scale_bytes = t.scale_length;
  return h;
}

// Rows per chunk: as many as fit in `limit` bytes, a multiple of 256 rows when split (so every
// chunk starts 256-byte aligned).
int64_t rows_per_chunk(const HostTensor& t, uint64_t limit) {
  const uint64_t rb = row_bytes(t.dtype, t.cols);
  if (rb * static_cast<uint64_t>(t.rows) <= limit) return t.rows;
  const int64_t rows = static_cast<int64_t>(limit / rb) / 256 * 256;
  PYLON_CHECK(rows > 0, "Vulkan: 256 rows of a (", t.rows, ", ", t.cols, ") weight exceed the ",
              "device's largest storage buffer (", limit, " bytes)");
  return rows;
}

template <typename Place>
DeviceMatrix place(Context& ctx, const HostTensor& t, uint64_t limit, Place&& place_bytes) {
  DeviceMatrix m;
  m.dtype = t.dtype, m.rows = t.rows, m.cols = t.cols, m.group = t.group, m.scale_f16 = t.scale_f16;
  const uint64_t rb = row_bytes(t.dtype, t.cols);
  const int64_t per = rows_per_chunk(t, limit);
  for (int64_t r0 = 0; r0 < t.rows; r0 += per) {
    const int64_t rows = std::min(per, t.rows - r0);
    m.chunks.push_back({place_bytes(t.values + static_cast<uint64_t>(r0) * rb, rb * static_cast<uint64_t>(rows)),
                        r0, rows});
  }
  if (t.scales) {
    PYLON_CHECK(t.scale_bytes <= ctx.info().max_buffer_bytes, "Vulkan: the scales of a (", t.rows,
                ", ", t.cols, ") weight exceed the device's largest storage buffer");
    m.scales = place_bytes(t.scales, t.scale_bytes);
  }
  return m;
}

uint64_t round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

DeviceMatrix upload_tensor(Context& ctx, const HostTensor& t, std::deque<Buffer>& keep) {
  return place(ctx, t, ctx.info().max_buffer_bytes, [&](const std::byte* p, uint64_t n) {
    keep.push_back(ctx.make_buffer((n + 15) / 16 * 16, MemoryKind::device));
    ctx.upload(keep.back(), 0, p, n);
    return BufferView{&keep.back(), 0, 0};
  });
}

DeviceMatrix import_tensor(Context& ctx, const HostTensor& t, const std::byte* base,
                           uint64_t mapped_bytes, std::deque<Buffer>& keep) {
  const uint64_t a = ctx.info().import_alignment;
  PYLON_CHECK(a > 0, "Vulkan: no host import on ", ctx.info().name);
  return place(ctx, t, ctx.info().max_buffer_bytes - 2 * a, [&](const std::byte* p, uint64_t n) {
    const uint64_t begin = static_cast<uint64_t>(p - base), end = begin + n;
    const uint64_t lo = begin / a * a, hi = (end + a - 1) / a * a;
    PYLON_CHECK(hi <= mapped_bytes, "Vulkan: a tensor ends too near the end of the mapping to import it");
    PYLON_ASSERT((begin - lo) % ctx.info().storage_offset_alignment == 0, "misaligned import offset");
    keep.push_back(ctx.import_host(base + lo, hi - lo));
    // Shaders read 32-bit words (and 16-byte vectors): the range covers the last partial one.
    return BufferView{&keep.back(), begin - lo, std::min(hi - begin, (n + 15) / 16 * 16)};
  });
}

DeviceWeights::DeviceWeights(Context& ctx, const EdgeFile& file, WeightPath path) {
  const DeviceInfo& info = ctx.info();
  bool import = path == WeightPath::import ||
                (path == WeightPath::automatic && info.host_import && info.unified_memory());
  std::string why_not;
  if (import) {
    try {
      for (const EdgeTensor& t : file.tensors())
        tensors_[t.name] = import_tensor(ctx, host_tensor(file, t), file.mapped().data(),
                                         file.mapped().size(), buffers_);
    } catch (const Error& e) {
      if (path == WeightPath::import) throw;
      why_not = e.what();
      tensors_.clear();
      buffers_.clear();
      import = false;
    }
  }
  if (!import) {
    // One buffer for every tensor where they fit in one binding (then a token's blocks run in one
    // persistent dispatch: Ops::plan_layers), each tensor and its scales at an offset that any
    // binding (storage or texel) may start at; else a buffer per tensor (split by rows).
    const uint64_t align = std::max<uint64_t>({256, info.storage_offset_alignment, info.texel_offset_alignment});
    uint64_t bytes = 0, arena = 0;
    for (const EdgeTensor& t : file.tensors()) {
      bytes += t.length + t.scale_length;
      arena = round_up(arena, align) + round_up(t.length, 16);
      if (t.quantized()) arena = round_up(arena, align) + round_up(t.scale_length, 16);
    }
    if (arena <= info.max_buffer_bytes) {
      buffers_.push_back(ctx.make_buffer(std::max<uint64_t>(arena, 16), MemoryKind::device));
      const Buffer& one = buffers_.back();
      uint64_t at = 0;
      for (const EdgeTensor& t : file.tensors())
        tensors_[t.name] = place(ctx, host_tensor(file, t), info.max_buffer_bytes, [&](const std::byte* p, uint64_t n) {
          at = round_up(at, align);
          ctx.upload(one, at, p, n);
          const BufferView v{&one, at, round_up(n, 16)};
          at += round_up(n, 16);
          return v;
        });
    } else {
      for (const EdgeTensor& t : file.tensors()) tensors_[t.name] = upload_tensor(ctx, host_tensor(file, t), buffers_);
    }
    description_ = detail::concat("weights uploaded to device memory (", bytes >> 20, " MiB",
                                  arena <= info.max_buffer_bytes ? ", one buffer)" : ", a buffer per tensor)");
    if (!why_not.empty()) description_ += " after the zero-copy import failed: " + why_not;
  } else {
    description_ = "weights imported zero-copy from the mapped file (VK_EXT_external_memory_host)";
  }
  imported_ = import;
}

const DeviceMatrix& DeviceWeights::get(const std::string& name) const {
  const auto it = tensors_.find(name);
  PYLON_CHECK(it != tensors_.end(), "Vulkan: the model has no tensor ", name);
  return it->second;
}

}  // namespace pylon::vk
