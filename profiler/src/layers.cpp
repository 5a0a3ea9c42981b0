// Times one GPT layer kind at one microbatch size on a backend (cpu or cuda) in its compute dtype:
// forward, backward and recompute, each into a fresh stash as the pipeline runtime does, the backward's
// two halves (B, the input gradient, and W, the weight gradients) run apart as zb-h1 runs them, and measures
// the stash and the parameters as growth of the backend arena's live bytes. Every buffer a layer
// reads or writes lives in that arena; inputs and outputs are allocated before anything is measured.
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>

#include "measure.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/optimizer.hpp"

namespace pd2bw::profiler::detail {
namespace {

using executor::Buffer;
using executor::ConstView;
using executor::DType;
using executor::ModelConfig;
using executor::LayerKind;
using executor::View;
using Clock = std::chrono::steady_clock;

std::vector<float> random_floats(std::mt19937_64& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& t : v) t = dist(rng);
  return v;
}

// A buffer of `t` in the target's arena holding `values` (rounded to t through an fp32 staging buffer).
Buffer upload(const Target& target, DType t, const std::vector<float>& values) {
  auto& be = target.backend;
  const auto n = static_cast<int64_t>(values.size());
  Buffer staged = be.alloc(DType::f32, n);
  be.from_host(values.data(), staged.view());
  if (t == DType::f32) return staged;
  Buffer out = be.alloc(t, n);
  be.copy(staged.view(), out.view());
  return out;
}

Buffer zeros(const Target& target, DType t, int64_t n) {
  Buffer b = target.backend.alloc(t, n);
  target.backend.fill_zero(b.view());
  return b;
}

// One layer with its weights, inputs, outputs and gradient buffers allocated up front, so that a
// forward allocates nothing but its stash (and its scratch, back in the arena when it returns).
class LayerBench {
 public:
  virtual ~LayerBench() = default;
  virtual void forward() = 0;    // into a fresh stash, kept for backward()
  virtual void recompute() = 0;  // rebuilds the stash from the layer input (a fresh stash)
  virtual void backward() = 0;   // from the stash of the last forward() or recompute()
  // The same backward in its halves: B, then W (which spends the stash). A layer without an input
  // gradient (the embedding) has an empty B and `has_input_grad` false.
  virtual void backward_input() = 0;
  virtual void backward_weight() = 0;
  virtual bool has_input_grad() const { return true; }
  virtual void drop_stash() = 0;
  virtual int64_t stash_bytes() const = 0;  // Stash::bytes() of the live stash
  int64_t param_bytes = 0;                  // growth of the arena when the weights were allocated
};

// Allocates the layer's weights (init_layer) in the compute dtype and records their bytes.
Buffer layer_weights(const Target& target, const ModelConfig& cfg, int64_t layer, uint64_t seed, int64_t* bytes) {
  std::vector<float> init(static_cast<size_t>(executor::layout_numel(executor::layer_layout(cfg, layer))));
  executor::init_layer<float>(cfg, layer, seed, std::span<float>(init));
  const int64_t before = target.backend.memory().current_bytes;
  Buffer w = target.backend.alloc(target.compute, static_cast<int64_t>(init.size()));
  *bytes = target.backend.memory().current_bytes - before;
  Buffer values = upload(target, target.compute, init);
  target.backend.copy(values.view(), w.view());
  return w;
}

class EmbeddingBench final : public LayerBench {
 public:
  EmbeddingBench(const Target& t, const ModelConfig& cfg, int64_t b, uint64_t seed, std::mt19937_64& rng)
      : layer_(cfg, t.backend, t.compute), b_(b), s_(cfg.seq_len), params_(layer_weights(t, cfg, 0, seed, &param_bytes)),
        grads_(zeros(t, executor::accumulate_dtype(t.compute), params_.numel())), tokens_(t.backend.alloc(DType::i32, b * s_)),
        out_(t.backend.alloc(t.compute, b * s_ * cfg.d_model)),
        grad_out_(upload(t, t.compute, random_floats(rng, b * s_ * cfg.d_model))) {
    const auto ids = random_tokens(rng, b * s_, cfg.vocab);
    t.backend.from_host(ids.data(), tokens_.view());
    if (cfg.is_bert()) {  // segments A and B, half and half
      std::vector<int32_t> types(static_cast<size_t>(b * s_));
      for (size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int64_t>(i % static_cast<size_t>(s_)) * 2 >= s_ ? 1 : 0;
      types_ = t.backend.alloc(DType::i32, b * s_);
      t.backend.from_host(types.data(), types_.view());
    }
  }
  void forward() override {
    stash_.emplace();
    layer_.forward(params_.view(), tokens_.view(), b_, s_, *stash_, out_.view(), types_.view());
  }
  void recompute() override { forward(); }  // the embedding keeps only its inputs: recompute = forward
  void backward() override { layer_.backward(*stash_, grad_out_.view(), grads_.view()); }
  void backward_input() override {}
  void backward_weight() override { backward(); }
  bool has_input_grad() const override { return false; }
  void drop_stash() override { stash_.reset(); }
  int64_t stash_bytes() const override { return stash_->bytes(); }

 private:
  executor::EmbeddingLayer layer_;
  int64_t b_, s_;
  Buffer params_, grads_, tokens_, out_, grad_out_, types_;
  std::optional<executor::EmbeddingStash> stash_;
};

class BlockBench final : public LayerBench {
 public:
  BlockBench(const Target& t, const ModelConfig& cfg, int64_t b, uint64_t seed, std::mt19937_64& rng)
      : layer_(cfg, 0, t.backend, t.compute), b_(b), s_(cfg.seq_len), params_(layer_weights(t, cfg, 1, seed, &param_bytes)),
        grads_(zeros(t, executor::accumulate_dtype(t.compute), params_.numel())),
        in_(upload(t, t.compute, random_floats(rng, b * s_ * cfg.d_model))), out_(t.backend.alloc(t.compute, in_.numel())),
        grad_out_(upload(t, t.compute, random_floats(rng, b * s_ * cfg.d_model))),
        grad_in_(t.backend.alloc(t.compute, in_.numel())) {}
  void forward() override {
    stash_.emplace();
    layer_.forward(params_.view(), in_.view(), b_, s_, *stash_, out_.view());
  }
  void recompute() override {
    stash_.emplace();
    layer_.recompute(params_.view(), in_.view(), b_, s_, *stash_);
  }
  void backward() override { layer_.backward(params_.view(), *stash_, grad_out_.view(), grad_in_.view(), grads_.view()); }
  void backward_input() override {
    layer_.backward_input(params_.view(), *stash_, grad_out_.view(), grad_in_.view(), w_);
  }
  void backward_weight() override { layer_.backward_weight(params_.view(), *stash_, w_, grads_.view()); }
  void drop_stash() override {
    stash_.reset();
    w_ = executor::BlockWeightStash{};
  }
  int64_t stash_bytes() const override { return stash_->bytes(); }

