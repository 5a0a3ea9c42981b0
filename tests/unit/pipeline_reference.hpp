// The sequential reference for the pipeline runtime: the same math on one rank, no pipeline. Each step
// computes every replica's gradient over its m microbatches in order (loss scale 1/m), sums the replicas
// in order, and updates W(j+1) = W(j) - update(g(W(v))) with v = max(j - 1, 0) for 2BW and v = j
// otherwise. Clipping sums the squares per stage (model chunk), then over them in order, as the pipeline
// does. With tied embeddings split over chunks, the head's part of the table's gradient is kept apart and
// added to the embedding's part after the replicas are summed, as the two chunks do.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "pd2bw/executor/data.hpp"
#include "pd2bw/executor/layers.hpp"
#include "pd2bw/executor/optimizer.hpp"
#include "pd2bw/executor/pipeline.hpp"

namespace pd2bw::testing {

using executor::PipelineConfig;

// Pseudo-random tokens that depend only on (step, microbatch, replica). With `segments` (a bert model's
// data), also token types (segment B from the middle of each row), key lengths that differ between
// rows (down to seq - 2, so rows are padded), and targets that a masked-LM loss ignores: every position
// past a row's length and one in three of the others.
class HashSource final : public executor::MicrobatchSource {
 public:
  HashSource(int64_t vocab, int64_t b, int64_t seq, bool segments = false)
      : vocab_(vocab), b_(b), seq_(seq), segments_(segments) {}
  void fill(int64_t step, int64_t microbatch, int64_t replica, int32_t* tokens, int32_t* targets) const override {
    uint64_t x = static_cast<uint64_t>(step * 1000003 + microbatch * 7919 + replica * 104729 + 17);
    for (int64_t i = 0; i < b_ * (seq_ + 1); ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const auto t = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab_));
      const int64_t row = i / (seq_ + 1), col = i % (seq_ + 1);
      if (col < seq_) tokens[row * seq_ + col] = t;
      if (col > 0) targets[row * seq_ + col - 1] = t;
    }
    if (!segments_) return;
    for (int64_t row = 0; row < b_; ++row)
      for (int64_t col = 0; col < seq_; ++col)
        if (col >= length(step, microbatch, replica, row) || (col + row + step) % 3 == 0)
          targets[row * seq_ + col] = executor::kIgnoreTarget;
  }
  bool fill_segments(int64_t step, int64_t microbatch, int64_t replica, int32_t* types, int32_t* lengths) const override {
    if (!segments_) return false;
    for (int64_t row = 0; row < b_; ++row) {
      lengths[row] = static_cast<int32_t>(length(step, microbatch, replica, row));
      for (int64_t col = 0; col < seq_; ++col) types[row * seq_ + col] = 2 * col >= seq_ ? 1 : 0;
    }
    return true;
  }

 private:
  int64_t length(int64_t step, int64_t microbatch, int64_t replica, int64_t row) const {
    return std::max<int64_t>(1, seq_ - (step + microbatch + replica + row) % 3);
  }
  int64_t vocab_, b_, seq_;
  bool segments_;
};

template <typename T>
class Reference {
 public:
  explicit Reference(const PipelineConfig& c) : c_(c) {
    for (int64_t l = 0; l < c.model.layer_count(); ++l) {
      offsets_.push_back(executor::append_layout(layout_, executor::layer_layout(c.model, l)));
      if (l == 0) emb_.emplace_back(c.model, c.seed, executor::Buffers::none);
      else if (l == c.model.layer_count() - 1) head_.emplace_back(c.model, c.seed, executor::Buffers::none);
      else blocks_.emplace_back(c.model, l - 1, c.seed, executor::Buffers::none);
    }
    offsets_.push_back(executor::layout_numel(layout_));
    cur_.assign(static_cast<size_t>(offsets_.back()), T(0));
    for (int64_t l = 0; l < c.model.layer_count(); ++l)
      executor::init_layer<T>(c.model, l, c.seed, slice(cur_, l, l + 1));
    prev_ = cur_;
    m1_.assign(cur_.size(), T(0));
    m2_.assign(c.optimizer.kind == schemas::Optimizer::adamw ? cur_.size() : 0, T(0));
  }

