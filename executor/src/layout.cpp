// Parameter layouts: building, appending and looking up named tensors of a flat buffer.
#include "pd2bw/executor/layout.hpp"

#include <fmt/format.h>

#include "pd2bw/checked.hpp"
#include "pd2bw/error.hpp"

namespace pd2bw::executor {

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n = checked_mul(n, d, fmt::format("the element count of parameter {}", name));
  return n;
}

int64_t layout_numel(const ParamLayout& layout) {
  return layout.empty() ? 0 : checked_add(layout.back().offset, layout.back().numel(), "a layout's element count");
}

int64_t append_layout(ParamLayout& dst, const ParamLayout& src) {
  const int64_t base = layout_numel(dst);
  for (const TensorInfo& t : src) dst.push_back({t.name, checked_add(base, t.offset, "a stage's element count"), t.shape});
  return base;
}

int64_t push_tensor(ParamLayout& layout, std::string name, std::vector<int64_t> shape) {
  for (int64_t d : shape) {
    if (d <= 0) throw Error(fmt::format("parameter {}: dimension {} must be > 0", name, d));
  }
  const int64_t offset = layout_numel(layout);
  layout.push_back({std::move(name), offset, std::move(shape)});
  return offset;
}

const TensorInfo& find_tensor(const ParamLayout& layout, const std::string& name) {
  for (const TensorInfo& t : layout) {
    if (t.name == name) return t;
  }
  throw Error(fmt::format("no parameter named '{}' in this layout", name));
}

}  // namespace pd2bw::executor
