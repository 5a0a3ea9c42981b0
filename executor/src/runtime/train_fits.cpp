// Whether a plan fits before training allocates (train_fits.hpp).
#include "train_fits.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "pd2bw/checked.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/device.hpp"
#include "pd2bw/executor/model.hpp"
#include "pd2bw/pipeline/memory.hpp"
#include "pd2bw/pipeline/schedule.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::executor {

namespace {

// The least activation memory one microbatch of model layer `l` holds between its forward and its
// backward, in bytes (long double: a hand-made plan's microbatch of 2^31 rows must not overflow). Counts
// the stash tensors every backend keeps (BlockStash: x, ln1, qkv, attn, x1, ln2, fc and fc_act, 16 C per
// row; on the cpu also the (B, H, S, S) probabilities; HeadStash: x, ln and the (N, V) logits); leaves
// out statistics, lengths and targets, so it never exceeds what the executor allocates.
long double stash_floor(const PipelineConfig& c, int64_t l, int64_t scalar) {
  using LD = long double;
  const LD rows = static_cast<LD>(c.microbatch_size) * static_cast<LD>(c.seq), C = static_cast<LD>(c.model.d_model);
  switch (layer_kind(c.model, l)) {
    case LayerKind::embedding: return 0;
    case LayerKind::head: return rows * (2 * C + static_cast<LD>(c.model.vocab)) * static_cast<LD>(scalar);
    case LayerKind::block: break;
  }
  const LD probs = c.backend == "cpu" ? rows * static_cast<LD>(c.model.heads) * static_cast<LD>(c.seq) : 0;
  return (rows * 16 * C + probs) * static_cast<LD>(scalar);
}

}  // namespace

// The ranks `here` share one memory (the cpu: this machine's; cuda: one GPU's): refuse plans that cannot
// fit in it before allocating anything. Counts the static terms of the memory model (1 or 2 weight
// versions, gradients, optimizer moments, the master copy for bf16) of each rank's chunks, and the stash
// of one microbatch in flight on the rank's largest chunk (stash_floor): every schedule holds at least
// that at some moment, so a plan refused here could not have run.
void check_fits(const PipelineConfig& c, DType master, const std::vector<int64_t>& here) {
  const int64_t scalar = dtype_bytes(c.compute.value_or(master));
  const pipeline::MemoryFactors f = pipeline::memory_factors(c.schedule, c.optimizer.kind, scalar, dtype_bytes(master));
  const char* what = "the host memory the plan needs";
  const std::vector<std::pair<int64_t, int64_t>> place = c.places();  // {position, replica} of each rank
  int64_t need = 0;
  long double stash = 0, largest = 0;
  int64_t largest_stage = 0;
  for (const int64_t r : here) {
    int64_t numel = 0;
    long double rank_stash = 0;
    for (const int64_t chunk : pipeline::chunks_at(c.schedule, c.depth, c.chunks, place[static_cast<size_t>(r)].first)) {
      long double chunk_stash = 0;
      for (int64_t l = c.bounds[static_cast<size_t>(chunk)]; l < c.bounds[static_cast<size_t>(chunk) + 1]; ++l) {
        numel = checked_add(numel, layout_numel(layer_layout(c.model, l)), what);
        chunk_stash += stash_floor(c, l, scalar);
      }
      rank_stash = std::max(rank_stash, chunk_stash);
    }
    need = checked_add(need, f.total(checked_mul(numel, scalar, what)), what);
    if (rank_stash > largest) largest = rank_stash, largest_stage = place[static_cast<size_t>(r)].first;
    stash += rank_stash;
  }
  const int64_t have = device_info(c.backend).memory_bytes;
  if (have <= 0) return;
  const long double total = static_cast<long double>(need) + stash;
  if (need <= have && total <= static_cast<long double>(have)) return;
  const std::string where = c.backend == "cuda" ? "the GPU" : "this machine";
  if (need <= have)
    throw UsageError(fmt::format("one microbatch of {} x {} tokens in flight needs at least {} of activations ({} on "
                                 "stage {} alone) besides {} of weights, gradients and optimizer state ({} rank(s)); "
                                 "{} has {}",
                                 c.microbatch_size, c.seq, schemas::format_estimated_bytes(stash),
                                 schemas::format_estimated_bytes(largest), largest_stage,
                                 schemas::format_bytes(need), here.size(), where, schemas::format_bytes(have)),
                     "plan with a smaller microbatch (pd2bw plan --microbatch N, in samples), more stages, or "
                     "--recompute");
  if (c.backend == "cuda")
    throw UsageError(fmt::format("{} rank(s) share one GPU here, and their weights, gradients and optimizer state alone "
                                 "need {}; the GPU has {}",
                                 here.size(), schemas::format_bytes(need), schemas::format_bytes(have)),
                     "plan fewer stages and replicas per GPU, or run one process per GPU");
  throw UsageError(fmt::format("training a {}-block GPT on the CPU needs at least {} of host memory for weights, gradients "
                               "and optimizer state on this machine ({} ranks); it has {}",
                               c.model.blocks, schemas::format_bytes(need), here.size(), schemas::format_bytes(have)),
                   "the CPU backend is for small models; plan a smaller model (e.g. "
                   "schemas/examples/gpt-tiny.profile.json)");
}

}  // namespace pd2bw::executor
