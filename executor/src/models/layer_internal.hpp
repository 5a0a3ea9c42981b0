// Internal helpers shared by the layer sources of every model family. Not a public header.
#pragma once

#include <fmt/format.h>

#include <cstdint>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/layers.hpp"

namespace pd2bw::executor::detail {

// Throws pd2bw::UsageError unless 0 < batch and 0 < seq <= config.seq_len.
inline void check_microbatch(const ModelConfig& config, int64_t batch, int64_t seq, const char* layer) {
  if (batch <= 0 || seq <= 0 || seq > config.seq_len) {
    throw UsageError(fmt::format("{}: microbatch of {} x {} tokens; need batch > 0 and 0 < seq <= {}", layer,
                                 batch, seq, config.seq_len));
  }
}

// Throws UsageError unless the backend can compute in `compute`.
void check_backend(const Backend& backend, DType compute, const char* layer);

// A compute-dtype View over host memory of T (the typed layer classes run on the cpu backend).
template <typename T>
View host(T* p, int64_t n) {
  return view_of(p, p == nullptr ? 0 : n);
}
template <typename T>
ConstView host(const T* p, int64_t n) {
  return view_of(p, p == nullptr ? 0 : n);
}

}  // namespace pd2bw::executor::detail
