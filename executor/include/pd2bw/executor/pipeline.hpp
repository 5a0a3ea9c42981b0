// The pipeline runtime (DESIGN.md sections 3 and 7): each rank builds its stage of the model (or its v
// model chunks, for interleaved and zb-v) and interprets the op list the schedule generator
// (pd2bw/pipeline) gives it: stash per in-flight microbatch, weight versions (two reused buffers for 2BW,
// never a third; one updated in place for the synchronous schedules), recompute where the plan says,
// gradient accumulation over the m microbatches of a step, the replicas' allreduce and the optimizer
// update. The math is exactly a sequential run of W(j+1) = W(j) - update(g(W(j-1))) (2BW) or
// W(j+1) = W(j) - update(g(W(j))) (Flush, GPipe, zb-h1, zb-h2, interleaved, zb-v).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/comm.hpp"
#include "pd2bw/executor/layers.hpp"
#include "pd2bw/executor/optimizer.hpp"
#include "pd2bw/pipeline/shape.hpp"
#include "pd2bw/schemas/plan.hpp"

namespace pd2bw::executor {

struct OptimizerOptions {
  schemas::Optimizer kind = schemas::Optimizer::adamw;
  AdamWConfig adamw;
  SgdConfig sgd;
  LrSchedule lr;
  double clip_norm = 0;  // global gradient-norm clipping over all stages; <= 0 turns it off
  // At every update every rank checks the step's losses (all replicas) and gradients (all stages) and,
  // after the update, its new weights. A non-finite loss or gradient stops training (StageWorker::run
  // throws Error on every rank, before the update) unless skip_nonfinite, which skips the step instead:
  // W(j+1) = W(j), the optimizer moments stay, the learning-rate schedule and the bias-correction count
  // advance as usual and the step's data is not retried. Under 2BW the skipped gradient g(W(j-1)) is
  // simply never applied: W(j) is already in use by step j + 1, so nothing is rewound. Non-finite
  // weights after an update always stop training (the update itself overflowed; skipping cannot cure it).
  bool skip_nonfinite = false;
};

// The pipeline's shape (schedule, depth, width, microbatches, microbatch_size in sequences, chunks per
// rank, bounds and recompute per model chunk, ranks per position; see pipeline::PipelineShape) and what
// the executor adds to run it.
struct PipelineConfig : pipeline::PipelineShape {
  ModelConfig model;
  int64_t seq = 1;             // tokens per sequence (<= model.seq_len)
  uint64_t seed = 1234;        // weight initialisation
  OptimizerOptions optimizer;
  std::string backend = "cpu";     // registry name (backend.hpp) of the backend every stage runs on
  std::optional<DType> compute;    // compute dtype of the layers; unset: the master dtype T of the
                                   // StageWorker. bf16 needs T = float (fp32 master, gradients, moments).
  // Throws UsageError naming the first inconsistency: the model, then the shape against the model's
  // layer count (PipelineShape::validate: d, w, m, b, m < d for 2bw, chunks, bounds, recompute, ranks),
  // then that the chunks of one position share one recompute flag (a rank recomputes all or none), then seq.
  void validate() const;
};

// The plan's schedule, shape, chunks per rank, stages (model chunks) and rank table for `model` (whose
// layer count must equal the plan's). Throws UsageError when they do not match.
PipelineConfig pipeline_from_plan(const schemas::Plan& plan, const ModelConfig& model);

// Where microbatch `microbatch` of step `step` on replica `replica` comes from: tokens and targets,
// both (b, seq). Must be a pure function of its arguments (the first and the last stage both call it).
class MicrobatchSource {
 public:
  virtual ~MicrobatchSource() = default;
  virtual void fill(int64_t step, int64_t microbatch, int64_t replica, int32_t* tokens, int32_t* targets) const = 0;
  // The same microbatch's token types (b, seq) and key lengths (b), which a bert model reads (the first
  // stage the types; every stage with blocks the lengths, for the padding mask). Pure like fill().
  // Returns false when the source has none: then every type is 0 and every row has seq keys.
  virtual bool fill_segments(int64_t /*step*/, int64_t /*microbatch*/, int64_t /*replica*/, int32_t* /*types*/,
                             int32_t* /*lengths*/) const {
    return false;
  }
};

// Receives each microbatch's loss from the last stage, and hears of every update on every rank (called
// from the ranks' threads; a sink shared by several ranks must be thread-safe).
class LossSink {
 public:
  virtual ~LossSink() = default;
  virtual void on_loss(int64_t step, int64_t replica, int64_t microbatch, double loss) = 0;
  // After this rank applied the update of `step`. By then every loss of `step` on every replica has
  // been computed (the update waits for the stage's last backward of the step and, with replicas, for
  // the allreduce), so a rank may collect them here.
  virtual void on_update(int64_t /*step*/) {}
  // Before on_update(step), when the update of `step` was skipped (OptimizerOptions::skip_nonfinite);
  // `why` says what was not finite. Called on every rank.
  virtual void on_skip(int64_t /*step*/, const std::string& /*why*/) {}
};

// One rank's share of the pipeline: the model chunks it holds (one, its stage, unless the schedule puts
// v = PipelineShape::chunks on every rank: interleaved, zb-v), their weights and optimizer state, and
// the interpreter of its op list, which names for each op the chunk it is for. T (float or double) is
// the dtype of the master weights, gradients and optimizer moments; the layers compute in
// config.compute on config.backend, whose one arena (per rank) holds every buffer of its chunks. With a
// compute dtype narrower than T (bf16), each chunk keeps one master copy in T, updated in place, and
// casts it once per update into the compute-dtype buffer of the new version (2BW: two such buffers,
// reused).
//
// The per-chunk accessors take the model chunk (0 .. d v - 1, one of chunks()); their default,
// kOnlyChunk, means the rank's one chunk and throws Error on a rank that holds several.
template <typename T>
class StageWorker {
 public:
  static constexpr int64_t kOnlyChunk = -1;
  // Builds and initialises the chunks of `rank` (same initial weights as the whole model, whatever the
  // split). Throws UsageError for an invalid config or rank.
  StageWorker(const PipelineConfig& config, int64_t rank);
  // The same, and makes the rank's groups on `comm` now (stage group = the position's replicas, replica
  // group = the replica's positions); run() with another Comm makes them again on that one. Every rank
  // of the job must construct its worker this way, or every rank the other way.
  StageWorker(const PipelineConfig& config, int64_t rank, Comm& comm);
  ~StageWorker();
  StageWorker(StageWorker&&) noexcept;

