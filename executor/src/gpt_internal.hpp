// Internal helpers shared by the GPT layer sources. Not a public header.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/gpt.hpp"

namespace pd2bw::executor::detail {

// Throws pd2bw::UsageError unless 0 < batch and 0 < seq <= config.seq_len.
inline void check_microbatch(const GptConfig& config, int64_t batch, int64_t seq, const char* layer) {
  if (batch <= 0 || seq <= 0 || seq > config.seq_len) {
    throw UsageError(fmt::format("{}: microbatch of {} x {} tokens; need batch > 0 and 0 < seq <= {}", layer,
                                 batch, seq, config.seq_len));
  }
}

template <typename T>
void resize(std::vector<T>& v, int64_t n) {
  v.resize(static_cast<size_t>(n));
}

template <typename T>
int64_t vector_bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.size() * sizeof(T));
}

}  // namespace pd2bw::executor::detail
