// The math of one model chunk: building its layers and initial weights, forward and backward of one
// microbatch through its layers, and its share of the optimizer update with the version rule.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "chunk_state.hpp"
#include "pd2bw/error.hpp"
#include "stage_health.hpp"

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

// Writes the initial weights of layers [begin, end) at their offsets. Each tensor draws from its own
// seeded stream, so layers may be written by several threads with the same bits; a large chunk (a
// 1.3B model's are billions of draws) uses the machine's cores.
template <typename T>
void init_layers(const ModelConfig& model, int64_t begin, int64_t end, uint64_t seed,
                 const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes, std::span<T> init) {
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
  const unsigned threads =
      init.size() < kSerialBelow ? 1u : std::min(std::max(1u, std::thread::hardware_concurrency()), layers);
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

template <typename T>
ChunkState<T>::ChunkState(const PipelineConfig& config, Backend& be, DType compute_, int64_t chunk_)
    : cfg(&config), backend(&be), compute(compute_), mixed(compute_ != dtype_of<T>()), chunk(chunk_) {
  const ModelConfig& model = config.model;
  begin = config.bounds[static_cast<size_t>(chunk)];
  end = config.bounds[static_cast<size_t>(chunk + 1)];
  const int64_t layers = model.layer_count();
  first = begin == 0;
  last = end == layers;
  for (int64_t l = begin; l < end; ++l) {
    const ParamLayout own = layer_layout(model, l);
    offsets.push_back(append_layout(layout, own));
    sizes.push_back(layout_numel(own));
    if (l == 0)
      embedding.emplace(model, be, compute);
    else if (l == layers - 1)
      head.emplace(model, be, compute);
    else
      blocks.emplace_back(model, l - 1, be, compute);
  }
  const int64_t table = model.vocab * model.d_model;
  if (model.tie_embeddings && last && !first)
    tied_copy = push_tensor(layout, std::string(tied_copy_name(model)), {model.vocab, model.d_model});
  numel = layout_numel(layout);
  std::vector<T> init(static_cast<size_t>(numel), T(0));
  init_layers(model, begin, end, config.seed, offsets, sizes, std::span<T>(init));
  if (tied_copy >= 0) {  // the copy starts as the embedding's token table (wte leads layer 0's buffer)
    std::vector<T> embedding_init(static_cast<size_t>(layout_numel(layer_layout(model, 0))));
    init_layer<T>(model, 0, config.seed, std::span<T>(embedding_init));
    std::copy_n(embedding_init.begin() + EmbeddingLayer::kWteOffset, table, init.begin() + tied_copy);
  }
  const DType t = dtype_of<T>();
  weights[0] = be.alloc(compute, numel);
  allocated = 1;
  if (mixed) {
    master = be.alloc(t, numel);
    be.from_host(init.data(), master.view());
    be.copy(master.view(), weights[0].view());
  } else {
    be.from_host(init.data(), weights[0].view());
  }
  for (Buffer* b : {&grads, &m1}) *b = be.alloc(t, numel);
  if (config.optimizer.kind == schemas::Optimizer::adamw) m2 = be.alloc(t, numel);
  for (Buffer* b : {&grads, &m1, &m2}) be.fill_zero(b->view());
  const auto tokens = static_cast<size_t>(config.microbatch_size * config.seq);
  if (first || last || model.is_bert()) {
    tokens_host.resize(tokens);
    targets_host.resize(tokens);
  }
  if (model.is_bert()) {
    types_host.resize(tokens);
    lengths_host.resize(static_cast<size_t>(config.microbatch_size));
  }
}

template <typename T>
std::span<T> ChunkState<T>::host_view(Buffer& b, std::vector<T>& mirror) {
  if (backend->host_visible()) return host_span(b);
  mirror.resize(static_cast<size_t>(b.numel()));
  backend->to_host(b.view(), mirror.data());
  return mirror;
}

template <typename T>
int64_t ChunkState<T>::table_offset() const {
  if (!cfg->model.tie_embeddings) return -1;
  if (tied_copy >= 0) return tied_copy;
  return first ? offsets[0] + EmbeddingLayer::kWteOffset : -1;
}

template <typename T>
ConstView ChunkState<T>::head_wte(ConstView p) const {
  if (!cfg->model.tie_embeddings) return {};
  return p.slice(table_offset(), cfg->model.vocab * cfg->model.d_model);
}

template <typename T>
View ChunkState<T>::head_dwte() {
  if (!cfg->model.tie_embeddings) return {};
  return grads.view().slice(table_offset(), cfg->model.vocab * cfg->model.d_model);
}

template <typename T>
double ChunkState<T>::grad_sum_of_squares() {
  return backend->sum_of_squares(grads.view().slice(0, tied_copy >= 0 ? tied_copy : numel));
}

template <typename T>
void ChunkState<T>::load_batch(Microbatch& mb, const MicrobatchSource& data, int64_t step, int64_t k, int64_t replica) {
  const bool bert = cfg->model.is_bert();
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
    std::fill(lengths_host.begin(), lengths_host.end(), static_cast<int32_t>(cfg->seq));
  }
  if (first) {
    mb.types = backend->alloc(DType::i32, n);
    backend->from_host(types_host.data(), mb.types.view());
  }
  mb.lengths = backend->alloc(DType::i32, cfg->microbatch_size);
  backend->from_host(lengths_host.data(), mb.lengths.view());
}