 private:
  executor::BlockLayer layer_;
  int64_t b_, s_;
  Buffer params_, grads_, in_, out_, grad_out_, grad_in_;
  std::optional<executor::BlockStash> stash_;
  executor::BlockWeightStash w_;
};

// With tied embeddings the head reads the embedding's token table; it gets a (V, C) table of its own
// here, as the head's stage keeps a copy when the two layers sit on different stages.
class HeadBench final : public LayerBench {
 public:
  HeadBench(const Target& t, const ModelConfig& cfg, int64_t b, uint64_t seed, std::mt19937_64& rng)
      : layer_(cfg, t.backend, t.compute), tied_(cfg.tie_embeddings), b_(b), s_(cfg.seq_len),
        params_(layer_weights(t, cfg, cfg.blocks + 1, seed, &param_bytes)),
        grads_(zeros(t, executor::accumulate_dtype(t.compute), params_.numel())),
        in_(upload(t, t.compute, random_floats(rng, b * s_ * cfg.d_model))), targets_(t.backend.alloc(DType::i32, b * s_)),
        grad_in_(t.backend.alloc(t.compute, in_.numel())) {
    const auto ids = random_tokens(rng, b * s_, cfg.vocab);
    t.backend.from_host(ids.data(), targets_.view());
    loss_ = t.backend.alloc(DType::f64, 1);
    if (!tied_) return;
    const int64_t before = t.backend.memory().current_bytes;
    wte_ = upload(t, t.compute, random_floats(rng, cfg.vocab * cfg.d_model, 0.02f));  // GPT-2's initial scale
    param_bytes += t.backend.memory().current_bytes - before;                        // the head's copy
    dwte_ = zeros(t, executor::accumulate_dtype(t.compute), cfg.vocab * cfg.d_model);
  }
  void forward() override {
    stash_.emplace();
    layer_.forward(params_.view(), wte(), in_.view(), targets_.view(), b_, s_, *stash_, loss_.view());
  }
  void recompute() override { forward(); }  // the head keeps nothing but what its forward computes
  void backward() override {
    layer_.backward(params_.view(), wte(), *stash_, 1.0, grad_in_.view(), grads_.view(), tied_ ? dwte_.view() : View{});
  }
  void backward_input() override { layer_.backward_input(params_.view(), wte(), *stash_, 1.0, grad_in_.view(), w_); }
  void backward_weight() override {
    layer_.backward_weight(params_.view(), *stash_, w_, grads_.view(), tied_ ? dwte_.view() : View{});
  }
  void drop_stash() override {
    stash_.reset();
    w_ = executor::HeadWeightStash{};
  }
  int64_t stash_bytes() const override { return stash_->bytes(); }

