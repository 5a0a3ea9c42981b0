// One rank's state and its step's end: building its chunks, its groups, the tied table's exchange, the
// optimizer update of all its chunks with the non-finite guard (begun at the step's end, settled when
// the schedule needs it), and the losses and times it reads back once per step.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <tuple>

#include "pd2bw/error.hpp"
#include "stage_health.hpp"
#include "stage_state.hpp"

namespace pd2bw::executor {

namespace {

// The compute dtype of a rank whose master weights are T; throws UsageError for a mix the runtime
// does not keep (only bf16 over fp32 masters is narrower than its master).
template <typename T>
DType stage_compute(const PipelineConfig& cfg) {
  const DType c = cfg.compute.value_or(dtype_of<T>());
  if (c == dtype_of<T>() || (c == DType::bf16 && dtype_of<T>() == DType::f32)) return c;
  throw UsageError(
      fmt::format("compute dtype {} with {} master weights is not supported", to_string(c), to_string(dtype_of<T>())),
      "use bf16 over float masters, or the same dtype for both");
}

double steady_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

template <typename T>
StageWorker<T>::Impl::Impl(const PipelineConfig& config, int64_t rank_)
    : cfg(config), backend(make_backend(config.backend)), compute(stage_compute<T>(config)), rank(rank_) {
  cfg.validate();
  mixed = compute != dtype_of<T>();
  if (rank < 0 || rank >= cfg.ranks_total())
    throw UsageError(fmt::format("rank {} is not in the plan's rank table", rank));
  std::tie(stage, replica) = cfg.places()[static_cast<size_t>(rank)];
  if (cfg.chunks > kTagWindow)
    throw UsageError(
        fmt::format("{} chunks per rank; the runtime's messages tell at most {} apart", cfg.chunks, kTagWindow));
  std::vector<int64_t> seen(static_cast<size_t>(cfg.depth), 0);
  for (int64_t c = 0; c < cfg.chunks_total(); ++c) lanes.push_back(seen[static_cast<size_t>(cfg.position_of(c))]++);
  chunk_ids = pipeline::chunks_at(cfg.schedule, cfg.depth, cfg.chunks, stage);
  recompute = cfg.recompute[static_cast<size_t>(chunk_ids.front())];
  chunks.reserve(chunk_ids.size());
  for (const int64_t c : chunk_ids) chunks.emplace_back(cfg, *backend, compute, c);
}

template <typename T>
ChunkState<T>& StageWorker<T>::Impl::chunk(int64_t id) {
  if (id < 0 || id >= cfg.chunks_total() || !holds(id))
    throw Error(fmt::format("rank {} (stage {}) does not hold model chunk {}", rank, stage, id));
  return *find(id);
}

template <typename T>
ChunkState<T>& StageWorker<T>::Impl::only_chunk(int64_t id) {
  if (id >= 0) return chunk(id);
  if (chunks.size() != 1)
    throw Error(fmt::format("rank {} holds {} model chunks: name the one meant", rank, chunks.size()));
  return chunks.front();
}

template <typename T>
std::vector<int64_t> StageWorker<T>::Impl::stage_group() const {
  return cfg.ranks[static_cast<size_t>(stage)];
}

template <typename T>
std::vector<int64_t> StageWorker<T>::Impl::replica_group() const {
  std::vector<int64_t> g;
  for (int64_t i = 0; i < cfg.depth; ++i) g.push_back(rank_of(i, replica));
  return g;
}

// Every rank of the job makes its stage group first, then its replica group, so the groups' ids agree.
template <typename T>
void StageWorker<T>::Impl::bind_groups(Comm& comm) {
  if (groups_of == comm.serial()) return;
  stage_comm_group = comm.group(stage_group());
  replica_comm_group = comm.group(replica_group());
  groups_of = comm.serial();
}

// Both sides compute (embedding's part) + (head's part) in that order, so both copies get the same
// gradient bits and therefore stay equal through every update; so does a rank holding both chunks.
template <typename T>
bool StageWorker<T>::Impl::exchange_tied_grad(Comm& comm, int64_t step) {
  const int64_t n = cfg.model.vocab * cfg.model.d_model, last = cfg.chunks_total() - 1;
  ChunkState<T>* emb = find(0);
  ChunkState<T>* head = find(last);
  if (emb && head) {
    const View e = emb->grads.view().slice(emb->table_offset(), n),
               h = head->grads.view().slice(head->table_offset(), n);
    backend->add(e, h, e, n);
    backend->copy(e, h);
    return false;
  }
  ChunkState<T>& ch = emb ? *emb : *head;
  const View mine = ch.grads.view().slice(ch.table_offset(), n);
  const int64_t peer = rank_of_chunk(emb ? last : 0);
  const int64_t tag = make_tag(TagKind::tied, 0, 1, step, 0);
  if (!backend->host_visible())
    send(comm, peer, tag, mine);
  else
    comm.send(peer, tag, std::span<const T>(mine.as<T>(), static_cast<size_t>(n)));
  if (head) return true;  // the embedding's rank ends its step later: receive its part at the update
  receive_tied_grad(comm, step);
  return false;
}

// Adds the other chunk's part of the tied table's gradient to this rank's (wherever the step's gradient
// waits), embedding's part first.
template <typename T>
void StageWorker<T>::Impl::receive_tied_grad(Comm& comm, int64_t step) {
  const int64_t n = cfg.model.vocab * cfg.model.d_model, last = cfg.chunks_total() - 1;
  ChunkState<T>* emb = find(0);
  ChunkState<T>& ch = emb ? *emb : *find(last);
  const View mine = ch.step_grads(step).view().slice(ch.table_offset(), n);
  const int64_t peer = rank_of_chunk(emb ? last : 0);
  const int64_t tag = make_tag(TagKind::tied, 0, 1, step, 0);
  if (!backend->host_visible()) {  // the same sum on the device: a + b and b + a are the same bits
    Buffer theirs = backend->alloc(dtype_of<T>(), n);
    recv(comm, peer, tag, theirs.view());
    backend->add(mine, theirs.view(), mine, n);
    return;
  }
  const std::span<T> own(mine.as<T>(), static_cast<size_t>(n));
  std::vector<T> theirs(static_cast<size_t>(n));
  comm.recv(peer, tag, std::span<T>(theirs));
  for (size_t i = 0; i < own.size(); ++i) own[i] = emb ? own[i] + theirs[i] : theirs[i] + own[i];
}

// The step's gradient (computed with version_of_step(step)) is complete on this rank: its share of the
// health goes out, and in 2BW the gradient is parked when it can be.
template <typename T>
void StageWorker<T>::Impl::begin_update(Comm& comm, int64_t step, LossSink* sink) {
  const int64_t n = cfg.chunks_total();
  OpenUpdate u{step, {}, false};
  if (cfg.model.tie_embeddings && n > 1 && (holds(0) || holds(n - 1))) u.tied_owed = exchange_tied_grad(comm, step);
  u.health = own_health(comm, step, 1.0 / static_cast<double>(cfg.width));
  post_health(comm, step, u.health);
  if (cfg.schedule == schemas::Schedule::two_bw && !mixed)
    for (ChunkState<T>& ch : chunks) ch.park_gradient(step);
  report_losses(step, sink);
  open = std::move(u);
  if (cfg.schedule != schemas::Schedule::two_bw) settle(comm, sink);
}

// W(step + 1) from W(step) and the step's gradient, averaged over the replicas and clipped by the global
// norm over all chunks of this replica, for every chunk of the rank. First the non-finite guard
// (stage_health.cpp): every rank judges the same health vector, so all stop or all skip together.
template <typename T>
void StageWorker<T>::Impl::settle(Comm& comm, LossSink* sink) {
  const OpenUpdate u = std::move(*open);
  open.reset();
  const auto& opt = cfg.optimizer;
  const int64_t n = cfg.chunks_total(), step = u.step;
  if (u.tied_owed) receive_tied_grad(comm, step);
  const std::vector<double> health = gather_health(comm, step, u.health);
  const std::string skipped = nonfinite_verdict(health, n);
  if (!skipped.empty() && !opt.skip_nonfinite)
    throw nonfinite_error(step, skipped, skipped.find(" and ") == std::string::npos ? "is" : "are");
  double scale = 1.0 / static_cast<double>(cfg.width);
  if (skipped.empty() && opt.clip_norm > 0) scale *= clip_factor(health_gradient_sum(health, n), opt.clip_norm);
  for (ChunkState<T>& ch : chunks)
    if (skipped.empty())
      ch.apply_update(step, scale);
    else
      ch.skip_update(step);
  steps_done = step + 1;
  resolve_times();
  if (!skipped.empty() && sink) sink->on_skip(step, skipped);
  if (update_end.size() <= static_cast<size_t>(step)) update_end.resize(static_cast<size_t>(step) + 1, 0.0);
  update_end[static_cast<size_t>(step)] = steady_ms();
  if (sink) sink->on_update(step);
}

// Microbatch k's loss of `step` goes to slot k of that step's buffer; report: hand it to the sink later.
template <typename T>
View StageWorker<T>::Impl::loss_slot(int64_t step, int64_t k, bool report) {
  StepLosses& l = losses[step];
  if (l.values.empty()) {
    l.values = backend->alloc(DType::f64, cfg.microbatches);
    l.reported.assign(static_cast<size_t>(cfg.microbatches), false);
  }
  if (report) l.reported[static_cast<size_t>(k)] = true;
  return l.values.view().slice(k, 1);
}

// One read of the step's losses (a device backend waits here for the step's last forward).
template <typename T>
void StageWorker<T>::Impl::report_losses(int64_t step, LossSink* sink) {
  const auto it = losses.find(step);
  if (it == losses.end()) return;
  std::vector<double> values(static_cast<size_t>(cfg.microbatches));
  backend->to_host(it->second.values.view(), values.data());
  if (sink)
    for (int64_t k = 0; k < cfg.microbatches; ++k)
      if (it->second.reported[static_cast<size_t>(k)]) sink->on_loss(step, replica, k, values[static_cast<size_t>(k)]);
  losses.erase(it);
}

template <typename T>
void StageWorker<T>::Impl::resolve_times() {
  for (const auto& [from, to] : timed) compute_ms += backend->elapsed_ms(from, to);
  timed.clear();
}

template struct StageWorker<float>::Impl;
template struct StageWorker<double>::Impl;

}  // namespace pd2bw::executor