  // One optimizer step; returns the losses in (replica, microbatch) order.
  std::vector<double> step(const executor::MicrobatchSource& data) {
    const bool two_bw = c_.schedule == schemas::Schedule::two_bw;
    const std::vector<T>& w = (two_bw && step_ > 0) ? prev_ : cur_;
    std::vector<double> losses;
    std::vector<T> total, head_total;
    const bool apart = c_.model.tie_embeddings && c_.chunks_total() > 1;
    const auto table = static_cast<size_t>(c_.model.vocab * c_.model.d_model);
    for (int64_t r = 0; r < c_.width; ++r) {
      std::vector<T> g(cur_.size(), T(0)), head(apart ? table : 0, T(0));
      for (int64_t k = 0; k < c_.microbatches; ++k)
        losses.push_back(microbatch(data, w, g, apart ? head.data() : g.data() + offsets_[0], r, k));
      if (r == 0) {
        total = std::move(g);
        head_total = std::move(head);
      } else {
        for (size_t i = 0; i < total.size(); ++i) total[i] += g[i];
        for (size_t i = 0; i < head_total.size(); ++i) head_total[i] += head[i];
      }
    }
    for (size_t i = 0; i < head_total.size(); ++i) total[static_cast<size_t>(offsets_[0]) + i] += head_total[i];
    update(total);
    return losses;
  }

  // Weights of version steps_done (current) and steps_done - 1 (previous), for layers [a, b).
  std::vector<T> current(int64_t a, int64_t b) { auto s = slice(cur_, a, b); return {s.begin(), s.end()}; }
  std::vector<T> previous(int64_t a, int64_t b) { auto s = slice(prev_, a, b); return {s.begin(), s.end()}; }

 private:
  std::span<T> slice(std::vector<T>& v, int64_t a, int64_t b) {
    return std::span<T>(v).subspan(static_cast<size_t>(offsets_[static_cast<size_t>(a)]),
                                   static_cast<size_t>(offsets_[static_cast<size_t>(b)] - offsets_[static_cast<size_t>(a)]));
  }
  const T* at(const std::vector<T>& v, size_t layer) const { return v.data() + offsets_[layer]; }

  // dwte: where the head's gradient of a tied table goes (ignored when untied).
  double microbatch(const executor::MicrobatchSource& data, const std::vector<T>& w, std::vector<T>& g, T* dwte_at,
                    int64_t r, int64_t k) {
    const int64_t B = c_.microbatch_size, S = c_.seq, C = c_.model.d_model;
    std::vector<int32_t> tokens(static_cast<size_t>(B * S)), targets(tokens.size()), types(tokens.size(), 0);
    std::vector<int32_t> lengths(static_cast<size_t>(B), static_cast<int32_t>(S));
    data.fill(step_, k, r, tokens.data(), targets.data());
    data.fill_segments(step_, k, r, types.data(), lengths.data());
    const auto n = static_cast<size_t>(B * S * C);
    std::vector<std::vector<T>> x(blocks_.size() + 1, std::vector<T>(n));
    typename executor::HostEmbedding<T>::Stash es;
    std::vector<typename executor::HostBlock<T>::Stash> bs(blocks_.size());
    typename executor::HostHead<T>::Stash hs;
    emb_[0].forward(at(w, 0), tokens.data(), B, S, es, x[0].data(), types.data());
    for (size_t j = 0; j < blocks_.size(); ++j)
      blocks_[j].forward(at(w, j + 1), x[j].data(), B, S, bs[j], x[j + 1].data(), lengths.data());
    const size_t h = blocks_.size() + 1;
    const T* wte = c_.model.tie_embeddings ? at(w, 0) : nullptr;
    T* dwte = c_.model.tie_embeddings ? dwte_at : nullptr;
    const double loss = head_[0].forward(at(w, h), wte, x.back().data(), targets.data(), B, S, hs);
    std::vector<T> ga(n), gb(n);
    head_[0].backward(at(w, h), wte, hs, 1.0 / static_cast<double>(c_.microbatches), ga.data(), g.data() + offsets_[h], dwte);
    for (size_t j = blocks_.size(); j-- > 0;) {
      blocks_[j].backward(at(w, j + 1), bs[j], ga.data(), gb.data(), g.data() + offsets_[j + 1]);
      std::swap(ga, gb);
    }
    emb_[0].backward(es, ga.data(), g.data() + offsets_[0]);
    return loss;
  }

  void update(std::vector<T>& g) {
    const auto& opt = c_.optimizer;
    double scale = 1.0 / static_cast<double>(c_.width);
    if (opt.clip_norm > 0) {
      double ss = 0;
      for (int64_t i = 0; i < c_.chunks_total(); ++i) {
        auto s = slice(g, c_.bounds[static_cast<size_t>(i)], c_.bounds[static_cast<size_t>(i + 1)]);
        const double part = executor::sum_of_squares<T>(s) * scale * scale;
        ss = i == 0 ? part : ss + part;
      }
      scale *= executor::clip_factor(ss, opt.clip_norm);
    }
    std::vector<T> next(cur_.size());
    const double lr = opt.lr.at(step_);
    if (opt.kind == schemas::Optimizer::adamw)
      executor::adamw_step<T>(opt.adamw, layout_, lr, step_ + 1, scale, cur_, g, m1_, m2_, next);
    else
      executor::sgd_step<T>(opt.sgd, layout_, lr, scale, cur_, g, m1_, next);
    prev_ = std::move(cur_);
    cur_ = std::move(next);
    ++step_;
  }

