// Parameter layouts: where each named tensor lives inside a flat parameter buffer.
// A layer's (and, by appending, a stage's) weights, gradients and optimizer moments are flat vectors
// that share one layout; checkpoints and the optimizer's weight-decay rule read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pd2bw::executor {

// One tensor of a flat buffer: elements [offset, offset + numel()) in row-major order.
struct TensorInfo {
  std::string name;            // HF GPT-2 name where one applies, e.g. "h.3.attn.c_attn.weight"
  int64_t offset = 0;          // in elements (not bytes) from the start of the buffer
  std::vector<int64_t> shape;  // e.g. {Out, In} for a linear weight, {C} for a bias

  int64_t numel() const;  // throws UsageError when the product of the shape overflows int64
  // 2-D tensors are the weight matrices (and embedding tables); only they receive weight decay.
  bool is_matrix() const { return shape.size() == 2; }
};

using ParamLayout = std::vector<TensorInfo>;

// Total elements of a layout: the end of its last tensor (0 when empty). Throws UsageError on overflow.
int64_t layout_numel(const ParamLayout& layout);

// Appends src to dst with every offset shifted by layout_numel(dst), so a stage can hold the
// parameters of its consecutive layers in one buffer. Returns the offset at which src starts.
int64_t append_layout(ParamLayout& dst, const ParamLayout& src);

// Appends a tensor at the current end of layout; returns its offset. Throws pd2bw::Error when a
// dimension is <= 0.
int64_t push_tensor(ParamLayout& layout, std::string name, std::vector<int64_t> shape);

// The tensor of that name. Throws pd2bw::Error when there is none.
const TensorInfo& find_tensor(const ParamLayout& layout, const std::string& name);

}  // namespace pd2bw::executor
