// The private state of one rank's stage: its layers, weight versions, gradients, optimizer moments and
// the microbatches in flight. Shared by the op interpreter (stage_worker.cpp) and the stage's math
// (stage_math.cpp).
#pragma once

#include <array>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "pd2bw/executor/pipeline.hpp"
#include "pd2bw/planner/schedule.hpp"

namespace pd2bw::executor {

// One microbatch in flight on this stage.
template <typename T>
struct Microbatch {
  std::vector<int32_t> tokens, targets;  // (B, S) on the first and the last stage
  std::vector<T> input;                  // (B, S, C) received activation (stages > 0)
  std::optional<typename GptEmbedding<T>::Stash> embedding;
  std::vector<typename GptBlock<T>::Stash> blocks;
  std::optional<typename GptHead<T>::Stash> head;
  std::vector<T> output;    // (B, S, C) activation to send (stages < d - 1)
  std::vector<T> grad_out;  // (B, S, C) received gradient of the output
  std::vector<T> grad_in;   // (B, S, C) gradient of the input to send (stages > 0)
  int64_t bytes() const;
  void drop_stash();
};

template <typename T>
struct StageWorker<T>::Impl {
  PipelineConfig cfg;
  int64_t rank = 0, stage = 0, replica = 0;
  int64_t begin = 0, end = 0;  // layers
  bool first = false, last = false, recompute = false;
  std::optional<GptEmbedding<T>> embedding;
  std::vector<GptBlock<T>> blocks;
  std::optional<GptHead<T>> head;
  ParamLayout layout;
  std::vector<int64_t> offsets;  // per layer of the stage: where its parameters start
  int64_t numel = 0;
  // Tied embeddings with the head away from the embedding: the head's stage keeps a copy of the token
  // table at this offset (its last tensor, "lm_head.weight"); -1 otherwise.
  int64_t tied_copy = -1;
  std::array<std::vector<T>, 2> weights;  // 2BW: version v lives in weights[v % 2]; else weights[0]
  int64_t allocated = 0;
  std::vector<T> grads, m1, m2;
  int64_t steps_done = 0;
  std::map<std::pair<int64_t, int64_t>, Microbatch<T>> live;  // (step, microbatch) -> state
  int64_t bytes = 0, peak = 0;
  double compute_cpu_ms = 0;       // thread CPU time in forward, recompute, backward
  int64_t computed_microbatches = 0;
  std::vector<double> update_end;  // steady-clock ms of each update's end, by step

  Impl(const PipelineConfig& config, int64_t rank);
  bool two_bw() const { return cfg.schedule == schemas::Schedule::two_bw; }
  std::vector<T>& buffer_of(int64_t version) { return weights[two_bw() ? static_cast<size_t>(version % 2) : 0]; }
  int64_t version_of_step(int64_t step) const { return planner::version_for_step(cfg.schedule, step); }
  int64_t activation_numel() const { return cfg.microbatch_size * cfg.seq * cfg.model.d_model; }
  std::vector<int64_t> stage_group() const;    // ranks of this stage, replica order
  std::vector<int64_t> replica_group() const;  // ranks of this replica, stage order
  // Those groups, made once per Comm (bind_groups, on the first run with that Comm).
  Group stage_comm_group, replica_comm_group;
  uint64_t groups_of = 0;  // Comm::serial() of the Comm that made them
  void bind_groups(Comm& comm);
  int64_t rank_of(int64_t at_stage, int64_t of_replica) const {
    return cfg.ranks[static_cast<size_t>(at_stage)][static_cast<size_t>(of_replica)];
  }
  void account();  // recomputes the bytes held and the peak
  // The token table the head reads (of weights p) and where its gradient goes; null when not tied.
  const T* head_wte(const T* p) const;
  T* head_dwte();
  // Sums the tied table's gradient of the embedding's and the head's stage (same replica) on both.
  void exchange_tied_grad(Comm& comm, int64_t step);

  // The math of one op (stage_math.cpp).
  void forward(Microbatch<T>& mb, int64_t step, const T* params, LossSink* sink, int64_t k);
  void backward(Microbatch<T>& mb, const T* params);
  void update(Comm& comm, int64_t step);
};

// Message tags, compact enough for MPI (Comm takes [0, kMaxUserTag]; the job's reports use 8192 and up):
// kind x a window of 1024 slots from the step and the microbatch. Correctness needs no uniqueness: the
// only messages that share a tag go between the same pair of ranks with the same kind, a transport
// delivers those in send order, and both ends walk the same schedule, which sends and receives each
// kind between a pair in the same (step, microbatch) order; so the k-th receive under a tag gets the
// k-th send. The slot only narrows what could be confused if that order were ever broken.
enum class TagKind : int64_t { activation = 0, gradient = 1, tied = 2 };
inline constexpr int64_t kTagWindow = 1024;
inline int64_t make_tag(TagKind kind, int64_t step, int64_t microbatch) {
  const int64_t slot = (step % 8) * 128 + (microbatch < 0 ? 0 : microbatch % 128);
  return static_cast<int64_t>(kind) * kTagWindow + slot;
}

}  // namespace pd2bw::executor
