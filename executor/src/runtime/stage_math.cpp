// The math of one stage: building its layers and initial weights, forward and backward of one
// microbatch through its layers, and the optimizer update with the version rule.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "pd2bw/error.hpp"
#include "stage_health.hpp"
#include "stage_state.hpp"

namespace pd2bw::executor {

void Microbatch::drop_stash() {
  embedding.reset();
  blocks.clear();
  blocks.shrink_to_fit();
  head.reset();
  blocks_w.clear();
  blocks_w.shrink_to_fit();
  head_w.reset();
}

namespace {

// The compute dtype of a stage whose master weights are T; throws UsageError for a mix the runtime
// does not keep (only bf16 over fp32 masters is narrower than its master).
template <typename T>
DType stage_compute(const PipelineConfig& cfg) {
  const DType c = cfg.compute.value_or(dtype_of<T>());
  if (c == dtype_of<T>() || (c == DType::bf16 && dtype_of<T>() == DType::f32)) return c;
  throw UsageError(fmt::format("compute dtype {} with {} master weights is not supported", to_string(c),
                               to_string(dtype_of<T>())),
                   "use bf16 over float masters, or the same dtype for both");
}

// Writes the initial weights of layers [begin, end) at their offsets. Each tensor draws from its own
// seeded stream, so layers may be written by several threads with the same bits; a large stage (a
// 1.3B model's are billions of draws) uses the machine's cores.
template <typename T>
void init_layers(const ModelConfig& model, int64_t begin, int64_t end, uint64_t seed, const std::vector<int64_t>& offsets,
                 const std::vector<int64_t>& sizes, std::span<T> init) {
  constexpr size_t kSerialBelow = size_t{1} << 24;  // elements
  std::atomic<int64_t> next{begin};
  std::exception_ptr failure;
  std::mutex mutex;
  const auto work = [&] {
    for (int64_t l = next++; l < end; l = next++) {
      const auto pos = static_cast<size_t>(l - begin);
      try {
        init_layer<T>(model, l, seed, init.subspan(static_cast<size_t>(offsets[pos]), static_cast<size_t>(sizes[pos])));
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  const auto layers = static_cast<unsigned>(end - begin);
  const unsigned threads = init.size() < kSerialBelow ? 1u : std::min(std::max(1u, std::thread::hardware_concurrency()), layers);
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

template <typename T>
StageWorker<T>::Impl::Impl(const PipelineConfig& config, int64_t rank_)
    : cfg(config), backend(make_backend(config.backend)), compute(stage_compute<T>(config)), rank(rank_) {
  cfg.validate();
  mixed = compute != dtype_of<T>();
  bool found = false;
  for (int64_t i = 0; i < cfg.depth && !found; ++i)
    for (int64_t r = 0; r < cfg.width; ++r)
      if (rank_of(i, r) == rank) {
        stage = i;
        replica = r;
        found = true;
        break;
      }
  if (!found) throw UsageError(fmt::format("rank {} is not in the plan's rank table", rank));
  begin = cfg.bounds[static_cast<size_t>(stage)];
  end = cfg.bounds[static_cast<size_t>(stage + 1)];
  const int64_t layers = cfg.model.layer_count();
  first = begin == 0;
  last = end == layers;
  recompute = cfg.recompute[static_cast<size_t>(stage)];
  for (int64_t l = begin; l < end; ++l) {
    const ParamLayout own = layer_layout(cfg.model, l);
    offsets.push_back(append_layout(layout, own));
    sizes.push_back(layout_numel(own));
    if (l == 0)
      embedding.emplace(cfg.model, *backend, compute);
    else if (l == layers - 1)
      head.emplace(cfg.model, *backend, compute);
    else
      blocks.emplace_back(cfg.model, l - 1, *backend, compute);
  }
  const int64_t table = cfg.model.vocab * cfg.model.d_model;
  if (cfg.model.tie_embeddings && last && !first)
    tied_copy = push_tensor(layout, std::string(tied_copy_name(cfg.model)), {cfg.model.vocab, cfg.model.d_model});
  numel = layout_numel(layout);
  std::vector<T> init(static_cast<size_t>(numel), T(0));
  init_layers(cfg.model, begin, end, cfg.seed, offsets, sizes, std::span<T>(init));
  if (tied_copy >= 0) {  // the copy starts as the embedding's token table (wte leads layer 0's buffer)
    std::vector<T> embedding_init(static_cast<size_t>(layout_numel(layer_layout(cfg.model, 0))));
    init_layer<T>(cfg.model, 0, cfg.seed, std::span<T>(embedding_init));
    std::copy_n(embedding_init.begin() + EmbeddingLayer::kWteOffset, table, init.begin() + tied_copy);
  }
  const DType t = dtype_of<T>();
  weights[0] = backend->alloc(compute, numel);
  allocated = 1;
  if (mixed) {
    master = backend->alloc(t, numel);
    backend->from_host(init.data(), master.view());
    backend->copy(master.view(), weights[0].view());
  } else {
    backend->from_host(init.data(), weights[0].view());
  }
  for (Buffer* b : {&grads, &m1}) *b = backend->alloc(t, numel);
  if (cfg.optimizer.kind == schemas::Optimizer::adamw) m2 = backend->alloc(t, numel);
  for (Buffer* b : {&grads, &m1, &m2}) backend->fill_zero(b->view());
  const auto tokens = static_cast<size_t>(cfg.microbatch_size * cfg.seq);
  if (first || last || cfg.model.is_bert()) {
    tokens_host.resize(tokens);
    targets_host.resize(tokens);
  }
  if (cfg.model.is_bert()) {
    types_host.resize(tokens);
    lengths_host.resize(static_cast<size_t>(cfg.microbatch_size));
  }
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

template <typename T>
ConstView StageWorker<T>::Impl::head_wte(ConstView p) const {
  if (!cfg.model.tie_embeddings) return {};
  const int64_t table = cfg.model.vocab * cfg.model.d_model;
  return p.slice(tied_copy >= 0 ? tied_copy : offsets[0] + EmbeddingLayer::kWteOffset, table);
}

template <typename T>
View StageWorker<T>::Impl::head_dwte() {
  if (!cfg.model.tie_embeddings) return {};
  const int64_t table = cfg.model.vocab * cfg.model.d_model;
  return grads.view().slice(tied_copy >= 0 ? tied_copy : offsets[0] + EmbeddingLayer::kWteOffset, table);
}

// Both sides compute (embedding's part) + (head's part) in that order, so both copies get the same
// gradient bits and therefore stay equal through every update.
template <typename T>
void StageWorker<T>::Impl::exchange_tied_grad(Comm& comm, int64_t step) {
  const auto n = static_cast<size_t>(cfg.model.vocab * cfg.model.d_model);
  const int64_t at = first ? offsets[0] + EmbeddingLayer::kWteOffset : tied_copy;
  const int64_t peer = rank_of(first ? cfg.depth - 1 : 0, replica);
  const int64_t tag = make_tag(TagKind::tied, step, 0);
  if (!backend->host_visible()) {  // the same sum on the device: a + b and b + a are the same bits
    const View mine = grads.view().slice(at, static_cast<int64_t>(n));
    Buffer theirs = backend->alloc(dtype_of<T>(), static_cast<int64_t>(n));
    send(comm, peer, tag, mine);
    recv(comm, peer, tag, theirs.view());
    backend->add(mine, theirs.view(), mine, static_cast<int64_t>(n));
    return;
  }
  const std::span<T> mine = host_span(grads).subspan(static_cast<size_t>(at), n);
  std::vector<T> theirs(n);
  comm.send(peer, tag, std::span<const T>(mine));
  comm.recv(peer, tag, std::span<T>(theirs));
  for (size_t i = 0; i < n; ++i) mine[i] = first ? mine[i] + theirs[i] : theirs[i] + mine[i];
}

template <typename T>
void StageWorker<T>::Impl::load_batch(Microbatch& mb, const MicrobatchSource& data, int64_t step, int64_t k) {
  const bool bert = cfg.model.is_bert();
  if (!first && !last && !bert) return;
  const auto n = static_cast<int64_t>(tokens_host.size());
  if (first || last) data.fill(step, k, replica, tokens_host.data(), targets_host.data());
  if (first) {
    mb.tokens = backend->alloc(DType::i32, n);
    backend->from_host(tokens_host.data(), mb.tokens.view());
  }
  if (last) {
    mb.targets = backend->alloc(DType::i32, n);
    backend->from_host(targets_host.data(), mb.targets.view());
  }
  if (!bert) return;
  if (!data.fill_segments(step, k, replica, types_host.data(), lengths_host.data())) {
    std::fill(types_host.begin(), types_host.end(), 0);
    std::fill(lengths_host.begin(), lengths_host.end(), static_cast<int32_t>(cfg.seq));
  }
  if (first) {
    mb.types = backend->alloc(DType::i32, n);
    backend->from_host(types_host.data(), mb.types.view());
  }
  mb.lengths = backend->alloc(DType::i32, cfg.microbatch_size);
  backend->from_host(lengths_host.data(), mb.lengths.view());
}

// Position of model layer `l` among the stage's layers is l - begin. Activations move between two arena
// buffers: each layer writes into the spare one, and the one it read becomes the next spare (every layer
// stashes the input it needs). The received input joins that rotation unless the stage recomputes and
// needs it again (keep_input); the buffer holding the stage output becomes the microbatch's output.
template <typename T>
void StageWorker<T>::Impl::forward(Microbatch& mb, int64_t step, ConstView p, bool report_loss, int64_t k,
                                   bool keep_input) {
  const int64_t B = cfg.microbatch_size, S = cfg.seq, act = activation_numel();
  Buffer cur, spare;
  if (!first && !keep_input) cur = std::move(mb.input);
  const auto current = [&]() { return cur.empty() ? mb.input.cview() : cur.cview(); };
  const auto take_spare = [&]() { return spare.empty() ? backend->alloc(compute, act) : std::move(spare); };
  size_t pos = 0;
  if (first) {
    mb.embedding.emplace();
    cur = take_spare();
    embedding->forward(layer_params(p, pos++), mb.tokens.view(), B, S, *mb.embedding, cur.view(), mb.types.view());
  }
  mb.blocks.resize(blocks.size());
  for (size_t j = 0; j < blocks.size(); ++j) {
    Buffer out = take_spare();
    blocks[j].forward(layer_params(p, pos++), current(), B, S, mb.blocks[j], out.view(), mb.lengths.view());
    spare = std::move(cur);
    cur = std::move(out);
  }
  if (last) {
    mb.head.emplace();
    head->forward(layer_params(p, pos), head_wte(p), current(), mb.targets.view(), B, S, *mb.head,
                  loss_slot(step, k, report_loss));
  } else if (!cur.empty()) {
    mb.output = std::move(cur);
  } else {
    mb.output = backend->alloc(compute, act);
    backend->copy(mb.input.view(), mb.output.view());
  }
}

// The same rotation backwards, starting from the received gradient's buffer (backward_layers).
template <typename T>
void StageWorker<T>::Impl::backward(Microbatch& mb, ConstView p) {
  Buffer cur = backward_layers(
      mb,
      [&](size_t pos, View out) {
        head->backward(layer_params(p, pos), head_wte(p), *mb.head, 1.0 / static_cast<double>(cfg.microbatches), out,
                       layer_grads(pos), head_dwte());
      },
      [&](size_t j, size_t pos, ConstView in, View out) {
        blocks[j].backward(layer_params(p, pos), mb.blocks[j], in, out, layer_grads(pos));
      });
  if (first)
    embedding->backward(*mb.embedding, cur.cview(), layer_grads(0));
  else
    mb.grad_in = std::move(cur);
  mb.drop_stash();
}

// W(step + 1) from W(step) and the step's gradient (computed with version_of_step(step)), averaged over
// the replicas and clipped by the global norm over all stages of this replica. With a master copy the
// optimizer updates it in place and the new version's compute buffer receives its cast, once.
// First the non-finite guard (stage_health.cpp): every rank judges the same health vector, so all stop
// or all skip together.
template <typename T>
std::string StageWorker<T>::Impl::update(Comm& comm, int64_t step) {
  const auto& opt = cfg.optimizer;
  double scale = 1.0 / static_cast<double>(cfg.width);
  if (cfg.model.tie_embeddings && cfg.depth > 1 && (first || last)) exchange_tied_grad(comm, step);
  const std::vector<double> health = step_health(comm, step, scale);
  if (const std::string why = nonfinite_verdict(health, cfg.depth); !why.empty()) {
    if (!opt.skip_nonfinite) throw nonfinite_error(step, why, why.find(" and ") == std::string::npos ? "is" : "are");
    skip_update(step);
    resolve_times();
    return why;
  }
  if (opt.clip_norm > 0) scale *= clip_factor(health_gradient_sum(health, cfg.depth), opt.clip_norm);
  Buffer& dst = buffer_of(step + 1);
  if (dst.empty()) {
    dst = backend->alloc(compute, numel);
    ++allocated;
  }
  const View out = mixed ? master.view() : dst.view();
  const ConstView in = mixed ? master.cview() : buffer_of(step).cview();
  const double lr = opt.lr.at(step);
  if (opt.kind == schemas::Optimizer::adamw)
    backend->adamw_step(opt.adamw, layout, lr, step + 1, scale, in, grads.view(), m1.view(), m2.view(), out);
  else
    backend->sgd_step(opt.sgd, layout, lr, scale, in, grads.view(), m1.view(), out);
  if (!std::isfinite(backend->sum_of_squares(mixed ? master.cview() : dst.cview())))
    throw nonfinite_error(step, fmt::format("stage {}'s weights after the update", stage), "are");
  if (!std::isfinite(backend->sum_of_squares(m1.cview())) || (!m2.empty() && !std::isfinite(backend->sum_of_squares(m2.cview()))))
    throw nonfinite_error(step, fmt::format("stage {}'s optimizer state after the update", stage));
  if (mixed) backend->copy(master.view(), dst.view());
  backend->fill_zero(grads.view());
  steps_done = step + 1;
  resolve_times();
  return {};
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

template <typename T>
std::span<T> StageWorker<T>::Impl::host_view(Buffer& b, std::vector<T>& mirror) {
  if (backend->host_visible()) return host_span(b);
  mirror.resize(static_cast<size_t>(b.numel()));
  backend->to_host(b.view(), mirror.data());
  return mirror;
}

template <typename T>
void StageWorker<T>::Impl::send(Comm& comm, int64_t dst, int64_t tag, ConstView data) {
  const auto bytes = static_cast<size_t>(data.bytes());
  if (backend->host_visible()) return comm.send(dst, tag, {data.data, bytes, MemoryKind::host});
  if (comm.accepts(MemoryKind::device))
    return comm.send(dst, tag, {data.data, bytes, MemoryKind::device}, Stream{backend->native_stream()});
  staging.resize(bytes);
  backend->to_host(data, staging.data());
  comm.send(dst, tag, {staging.data(), bytes, MemoryKind::host});
}

template <typename T>
void StageWorker<T>::Impl::recv(Comm& comm, int64_t src, int64_t tag, View data) {
  const auto bytes = static_cast<size_t>(data.bytes());
  if (backend->host_visible()) return comm.recv(src, tag, {data.data, bytes, MemoryKind::host});
  if (comm.accepts(MemoryKind::device))
    return comm.recv(src, tag, {data.data, bytes, MemoryKind::device}, Stream{backend->native_stream()});
  staging.resize(bytes);
  comm.recv(src, tag, {staging.data(), bytes, MemoryKind::host});
  backend->from_host(staging.data(), data);
}

// The replicas' sum of the step's gradients, in place.
template <typename T>
void StageWorker<T>::Impl::allreduce_grads(Comm& comm) {
  if (backend->host_visible()) return comm.allreduce_sum(stage_comm_group, host_span(grads));
  const ScalarType type = dtype_of<T>() == DType::f32 ? ScalarType::f32 : ScalarType::f64;
  const auto bytes = static_cast<size_t>(grads.bytes());
  if (comm.accepts(MemoryKind::device))
    return comm.allreduce_sum(stage_comm_group, type, {grads.data<void>(), bytes, MemoryKind::device},
                              Stream{backend->native_stream()});
  std::vector<T> host(static_cast<size_t>(grads.numel()));
  backend->to_host(grads.view(), host.data());
  comm.allreduce_sum(stage_comm_group, std::span<T>(host));
  backend->from_host(host.data(), grads.view());
}

template struct StageWorker<float>::Impl;
template struct StageWorker<double>::Impl;

}  // namespace pd2bw::executor