  // Runs steps [first_step, first_step + steps) of the schedule, exchanging with the other ranks
  // through `comm`; the pipeline fills at the start and drains at the end (a run of k steps then one of
  // the rest computes exactly what one run of all of them does). Throws Error naming the step (1-based)
  // and stage (model chunk) when a loss, gradient or weight is not finite (see
  // OptimizerOptions::skip_nonfinite).
  void run(Comm& comm, const MicrobatchSource& data, int64_t first_step, int64_t steps, LossSink* sink);

  int64_t stage() const;                      // the rank's pipeline position, 0 .. d - 1 (= its chunk when v = 1)
  int64_t replica() const;
  const std::vector<int64_t>& chunks() const; // the model chunks the rank holds, model order
  int64_t steps_done() const;                 // optimizer updates applied so far
  // The chunk's parameters (its layers' layouts, in order; a head away from a tied embedding adds the
  // table's copy last).
  const ParamLayout& layout(int64_t chunk = kOnlyChunk) const;
  // The chunk's weights of `version` (which must be held: the newest, or the one before it for 2BW): its
  // own buffer on a host-visible backend (cpu), else a host copy of it, valid until the next call for
  // that version and chunk (writing to a copy changes nothing). With bf16 compute the newest version is
  // the fp32 master and the older one is its bf16 copy widened to T (exactly), valid until the next call.
  std::span<T> weights(int64_t version, int64_t chunk = kOnlyChunk);
  std::span<T> moment1(int64_t chunk = kOnlyChunk);  // AdamW m, or SGD momentum (a host copy likewise)
  std::span<T> moment2(int64_t chunk = kOnlyChunk);  // AdamW v (empty for SGD)
  // Restores the chunk's state after `steps` updates: for 2BW the weights of versions steps - 1 and
  // steps (the first must be empty when steps == 0), else of version steps. Restore every chunk of the
  // rank before the next run().
  void restore(int64_t steps, std::span<const T> previous, std::span<const T> current, std::span<const T> m1,
               std::span<const T> m2, int64_t chunk = kOnlyChunk);
  int64_t versions_allocated() const;       // weight-version buffers ever allocated, the most of any chunk (2 for 2BW at most)
  int64_t master_buffers() const;           // 1 when each chunk's master weights are a buffer of their own (bf16), else 0
  DType compute_dtype() const;
  int64_t peak_bytes() const;               // the rank arena's peak: the most bytes it held at once
  MemoryStats memory() const;               // the rank arena's statistics
  // Measured while running: compute time on the backend's clock (cpu: this rank's thread CPU time) in
  // forward, recompute and backward, per microbatch through all of the rank's chunks (what a dedicated
  // device would spend; wall time would include other ranks' threads sharing the cores), and when each
  // update finished (steady clock, ms since its epoch), by step.
  double compute_ms_per_microbatch() const;
  const std::vector<double>& update_end_ms() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs every rank of `config` as a thread of this process with the `threads` transport. Workers and their
// Comms persist across run() calls (for checkpoints between segments of steps); after a failed run the
// Comms stay aborted.
template <typename T>
class ThreadsJob {
 public:
  explicit ThreadsJob(const PipelineConfig& config);
  // Runs steps [first_step, first_step + steps) on all ranks. When a rank throws, the others are
  // aborted and the first failure is rethrown.
  void run(const MicrobatchSource& data, int64_t first_step, int64_t steps, LossSink* sink);
  StageWorker<T>& worker(int64_t rank) { return workers_.at(static_cast<size_t>(rank)); }
  int64_t ranks() const { return static_cast<int64_t>(workers_.size()); }

 private:
  PipelineConfig config_;
  std::vector<std::unique_ptr<Comm>> comms_;
  std::vector<StageWorker<T>> workers_;
};

extern template class StageWorker<float>;
extern template class StageWorker<double>;
extern template class ThreadsJob<float>;
extern template class ThreadsJob<double>;

}  // namespace pd2bw::executor
