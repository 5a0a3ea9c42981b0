// The math of one stage: building its layers and initial weights, forward and backward of one
// microbatch through its layers, and the optimizer update with the version rule.
#include <fmt/format.h>

#include <algorithm>

#include "pd2bw/error.hpp"
#include "stage_state.hpp"

namespace pd2bw::executor {

template <typename T>
int64_t Microbatch<T>::bytes() const {
  int64_t n = static_cast<int64_t>((tokens.size() + targets.size()) * sizeof(int32_t));
  n += static_cast<int64_t>((input.size() + output.size() + grad_out.size() + grad_in.size()) * sizeof(T));
  if (embedding) n += embedding->bytes();
  for (const auto& b : blocks) n += b.bytes();
  if (head) n += head->bytes();
  return n;
}

template <typename T>
void Microbatch<T>::drop_stash() {
  embedding.reset();
  blocks.clear();
  blocks.shrink_to_fit();
  head.reset();
}

template <typename T>
StageWorker<T>::Impl::Impl(const PipelineConfig& config, int64_t rank_) : cfg(config), rank(rank_) {
  cfg.validate();
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
    offsets.push_back(append_layout(layout, gpt_layer_layout(cfg.model, l)));
    if (l == 0)
      embedding.emplace(cfg.model, cfg.seed, Buffers::none);
    else if (l == layers - 1)
      head.emplace(cfg.model, cfg.seed, Buffers::none);
    else
      blocks.emplace_back(cfg.model, l - 1, cfg.seed, Buffers::none);
  }
  const int64_t table = cfg.model.vocab * cfg.model.d_model;
  if (cfg.model.tie_embeddings && last && !first)
    tied_copy = push_tensor(layout, "lm_head.weight", {cfg.model.vocab, cfg.model.d_model});
  numel = layout_numel(layout);
  weights[0].assign(static_cast<size_t>(numel), T(0));
  allocated = 1;
  for (int64_t l = begin; l < end; ++l) {
    const auto at = static_cast<size_t>(offsets[static_cast<size_t>(l - begin)]);
    const auto n = static_cast<size_t>(layout_numel(gpt_layer_layout(cfg.model, l)));
    init_gpt_layer<T>(cfg.model, l, cfg.seed, std::span<T>(weights[0]).subspan(at, n));
  }
  if (tied_copy >= 0) {  // the copy starts as the embedding's token table (wte leads layer 0's buffer)
    std::vector<T> embedding_init(static_cast<size_t>(layout_numel(gpt_layer_layout(cfg.model, 0))));
    init_gpt_layer<T>(cfg.model, 0, cfg.seed, std::span<T>(embedding_init));
    std::copy_n(embedding_init.begin() + GptEmbedding<T>::kWteOffset, table, weights[0].begin() + tied_copy);
  }
  grads.assign(static_cast<size_t>(numel), T(0));
  m1.assign(static_cast<size_t>(numel), T(0));
  if (cfg.optimizer.kind == schemas::Optimizer::adamw) m2.assign(static_cast<size_t>(numel), T(0));
  account();
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
void StageWorker<T>::Impl::account() {
  int64_t n = 0;
  for (const auto& w : weights) n += static_cast<int64_t>(w.size());
  n += static_cast<int64_t>(grads.size() + m1.size() + m2.size());
  bytes = n * static_cast<int64_t>(sizeof(T));
  for (const auto& [key, mb] : live) bytes += mb.bytes();
  peak = std::max(peak, bytes);
}

template <typename T>
const T* StageWorker<T>::Impl::head_wte(const T* p) const {
  if (!cfg.model.tie_embeddings) return nullptr;
  return tied_copy >= 0 ? p + tied_copy : p + offsets[0] + GptEmbedding<T>::kWteOffset;
}

template <typename T>
T* StageWorker<T>::Impl::head_dwte() {
  if (!cfg.model.tie_embeddings) return nullptr;
  return grads.data() + (tied_copy >= 0 ? tied_copy : offsets[0] + GptEmbedding<T>::kWteOffset);
}

// Both sides compute (embedding's part) + (head's part) in that order, so both copies get the same
// gradient bits and therefore stay equal through every update.
template <typename T>
void StageWorker<T>::Impl::exchange_tied_grad(Comm& comm, int64_t step) {
  const auto n = static_cast<size_t>(cfg.model.vocab * cfg.model.d_model);
  const int64_t at = first ? offsets[0] + GptEmbedding<T>::kWteOffset : tied_copy;
  const std::span<T> mine = std::span<T>(grads).subspan(static_cast<size_t>(at), n);
  std::vector<T> theirs(n);
  const int64_t peer = rank_of(first ? cfg.depth - 1 : 0, replica);
  const int64_t tag = make_tag(TagKind::tied, step, 0);
  comm.send(peer, tag, std::span<const T>(mine));
  comm.recv(peer, tag, std::span<T>(theirs));
  for (size_t i = 0; i < n; ++i) mine[i] = first ? mine[i] + theirs[i] : theirs[i] + mine[i];
}

// Position of model layer `l` among the stage's layers is l - begin.
template <typename T>
void StageWorker<T>::Impl::forward(Microbatch<T>& mb, int64_t step, const T* p, LossSink* sink, int64_t k) {
  const int64_t B = cfg.microbatch_size, S = cfg.seq;
  const auto act = static_cast<size_t>(activation_numel());
  std::vector<T> a(act), b(act);
  const T* in = mb.input.data();
  size_t pos = 0;
  if (first) {
    mb.embedding.emplace();
    embedding->forward(p + offsets[pos++], mb.tokens.data(), B, S, *mb.embedding, a.data());
    in = a.data();
  }
  mb.blocks.resize(blocks.size());
  for (size_t j = 0; j < blocks.size(); ++j) {
    T* out = in == a.data() ? b.data() : a.data();
    blocks[j].forward(p + offsets[pos++], in, B, S, mb.blocks[j], out);
    in = out;
  }
  if (last) {
    const T* wte = head_wte(p);
    mb.head.emplace();
    const double loss = head->forward(p + offsets[pos], wte, in, mb.targets.data(), B, S, *mb.head);
    if (sink) sink->on_loss(step, replica, k, loss);
  } else {
    mb.output.assign(in, in + act);
  }
}

template <typename T>
void StageWorker<T>::Impl::backward(Microbatch<T>& mb, const T* p) {
  const auto act = static_cast<size_t>(activation_numel());
  std::vector<T> a(act), b(act);
  T* gr = grads.data();
  size_t pos = offsets.size();
  const T* g = mb.grad_out.data();
  if (last) {
    --pos;
    const T* wte = head_wte(p);
    T* dwte = head_dwte();
    head->backward(p + offsets[pos], wte, *mb.head, 1.0 / static_cast<double>(cfg.microbatches), a.data(),
                   gr + offsets[pos], dwte);
    g = a.data();
  }
  for (size_t j = blocks.size(); j-- > 0;) {
    --pos;
    T* out = g == a.data() ? b.data() : a.data();
    blocks[j].backward(p + offsets[pos], mb.blocks[j], g, out, gr + offsets[pos]);
    g = out;
  }
  if (first)
    embedding->backward(*mb.embedding, g, gr + offsets[0]);
  else
    mb.grad_in.assign(g, g + act);
  mb.drop_stash();
}

// W(step + 1) from W(step) and the step's gradient (computed with version_of_step(step)), averaged over
// the replicas and clipped by the global norm over all stages of this replica.
template <typename T>
void StageWorker<T>::Impl::update(Comm& comm, int64_t step) {
  const auto& opt = cfg.optimizer;
  double scale = 1.0 / static_cast<double>(cfg.width);
  if (cfg.model.tie_embeddings && cfg.depth > 1 && (first || last)) exchange_tied_grad(comm, step);
  if (opt.clip_norm > 0) {
    // The head's copy of a tied table is counted once, on the embedding's stage (the copy is last).
    const size_t counted = tied_copy >= 0 ? static_cast<size_t>(tied_copy) : grads.size();
    std::vector<double> ss{sum_of_squares<T>(std::span<const T>(grads).first(counted)) * scale * scale};
    comm.allreduce_sum(replica_comm_group, std::span<double>(ss));
    scale *= clip_factor(ss[0], opt.clip_norm);
  }
  std::vector<T>& src = buffer_of(step);
  std::vector<T>& dst = buffer_of(step + 1);
  if (dst.empty()) {
    dst.assign(static_cast<size_t>(numel), T(0));
    ++allocated;
  }
  const double lr = opt.lr.at(step);
  if (opt.kind == schemas::Optimizer::adamw)
    adamw_step<T>(opt.adamw, layout, lr, step + 1, scale, src, grads, m1, m2, dst);
  else
    sgd_step<T>(opt.sgd, layout, lr, scale, src, grads, m1, dst);
  std::fill(grads.begin(), grads.end(), T(0));
  steps_done = step + 1;
}

template struct Microbatch<float>;
template struct Microbatch<double>;
template struct StageWorker<float>::Impl;
template struct StageWorker<double>::Impl;

}  // namespace pd2bw::executor
