// Times one GPT layer kind at one microbatch size on the CPU backend (float): forward, backward and
// recompute, each into a fresh stash as the pipeline runtime does, and measures the stash in the backend's arena.
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>

#include "measure.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/optimizer.hpp"

namespace pd2bw::profiler::detail {
namespace {

using executor::GptConfig;
using executor::GptLayerKind;
using Clock = std::chrono::steady_clock;

// One layer with its inputs, outputs and gradient buffers allocated up front, so that a forward
// allocates nothing but its stash. Each forward (and recompute) starts from an empty stash.
class LayerBench {
 public:
  virtual ~LayerBench() = default;
  virtual void forward() = 0;    // into a fresh stash, kept for backward()
  virtual void recompute() = 0;  // rebuilds the stash from the layer input (a fresh stash)
  virtual void backward() = 0;   // from the stash of the last forward() or recompute()
  virtual void drop_stash() = 0;
  virtual int64_t stash_bytes() const = 0;  // Stash::bytes() of the live stash
};

std::vector<float> random_floats(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
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

class EmbeddingBench final : public LayerBench {
 public:
  EmbeddingBench(const GptConfig& cfg, int64_t b, uint64_t seed, std::mt19937_64& rng)
      : layer_(cfg, seed), b_(b), s_(cfg.seq_len), tokens_(random_tokens(rng, b * s_, cfg.vocab)),
        out_(static_cast<size_t>(b * s_ * cfg.d_model)), grad_out_(random_floats(rng, b * s_ * cfg.d_model)) {}
  void forward() override {
    stash_.emplace();
    layer_.forward(layer_.params().data(), tokens_.data(), b_, s_, *stash_, out_.data());
  }
  void recompute() override { forward(); }  // the embedding keeps only its tokens: recompute = forward
  void backward() override { layer_.backward(*stash_, grad_out_.data(), layer_.grads().data()); }
  void drop_stash() override { stash_.reset(); }
  int64_t stash_bytes() const override { return stash_->bytes(); }

 private:
  executor::GptEmbedding<float> layer_;
  int64_t b_, s_;
  std::vector<int32_t> tokens_;
  std::vector<float> out_, grad_out_;
  std::optional<executor::GptEmbedding<float>::Stash> stash_;
};

class BlockBench final : public LayerBench {
 public:
  BlockBench(const GptConfig& cfg, int64_t b, uint64_t seed, std::mt19937_64& rng)
      : layer_(cfg, 0, seed), b_(b), s_(cfg.seq_len), in_(random_floats(rng, b * s_ * cfg.d_model)),
        out_(in_.size()), grad_out_(random_floats(rng, b * s_ * cfg.d_model)), grad_in_(in_.size()) {}
  void forward() override {
    stash_.emplace();
    layer_.forward(layer_.params().data(), in_.data(), b_, s_, *stash_, out_.data());
  }
  void recompute() override {
    stash_.emplace();
    layer_.recompute(layer_.params().data(), in_.data(), b_, s_, *stash_);
  }
  void backward() override {
    layer_.backward(layer_.params().data(), *stash_, grad_out_.data(), grad_in_.data(), layer_.grads().data());
  }
  void drop_stash() override { stash_.reset(); }
  int64_t stash_bytes() const override { return stash_->bytes(); }

 private:
  executor::GptBlock<float> layer_;
  int64_t b_, s_;
  std::vector<float> in_, out_, grad_out_, grad_in_;
  std::optional<executor::GptBlock<float>::Stash> stash_;
};

// With tied embeddings the head reads the embedding's token table; it gets a (V, C) table of its own
// here, as the head's stage keeps a copy when the two layers sit on different stages.
class HeadBench final : public LayerBench {
 public:
  HeadBench(const GptConfig& cfg, int64_t b, uint64_t seed, std::mt19937_64& rng)
      : layer_(cfg, seed), b_(b), s_(cfg.seq_len), in_(random_floats(rng, b * s_ * cfg.d_model)),
        targets_(random_tokens(rng, b * s_, cfg.vocab)), grad_in_(in_.size()) {
    if (cfg.tie_embeddings) {
      wte_ = random_floats(rng, cfg.vocab * cfg.d_model);
      for (float& w : wte_) w *= 0.02f;  // GPT-2's initial scale, so the logits look like training's
      dwte_.assign(wte_.size(), 0.0f);
    }
  }
  void forward() override {
    stash_.emplace();
    (void)layer_.forward(layer_.params().data(), wte(), in_.data(), targets_.data(), b_, s_, *stash_);
  }
  void recompute() override {
    stash_.emplace();
    (void)layer_.recompute(layer_.params().data(), wte(), in_.data(), targets_.data(), b_, s_, *stash_);
  }
  void backward() override {
    layer_.backward(layer_.params().data(), wte(), *stash_, 1.0, grad_in_.data(), layer_.grads().data(),
                    dwte_.empty() ? nullptr : dwte_.data());
  }
  void drop_stash() override { stash_.reset(); }
  int64_t stash_bytes() const override { return stash_->bytes(); }

 private:
  const float* wte() const { return wte_.empty() ? nullptr : wte_.data(); }
  executor::GptHead<float> layer_;
  int64_t b_, s_;
  std::vector<float> in_;
  std::vector<int32_t> targets_;
  std::vector<float> grad_in_, wte_, dwte_;
  std::optional<executor::GptHead<float>::Stash> stash_;
};

std::unique_ptr<LayerBench> make_bench(const GptConfig& cfg, GptLayerKind kind, int64_t b, uint64_t seed) {
  std::mt19937_64 rng(seed ^ (static_cast<uint64_t>(b) << 32) ^ static_cast<uint64_t>(kind));
  switch (kind) {
    case GptLayerKind::embedding: return std::make_unique<EmbeddingBench>(cfg, b, seed, rng);
    case GptLayerKind::block: return std::make_unique<BlockBench>(cfg, b, seed, rng);
    case GptLayerKind::head: return std::make_unique<HeadBench>(cfg, b, seed, rng);
  }
  throw Error("profiler: unknown layer kind");
}

// At least 1 ns, so that a coarse clock never yields the 0 ms the profile format rejects.
template <typename F>
double time_ms(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::max(1e-6, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
}

// Growth of the backend arena's live bytes across one forward with its stash still alive: inputs and
// outputs live outside the arena and the forward's scratch is back in it when the forward returns, so
// the growth is what the stash holds on the device.
int64_t measured_stash_bytes(LayerBench& bench) {
  bench.drop_stash();
  const int64_t before = executor::default_backend().memory().current_bytes;
  bench.forward();
  return executor::default_backend().memory().current_bytes - before;
}

}  // namespace

LayerMeasurement measure_layer(const GptConfig& config, GptLayerKind kind, int64_t microbatch, int64_t warmup,
                               int64_t iters, uint64_t seed) {
  const std::unique_ptr<LayerBench> bench = make_bench(config, kind, microbatch, seed);
  for (int64_t i = 0; i < warmup; ++i) {
    bench->forward();
    bench->backward();
    bench->drop_stash();
  }
  LayerMeasurement m;
  const int64_t measured = measured_stash_bytes(*bench);
  m.timing.stash_bytes_computed = bench->stash_bytes();
  m.timing.stash_bytes = measured;

  std::vector<double> fwd, bwd, rec;
  for (int64_t i = 0; i < iters; ++i) {
    bench->drop_stash();
    fwd.push_back(time_ms([&] { bench->forward(); }));
    bwd.push_back(time_ms([&] { bench->backward(); }));
    bench->drop_stash();
    rec.push_back(time_ms([&] { bench->recompute(); }));
  }
  bench->drop_stash();
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
  const int64_t activation = tokens * config.d_model * static_cast<int64_t>(sizeof(float));
  m.timing.input_bytes = kind == GptLayerKind::embedding ? tokens * static_cast<int64_t>(sizeof(int32_t)) : activation;
  m.timing.output_bytes = kind == GptLayerKind::head ? static_cast<int64_t>(sizeof(float)) : activation;
  return m;
}

double measure_update_ms(const executor::ParamLayout& layout, int64_t warmup, int64_t iters) {
  const auto n = static_cast<size_t>(executor::layout_numel(layout));
  std::vector<float> params(n, 0.01f), next(n), grads(n, 0.001f), m(n, 0.0f), v(n, 0.0f);
  const executor::AdamWConfig config;
  std::vector<double> samples;
  for (int64_t i = 0; i < warmup + iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    executor::adamw_step<float>(config, layout, 1e-3, i + 1, 1.0, params, grads, m, v, next);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) samples.push_back(ms);
    std::swap(params, next);
  }
  return summarize(samples).median;
}

}  // namespace pd2bw::profiler::detail
