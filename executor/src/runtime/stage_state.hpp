// The private state of one rank: its model chunks (chunk_state.hpp: one, its stage, unless the schedule
// puts several on a rank), the backend whose arena holds them, the losses and timings of its steps and
// its groups. The rank walks one op list (stage_worker.cpp), dispatching each op to the chunk it names;
// its messages go to the ranks of the neighbouring chunks, or are handed over in place when that chunk
// is its own (stage_messages.cpp); it updates all its chunks at once (stage_math.cpp, stage_health.cpp).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "chunk_state.hpp"
#include "pd2bw/executor/pipeline.hpp"
#include "pd2bw/pipeline/schedule.hpp"

namespace pd2bw::executor {

// Message tags, compact enough for MPI (Comm takes [0, kMaxUserTag]; the job's reports use 8192 and up):
// kind x a window of 1024 slots; the window is divided into one lane per chunk of a rank (v lanes), and
// a lane's slots come from the step and the microbatch. Correctness needs no more: the messages that
// share a tag go between the same pair of ranks with the same kind over the same chunk boundary (the
// lane: the index of the boundary's lower chunk among its position's chunks, which tells the v
// boundaries a pair of ranks can carry apart), a transport delivers those in send order, and both ends
// walk the schedule, which sends and receives each kind over a boundary in the same (step, microbatch)
// order; so the k-th receive under a tag gets the k-th send. The slot only narrows what could be
// confused if that order were ever broken. With v = 1 there is one lane: the tags are those of one chunk.
enum class TagKind : int64_t { activation = 0, gradient = 1, tied = 2, health = 3 };
inline constexpr int64_t kTagWindow = 1024;
inline int64_t make_tag(TagKind kind, int64_t lane, int64_t lanes, int64_t step, int64_t microbatch) {
  const int64_t per_lane = kTagWindow / lanes;
  const int64_t slot = ((step % 8) * 128 + (microbatch < 0 ? 0 : microbatch % 128)) % per_lane;
  return static_cast<int64_t>(kind) * kTagWindow + lane * per_lane + slot;
}

template <typename T>
struct StageWorker<T>::Impl {
  PipelineConfig cfg;
  std::unique_ptr<Backend> backend;          // declared first: destroyed after every buffer of the chunks
  DType compute = DType::f32;                // the layers' dtype
  bool mixed = false;                        // compute is narrower than T: a master copy per chunk
  int64_t rank = 0, stage = 0, replica = 0;  // stage: the pipeline position
  bool recompute = false;                    // all of the rank's chunks, or none
  std::vector<int64_t> chunk_ids;            // the rank's chunks, model order
  std::vector<ChunkState<T>> chunks;         // the same order
  std::vector<int64_t> lanes;                // per model chunk: its index among its position's chunks (tags, lookup)
  int64_t steps_done = 0;
  double compute_ms = 0;           // backend clock in forward, recompute, backward
  int64_t computed_backwards = 0;  // backwards (or W's) over all chunks
  std::vector<double> update_end;  // steady-clock ms of each update's end, by step

  // Read back once per step, at the update, so that a device backend is never waited for inside a step:
  // the last chunk's losses, (m) f64 per step (with which microbatches to report), and the compute
  // times of the ops, as pairs of marks on the backend's clock.
  struct StepLosses {
    Buffer values;               // (m) f64
    std::vector<bool> reported;  // microbatch k's forward had a sink
  };
  std::map<int64_t, StepLosses> losses;
  std::vector<std::pair<TimerMark, TimerMark>> timed;
  View loss_slot(int64_t step, int64_t k, bool report);
  void report_losses(int64_t step, LossSink* sink);
  void time_since(const TimerMark& from) { timed.emplace_back(from, backend->mark()); }
  void resolve_times();

  // Moving a buffer over Comm: in place when the backend is host-visible or the transport takes
  // device memory (ordered on the backend's stream), else staged through host memory.
  std::vector<std::byte> staging;
  void send(Comm& comm, int64_t dst, int64_t tag, ConstView data);
  void recv(Comm& comm, int64_t src, int64_t tag, View data);
  void allreduce_grads(Comm& comm, ChunkState<T>& ch);