// Position of model layer `l` among the chunk's layers is l - begin. Activations move between two arena
// buffers: each layer writes into the spare one, and the one it read becomes the next spare (every layer
// stashes the input it needs). The received input joins that rotation unless the rank recomputes and
// needs it again (keep_input); the buffer holding the chunk's output becomes the microbatch's output.
template <typename T>
void ChunkState<T>::forward(Microbatch& mb, ConstView p, View loss, bool keep_input) {
  const int64_t B = cfg->microbatch_size, S = cfg->seq, act = activation_numel();
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
    head->forward(layer_params(p, pos), head_wte(p), current(), mb.targets.view(), B, S, *mb.head, loss);
  } else if (!cur.empty()) {
    mb.output = std::move(cur);
  } else {
    mb.output = backend->alloc(compute, act);
    backend->copy(mb.input.view(), mb.output.view());
  }
}

// The same rotation backwards, starting from the received gradient's buffer (backward_layers).
template <typename T>
void ChunkState<T>::backward(Microbatch& mb, ConstView p) {
  Buffer cur = backward_layers(
      mb,
      [&](size_t pos, View out) {
        head->backward(layer_params(p, pos), head_wte(p), *mb.head, 1.0 / static_cast<double>(cfg->microbatches), out,
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

template <typename T>
Buffer& ChunkState<T>::version_buffer(int64_t step) {
  Buffer& dst = buffer_of(step + 1);
  if (dst.empty()) {
    dst = backend->alloc(compute, numel);
    ++allocated;
  }
  return dst;
}

template <typename T>
void ChunkState<T>::park_gradient(int64_t step) {
  if (!two_bw() || mixed)
    throw Error(fmt::format("stage {}: only 2bw without a master copy parks its gradient", chunk));
  std::swap(version_buffer(step), grads);
  backend->fill_zero(grads.view());
  parked = step;
}

template <typename T>
void ChunkState<T>::apply_update(int64_t step, double scale) {
  const auto& opt = cfg->optimizer;
  const bool was_parked = parked == step;
  Buffer& dst = version_buffer(step);
  const View g = step_grads(step).view();  // dst itself when parked
  const View out = mixed ? master.view() : dst.view();
  const ConstView in = mixed ? master.cview() : buffer_of(step).cview();
  const double lr = opt.lr.at(step);
  if (opt.kind == schemas::Optimizer::adamw)
    backend->adamw_step(opt.adamw, layout, lr, step + 1, scale, in, g, m1.view(), m2.view(), out);
  else
    backend->sgd_step(opt.sgd, layout, lr, scale, in, g, m1.view(), out);
  if (was_parked) parked = -1;
  if (!std::isfinite(backend->sum_of_squares(mixed ? master.cview() : dst.cview())))
    throw nonfinite_error(step, fmt::format("stage {}'s weights after the update", chunk), "are");
  if (!std::isfinite(backend->sum_of_squares(m1.cview())) ||
      (!m2.empty() && !std::isfinite(backend->sum_of_squares(m2.cview()))))
    throw nonfinite_error(step, fmt::format("stage {}'s optimizer state after the update", chunk));
  if (mixed) backend->copy(master.view(), dst.view());
  if (!was_parked) backend->fill_zero(grads.view());
}

template <typename T>
void ChunkState<T>::skip_update(int64_t step) {
  const bool was_parked = parked == step;
  Buffer& dst = version_buffer(step);
  if (mixed)
    backend->copy(master.view(), dst.view());  // the master still holds W(step)
  else if (&dst != &buffer_of(step))
    backend->copy(buffer_of(step).cview(), dst.view());  // over a parked gradient
  if (was_parked)
    parked = -1;
  else
    backend->fill_zero(grads.view());
}

template struct ChunkState<float>;
template struct ChunkState<double>;

}  // namespace pd2bw::executor