 private:
  ConstView wte() const { return tied_ ? wte_.view() : ConstView{}; }
  executor::HeadLayer layer_;
  bool tied_;
  int64_t b_, s_;
  Buffer params_, grads_, in_, targets_, grad_in_, loss_, wte_, dwte_;
  std::optional<executor::HeadStash> stash_;
  executor::HeadWeightStash w_;
};

std::unique_ptr<LayerBench> make_bench(const Target& t, const ModelConfig& cfg, LayerKind kind, int64_t b,
                                       uint64_t seed) {
  std::mt19937_64 rng(seed ^ (static_cast<uint64_t>(b) << 32) ^ static_cast<uint64_t>(kind));
  switch (kind) {
    case LayerKind::embedding: return std::make_unique<EmbeddingBench>(t, cfg, b, seed, rng);
    case LayerKind::block: return std::make_unique<BlockBench>(t, cfg, b, seed, rng);
    case LayerKind::head: return std::make_unique<HeadBench>(t, cfg, b, seed, rng);
  }
  throw Error("profiler: unknown layer kind");
}

// Growth of the arena's live bytes across one forward with its stash still alive: everything else the
// layer touches was allocated before, and the forward's scratch is back in the arena when it returns.
int64_t measured_stash_bytes(const Target& t, LayerBench& bench) {
  bench.drop_stash();
  const int64_t before = t.backend.memory().current_bytes;
  bench.forward();
  return t.backend.memory().current_bytes - before;
}

// Growth of the arena's live bytes from before a forward to the end of its B: what the layer keeps
// until its W (the stash W still reads and the output gradients B left for it).
int64_t measured_weight_stash_bytes(const Target& t, LayerBench& bench) {
  bench.drop_stash();
  const int64_t before = t.backend.memory().current_bytes;
  bench.forward();
  bench.backward_input();
  const int64_t kept = t.backend.memory().current_bytes - before;
  bench.drop_stash();
  return kept;
}

// The backward's halves, `iters` times each from a fresh forward: bwd_input_ms (0 without an input
// gradient), bwd_weight_ms and the bytes kept between them.
void measure_split(const Target& t, LayerBench& bench, int64_t iters, schemas::LayerTiming& timing) {
  timing.bwd_weight_stash_bytes = measured_weight_stash_bytes(t, bench);
  std::vector<double> b, w;
  for (int64_t i = 0; i < iters; ++i) {
    bench.drop_stash();
    bench.forward();
    b.push_back(time_ms(t, [&] { bench.backward_input(); }));
    w.push_back(time_ms(t, [&] { bench.backward_weight(); }));
  }
  bench.drop_stash();
  timing.split = true;
  timing.bwd_input_ms = bench.has_input_grad() ? summarize(b).median : 0.0;
  timing.bwd_weight_ms = summarize(w).median;
}

}  // namespace

double time_ms(const Target& target, const std::function<void()>& f) {
  if (target.backend.host_visible()) {
    const auto t0 = Clock::now();
    f();
    return std::max(1e-6, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const executor::TimerMark t0 = target.backend.mark();
  f();
  return std::max(1e-6, target.backend.elapsed_ms(t0, target.backend.mark()));
}

LayerMeasurement measure_layer(const Target& target, const ModelConfig& config, LayerKind kind, int64_t microbatch,
                               int64_t warmup, int64_t iters, uint64_t seed) {
  const std::unique_ptr<LayerBench> bench = make_bench(target, config, kind, microbatch, seed);
  for (int64_t i = 0; i < warmup; ++i) {
    bench->forward();
    bench->backward();
    bench->drop_stash();
  }
  LayerMeasurement m;
  m.param_bytes = bench->param_bytes;
  const int64_t measured = measured_stash_bytes(target, *bench);
  m.timing.stash_bytes_computed = bench->stash_bytes();
  m.timing.stash_bytes = measured;

  std::vector<double> fwd, bwd, rec;
  for (int64_t i = 0; i < iters; ++i) {
    bench->drop_stash();
    fwd.push_back(time_ms(target, [&] { bench->forward(); }));
    bwd.push_back(time_ms(target, [&] { bench->backward(); }));
    bench->drop_stash();
    rec.push_back(time_ms(target, [&] { bench->recompute(); }));
  }
  bench->drop_stash();
  measure_split(target, *bench, iters, m.timing);
  const Spread f = summarize(fwd), g = summarize(bwd), r = summarize(rec);
  m.timing.microbatch = microbatch;
  m.timing.fwd_ms = f.median;
  m.timing.fwd_ms_min = f.min;
  m.timing.fwd_ms_p90 = f.p90;
  m.timing.bwd_ms = g.median;
  m.timing.bwd_ms_min = g.min;
  m.timing.bwd_ms_p90 = g.p90;
  m.timing.recompute_ms = r.median;
  const int64_t tokens = microbatch * config.seq_len;
  const int64_t activation = tokens * config.d_model * executor::dtype_bytes(target.compute);
  m.timing.input_bytes = kind == LayerKind::embedding ? tokens * static_cast<int64_t>(sizeof(int32_t)) : activation;
  m.timing.output_bytes = kind == LayerKind::head ? static_cast<int64_t>(sizeof(float)) : activation;
  return m;
}

// The runtime's update (stage_math.cpp): AdamW out of place over the weights; with bf16 compute in place
// on the fp32 master followed by its cast into the new version's buffer; then the gradients zeroed.
double measure_update_ms(const Target& target, const executor::ParamLayout& layout, int64_t warmup, int64_t iters) {
  auto& be = target.backend;
  const int64_t n = executor::layout_numel(layout);
  const bool mixed = target.compute != DType::f32;
  Buffer params = upload(target, DType::f32, std::vector<float>(static_cast<size_t>(n), 0.01f));
  Buffer next = be.alloc(DType::f32, n), grads = upload(target, DType::f32, std::vector<float>(static_cast<size_t>(n), 0.001f));
  Buffer m1 = zeros(target, DType::f32, n), m2 = zeros(target, DType::f32, n);
  Buffer version = mixed ? be.alloc(target.compute, n) : Buffer{};
  const executor::AdamWConfig config;
  std::vector<double> samples;
  for (int64_t i = 0; i < warmup + iters; ++i) {
    const double ms = time_ms(target, [&] {
      be.adamw_step(config, layout, 1e-3, i + 1, 1.0, params.view(), grads.view(), m1.view(), m2.view(),
                    mixed ? params.view() : next.view());
      if (mixed) be.copy(params.view(), version.view());
      be.fill_zero(grads.view());
    });
    if (i >= warmup) samples.push_back(ms);
    if (!mixed) std::swap(params, next);
  }
  return summarize(samples).median;
}

}  // namespace pd2bw::profiler::detail