  Impl(const PipelineConfig& config, int64_t rank);
  int64_t version_of_step(int64_t step) const { return pipeline::version_for_step(cfg.schedule, step); }
  int64_t activation_numel() const { return cfg.microbatch_size * cfg.seq * cfg.model.d_model; }
  bool holds(int64_t chunk) const { return cfg.position_of(chunk) == stage; }
  ChunkState<T>* find(int64_t chunk) {  // null when another rank holds it
    return holds(chunk) ? &chunks[static_cast<size_t>(lanes[static_cast<size_t>(chunk)])] : nullptr;
  }
  ChunkState<T>& chunk(int64_t id);            // one of the rank's chunks; throws Error otherwise
  ChunkState<T>& only_chunk(int64_t id);       // id, or with -1 the rank's one chunk (throws if several)
  std::vector<int64_t> stage_group() const;    // ranks of this position, replica order
  std::vector<int64_t> replica_group() const;  // ranks of this replica, position order
  // Those groups, made once per Comm (bind_groups, on the first run with that Comm). The stage group
  // serves every chunk of the position (their allreduces run one after another, in the same order on
  // every replica).
  Group stage_comm_group, replica_comm_group;
  uint64_t groups_of = 0;  // Comm::serial() of the Comm that made them
  void bind_groups(Comm& comm);
  int64_t rank_of(int64_t at_stage, int64_t of_replica) const {
    return cfg.ranks[static_cast<size_t>(at_stage)][static_cast<size_t>(of_replica)];
  }
  int64_t rank_of_chunk(int64_t chunk) const { return rank_of(cfg.position_of(chunk), replica); }
  int64_t tag(TagKind kind, int64_t boundary, const std::pair<int64_t, int64_t>& key) const {
    return make_tag(kind, lanes[static_cast<size_t>(boundary)], cfg.chunks, key.first, key.second);
  }

  // One op of the list (stage_worker.cpp): messages, compute, the step's end (begin_update).
  void run_op(Comm& comm, const MicrobatchSource& data, const pipeline::Op& op, int64_t step, LossSink* sink);
  void compute_op(ChunkState<T>& ch, pipeline::OpKind kind, const std::pair<int64_t, int64_t>& key,
                  const MicrobatchSource& data, bool report);
  // The messages of chunk ch (stage_messages.cpp): receive its input (activation) or its output's
  // gradient, send its output or its input's gradient; kind says which. From or to a chunk of this
  // rank, the buffer is handed over in place.
  void receive(Comm& comm, ChunkState<T>& ch, TagKind kind, const std::pair<int64_t, int64_t>& key);
  void hand_on(Comm& comm, ChunkState<T>& ch, TagKind kind, const std::pair<int64_t, int64_t>& key);
  // Sums the tied table's gradient of the embedding's and the head's chunk (same replica) on both: over
  // Comm when they are on two ranks, in place when both are this rank's. The head's rank only sends
  // here and returns true: it adds the embedding's part at receive_tied_grad, before its update.
  bool exchange_tied_grad(Comm& comm, int64_t step);
  void receive_tied_grad(Comm& comm, int64_t step);

  // The update of a step, begun at the rank's end of the step (begin_update: the tied table's exchange,
  // the rank's share of the step's health sent to its replica's other ranks, the losses reported) and
  // finished by settle (the others' health received, then every chunk updated, or skipped with
  // skip_nonfinite; the sink told). 2BW settles as late as its version rule allows (settle_due), so
  // that a rank does not wait for the earlier stages' last backward of the step: until the first op
  // that reads the new version, the next update, or the end of the run; without a master copy the
  // gradient waits parked (ChunkState::park_gradient), with one until the next op that adds to the
  // gradients. Every other schedule settles at once. settle throws Error when the step is not finite
  // and may not be skipped, or the new weights are not finite.
  struct OpenUpdate {
    int64_t step = 0;
    std::vector<double> health;  // this rank's share
    bool tied_owed = false;      // receive_tied_grad is still to run
  };
  std::optional<OpenUpdate> open;
  void begin_update(Comm& comm, int64_t step, LossSink* sink);
  void settle(Comm& comm, LossSink* sink);
  bool settle_due(const pipeline::Op& op, int64_t step) const;
  // The step's health (stage_health.cpp), the same on every rank once gathered: per model chunk its
  // gradient's sum of squares (scaled as the clip needs it), then the count of non-finite losses over
  // all replicas. own_health fills this rank's slots (zeros elsewhere; the last chunk's rank sums the
  // loss count over its stage group), post_health sends them to the replica's other ranks, and
  // gather_health receives theirs and adds them in position order (bit-identical to a fixed-order
  // allreduce: every slot has one rank's value).
  std::vector<double> own_health(Comm& comm, int64_t step, double scale);
  void post_health(Comm& comm, int64_t step, std::span<const double> own);
  std::vector<double> gather_health(Comm& comm, int64_t step, const std::vector<double>& own);
};

}  // namespace pd2bw::executor