  PipelineConfig c_;
  executor::ParamLayout layout_;
  std::vector<int64_t> offsets_;  // per layer, plus the total
  std::vector<executor::HostEmbedding<T>> emb_;
  std::vector<executor::HostBlock<T>> blocks_;
  std::vector<executor::HostHead<T>> head_;
  std::vector<T> cur_, prev_, m1_, m2_;
  int64_t step_ = 0;
};

// A LossSink that keeps every loss by (step, replica, microbatch).
class RecordedLosses final : public executor::LossSink {
 public:
  void on_loss(int64_t step, int64_t replica, int64_t microbatch, double loss) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    by_key[{step, replica, microbatch}] = loss;
  }
  std::vector<double> of_step(int64_t step) const {  // (replica, microbatch) order, like the reference
    std::vector<double> out;
    for (const auto& [key, loss] : by_key)
      if (std::get<0>(key) == step) out.push_back(loss);
    return out;
  }
  double mean_of_step(int64_t step) const {  // over the replicas and microbatches of a step
    const std::vector<double> l = of_step(step);
    double sum = 0;
    for (double x : l) sum += x;
    return l.empty() ? 0.0 : sum / static_cast<double>(l.size());
  }
  std::map<std::tuple<int64_t, int64_t, int64_t>, double> by_key;

 private:
  std::mutex mutex_;
};

template <typename T>
bool same_bits(std::span<const T> a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Runs `steps` steps pipelined and sequentially; checks losses and every stage's weights bit for bit.
template <typename T>
void check_pipeline_equal(const PipelineConfig& c, int64_t steps) {
  const HashSource data(c.model.vocab, c.microbatch_size, c.seq, c.model.is_bert());
  executor::ThreadsJob<T> job(c);
  RecordedLosses losses;
  job.run(data, 0, steps, &losses);
  Reference<T> ref(c);
  for (int64_t j = 0; j < steps; ++j) CHECK(losses.of_step(j) == ref.step(data));
  for (int64_t r = 0; r < job.ranks(); ++r) {
    auto& wk = job.worker(r);
    const int64_t a = c.bounds[static_cast<size_t>(wk.stage())], b = c.bounds[static_cast<size_t>(wk.stage() + 1)];
    const auto want = ref.current(a, b);
    const auto have = wk.weights(steps);
    CHECK(same_bits<T>(have.first(std::min(have.size(), want.size())), want));
    if (have.size() > want.size()) {  // the head's copy of a tied table equals the embedding's table
      const auto table = static_cast<size_t>(c.model.vocab * c.model.d_model);
      const auto wte = ref.current(0, 1);
      CHECK(have.size() == want.size() + table);
      CHECK(same_bits<T>(have.subspan(want.size()), std::vector<T>(wte.begin(), wte.begin() + static_cast<long>(table))));
    }
    if (c.schedule == schemas::Schedule::two_bw) {
      const auto prev = wk.weights(steps - 1);
      CHECK(same_bits<T>(prev.first(std::min(prev.size(), want.size())), ref.previous(a, b)));
      CHECK(wk.versions_allocated() == 2);
    } else {
      CHECK(wk.versions_allocated() == 1);
    }
  }
}

// The tiny GPT (vocab 11, seq 5, d_model 8, 2 heads, 3 blocks) split evenly over d stages and w
// replicas, b = 2. recompute_pattern: 0 none, 1 every stage, 2 the even stages.
inline executor::PipelineConfig tiny_pipeline(schemas::Schedule s, int64_t d, int64_t m, int64_t w, int recompute_pattern) {
  executor::PipelineConfig c;
  c.model = {11, 5, 8, 2, 3, false};  // vocab, seq_len, d_model, heads, blocks, tied
  c.schedule = s;
  c.depth = d;
  c.width = w;
  c.microbatches = m;
  c.microbatch_size = 2;
  c.seq = 5;
  const int64_t layers = c.model.layer_count();
  for (int64_t i = 0; i <= d; ++i) c.bounds.push_back(i * layers / d);
  for (int64_t i = 0; i < d; ++i) c.recompute.push_back(recompute_pattern == 1 || (recompute_pattern == 2 && i % 2 == 0));
  for (int64_t i = 0; i < d; ++i) {
    c.ranks.emplace_back();
    for (int64_t r = 0; r < w; ++r) c.ranks.back().push_back(i * w + r);
  }
  c.optimizer.lr = {1e-2, 1e-3, 1, 4};
  return c;
}

}  // namespace pd2bw::testing
