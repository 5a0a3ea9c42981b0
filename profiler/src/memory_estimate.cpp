// The least memory a profile run needs (profiler.hpp, check_profile_memory): estimated from the options
// before anything is allocated, so that --blocks 1000000000 or --microbatch 2147483648 is refused at once
// instead of after gigabytes and seconds (issue 28).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/device.hpp"
#include "pd2bw/profiler/profiler.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::profiler {

namespace {

// Sizes in long double: the products of hostile dimensions overflow int64, and only their order matters.
using Bytes = long double;

[[noreturn]] void refuse(Bytes need, Bytes have, const std::string& what, const std::string& where,
                         const std::string& hint) {
  throw UsageError(fmt::format("profiling this model needs at least {} of {} for {}; {} has {}", schemas::format_estimated_bytes(need), where,
                               what, where == "host memory" ? "this machine" : "the device", schemas::format_estimated_bytes(have)),
                   hint);
}

}  // namespace

void check_profile_memory(const ProfileOptions& o, int64_t host_bytes, int64_t device_bytes) {
  const Bytes L = static_cast<Bytes>(o.blocks), C = static_cast<Bytes>(o.d_model), H = static_cast<Bytes>(o.heads);
  const Bytes T = static_cast<Bytes>(o.seq_len), V = static_cast<Bytes>(o.vocab);
  const Bytes sizes = static_cast<Bytes>(o.microbatches.size());
  const Bytes b = static_cast<Bytes>(o.microbatches.empty() ? 1 : o.microbatches.back());
  const Bytes scalar = o.dtype == "bf16" ? 2 : 4;
  // The profile's records: L + 2 layers, each with its timings per microbatch size, as structures, a
  // JSON tree and text (a lower bound of a few hundred bytes per entry).
  const Bytes records = (L + 2) * (128 + 256 * sizes);
  if (host_bytes > 0 && records > static_cast<Bytes>(host_bytes))
    refuse(records, host_bytes, fmt::format("the records of --blocks {} layers", o.blocks), "host memory",
           "profile fewer blocks: every block is the same layer, so a few give the planner what it needs");
  // One layer at a time: its weights and gradients (the block: 12 C^2; the embedding and head: V x C)
  // and the activations of the largest microbatch (C-wide tensors, the attention's T x T per head and
  // the head's logits over the vocabulary).
  const Bytes block_params = 12 * C * C, table_params = (V + T) * C;
  const Bytes weights = 2 * scalar * std::max(block_params, table_params);
  const Bytes activations = b * T * (8 * C + H * T + 2 * V) * scalar;
  const Bytes need = weights + activations;
  if (device_bytes <= 0 || need <= static_cast<Bytes>(device_bytes)) return;
  const std::string where = o.device == "cpu" ? "host memory" : "device memory";
  if (weights >= activations) {
    const bool table = table_params > block_params;
    refuse(need, device_bytes,
           table ? fmt::format("the token table of --vocab {} x --d-model {}", o.vocab, o.d_model)
                 : fmt::format("the weights of one block of --d-model {}", o.d_model),
           where, table ? "profile a smaller --vocab or --d-model" : "profile a smaller --d-model");
  }
  refuse(need, device_bytes,
         fmt::format("the activations of --microbatch {} x --seq {} tokens (with --d-model {}, --heads {}, --vocab {})",
                     o.microbatches.empty() ? 1 : o.microbatches.back(), o.seq_len, o.d_model, o.heads, o.vocab),
         where, "profile smaller --microbatch sizes, or a shorter --seq");
}

void check_profile_memory(const ProfileOptions& o) {
  const int64_t host = executor::device_info("cpu").memory_bytes;
  check_profile_memory(o, host, o.device == "cpu" ? host : executor::device_info(o.device).memory_bytes);
}

}  // namespace pd2bw::profiler
