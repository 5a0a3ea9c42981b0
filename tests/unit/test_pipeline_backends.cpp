// The pipeline runtime over the Backend seam: a second backend registered by the test (a wrapper that
// forwards every op to a cpu backend of its own and counts them) trains bit-identically to "cpu", which
// proves the stages and the layers reach the machine only through the Backend interface; bf16 compute
// over fp32 masters trains as well as fp32 on the tiny GPT, keeps exactly two weight versions and one
// master copy per stage, and resumes bit-identically from the state a checkpoint would save.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <tuple>
#include <vector>

#include "pd2bw/error.hpp"
#include "pipeline_reference.hpp"

using namespace pd2bw;
using namespace pd2bw::executor;
using pd2bw::testing::HashSource;
using schemas::Schedule;

namespace {

// What every instance of the fake backend did, summed (instances live inside the stage workers).
struct FakeCounters {
  std::atomic<int64_t> instances{0};
  std::atomic<int64_t> gpt_ops{0};     // layer ops (linear ... accumulate)
  std::atomic<int64_t> updates{0};     // adamw_step and sgd_step
  std::atomic<int64_t> allocs{0};
  std::atomic<int64_t> peak_bytes{0};  // the largest peak any instance's arena reported
};
FakeCounters& fake_counters() {
  static FakeCounters c;
  return c;
}

// A backend of its own name that forwards to an inner cpu backend (with its own arena).
class FakeCpu final : public Backend {
 public:
  FakeCpu() : inner_(make_backend("cpu")) { ++fake_counters().instances; }
  std::string_view name() const override { return "fake-cpu"; }
  bool supports(DType compute) const override { return inner_->supports(compute); }
  Buffer alloc(DType dtype, int64_t numel) override {
    Buffer b = inner_->alloc(dtype, numel);
    ++fake_counters().allocs;
    const int64_t peak = inner_->memory().peak_bytes;
    auto& max = fake_counters().peak_bytes;
    for (int64_t seen = max.load(); peak > seen && !max.compare_exchange_weak(seen, peak);) {
    }
    return b;
  }
  MemoryStats memory() const override { return inner_->memory(); }
  void reset_peak() override { inner_->reset_peak(); }
  TimerMark mark() override { return inner_->mark(); }
  double elapsed_ms(const TimerMark& from, const TimerMark& to) override { return inner_->elapsed_ms(from, to); }
  void fill_zero(View x) override { inner_->fill_zero(x); }
  void copy(ConstView src, View dst) override { inner_->copy(src, dst); }
  void to_host(ConstView src, void* host) override { inner_->to_host(src, host); }
  void from_host(const void* host, View dst) override { inner_->from_host(host, dst); }
  void linear_forward(ConstView x, ConstView w, ConstView b, View y, int64_t n, int64_t in, int64_t out) override {
    op().linear_forward(x, w, b, y, n, in, out);
  }
  void linear_backward(ConstView dy, ConstView x, ConstView w, View dx, View dw, View db, int64_t n, int64_t in,
                       int64_t out) override {
    op().linear_backward(dy, x, w, dx, dw, db, n, in, out);
  }
  void layernorm_forward(ConstView x, ConstView g, ConstView b, View y, View mean, View rstd, int64_t n, int64_t c) override {
    op().layernorm_forward(x, g, b, y, mean, rstd, n, c);
  }
  void layernorm_backward(ConstView dy, ConstView x, ConstView g, ConstView mean, ConstView rstd, View dx, View dg, View db,
                          int64_t n, int64_t c) override {
    op().layernorm_backward(dy, x, g, mean, rstd, dx, dg, db, n, c);
  }
  void gelu_forward(ConstView x, View y, int64_t n, GeluKind kind) override { op().gelu_forward(x, y, n, kind); }
  void gelu_backward(ConstView dy, ConstView x, View dx, int64_t n, GeluKind kind) override {
    op().gelu_backward(dy, x, dx, n, kind);
  }
  void attention_forward(ConstView qkv, View out, View probs, int64_t b, int64_t t, int64_t c, int64_t h,
                         const AttentionMask& mask) override {
    op().attention_forward(qkv, out, probs, b, t, c, h, mask);
  }
  void attention_backward(ConstView dout, ConstView qkv, ConstView out, ConstView probs, View dqkv, int64_t b,
                          int64_t t, int64_t c, int64_t h, const AttentionMask& mask) override {
    op().attention_backward(dout, qkv, out, probs, dqkv, b, t, c, h, mask);
  }
  void embedding_forward(ConstView tokens, ConstView wte, ConstView wpe, View out, int64_t b, int64_t t, int64_t c,
                         int64_t v) override {
    op().embedding_forward(tokens, wte, wpe, out, b, t, c, v);
  }
  void embedding_backward(ConstView tokens, ConstView dout, View dwte, View dwpe, int64_t b, int64_t t, int64_t c) override {
    op().embedding_backward(tokens, dout, dwte, dwpe, b, t, c);
  }
  void type_embedding_forward(ConstView types, ConstView table, View out, int64_t n, int64_t c, int64_t r) override {
    op().type_embedding_forward(types, table, out, n, c, r);
  }
  void type_embedding_backward(ConstView types, ConstView dout, View dtable, int64_t n, int64_t c, int64_t r) override {
    op().type_embedding_backward(types, dout, dtable, n, c, r);
  }
  void cross_entropy_forward(ConstView logits, ConstView targets, View lse, View loss, int64_t n, int64_t v) override {
    op().cross_entropy_forward(logits, targets, lse, loss, n, v);
  }
  void cross_entropy_backward(ConstView logits, ConstView targets, ConstView lse, View dlogits, int64_t n, int64_t v,
                              double loss_scale) override {
    op().cross_entropy_backward(logits, targets, lse, dlogits, n, v, loss_scale);
  }
  void add(ConstView a, ConstView b, View out, int64_t n) override { op().add(a, b, out, n); }
  void accumulate(View acc, ConstView x, int64_t n) override { op().accumulate(acc, x, n); }
  void adamw_step(const AdamWConfig& config, const ParamLayout& layout, double lr, int64_t step, double grad_scale,
                  ConstView params_in, ConstView grads, View m, View v, View params_out) override {
    ++fake_counters().updates;
    inner_->adamw_step(config, layout, lr, step, grad_scale, params_in, grads, m, v, params_out);
  }
  void sgd_step(const SgdConfig& config, const ParamLayout& layout, double lr, double grad_scale, ConstView params_in,
                ConstView grads, View momentum, View params_out) override {
    ++fake_counters().updates;
    inner_->sgd_step(config, layout, lr, grad_scale, params_in, grads, momentum, params_out);
  }
  double sum_of_squares(ConstView values) override { return inner_->sum_of_squares(values); }

 private:
  Backend& op() {
    ++fake_counters().gpt_ops;
    return *inner_;
  }
  std::unique_ptr<Backend> inner_;
};

void register_fake_once() {
  static const bool done = [] {
    register_backend("fake-cpu", [] { return std::make_unique<FakeCpu>(); });
    return true;
  }();
  (void)done;
}

using Losses = pd2bw::testing::RecordedLosses;

// Token sequences with a rule to learn: each next token is (3 t + 1) mod V after a pseudo-random first
// one, so the loss of a model that trains falls well below log V within a few tens of steps.
class PatternSource final : public MicrobatchSource {
 public:
  PatternSource(int64_t vocab, int64_t b, int64_t seq) : vocab_(vocab), b_(b), seq_(seq) {}
  void fill(int64_t step, int64_t microbatch, int64_t replica, int32_t* tokens, int32_t* targets) const override {
    uint64_t x = static_cast<uint64_t>(step * 1000003 + microbatch * 7919 + replica * 104729 + 5);
    for (int64_t row = 0; row < b_; ++row) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      auto t = static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(vocab_));
      for (int64_t col = 0; col < seq_; ++col) {
        tokens[row * seq_ + col] = static_cast<int32_t>(t);
        t = (3 * t + 1) % vocab_;
        targets[row * seq_ + col] = static_cast<int32_t>(t);
      }
    }
  }

 private:
  int64_t vocab_, b_, seq_;
};

// The tiny GPT of test_pipeline.cpp under 2BW, split evenly over d stages, w replicas.
PipelineConfig make_config(int64_t d, int64_t m, int64_t w, bool recompute_even_stages) {
  return pd2bw::testing::tiny_pipeline(Schedule::two_bw, d, m, w, recompute_even_stages ? 2 : 0);
}

template <typename T>
bool same_bits(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Trains `steps` steps of c and returns the job (for its workers) and the losses.
struct Trained {
  std::unique_ptr<ThreadsJob<float>> job;
  Losses losses;
};
std::unique_ptr<Trained> train(const PipelineConfig& c, const MicrobatchSource& data, int64_t steps) {
  auto t = std::make_unique<Trained>();
  t->job = std::make_unique<ThreadsJob<float>>(c);
  t->job->run(data, 0, steps, &t->losses);
  return t;
}

}  // namespace

TEST_CASE("a registered second backend trains bit-identically to cpu, and every op goes through it") {
  register_fake_once();
  for (int64_t w : {1, 2}) {
    CAPTURE(w);
    auto c = make_config(2, 3, w, true);
    const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
    const auto cpu = train(c, data, 3);
    const int64_t instances = fake_counters().instances, ops = fake_counters().gpt_ops,
                  updates = fake_counters().updates;
    c.backend = "fake-cpu";
    const auto fake = train(c, data, 3);
    CHECK(fake_counters().instances.load() - instances == c.ranks_total());
    // Forward and backward of 5 layers for 3 microbatches of 3 steps on each replica: each layer is
    // several ops, so more than 2 * 5 * 3 * 3 * w of them; and one optimizer update per rank and step.
    CHECK(fake_counters().gpt_ops.load() - ops > 2 * 5 * 3 * 3 * w);
    CHECK(fake_counters().updates.load() - updates == 3 * c.ranks_total());
    CHECK(fake_counters().allocs.load() > 0);
    CHECK(fake_counters().peak_bytes.load() > 0);
    CHECK(fake->losses.by_key.size() == static_cast<size_t>(3 * 3 * w));
    CHECK(fake->losses.by_key == cpu->losses.by_key);
    for (int64_t r = 0; r < c.ranks_total(); ++r) {
      auto& a = cpu->job->worker(r);
      auto& b = fake->job->worker(r);
      CHECK(b.memory().peak_bytes > 0);
      CHECK(b.memory().peak_bytes == a.memory().peak_bytes);  // the same buffers, in an arena of its own
      CHECK(same_bits<float>(b.weights(3), a.weights(3)));
      CHECK(same_bits<float>(b.weights(2), a.weights(2)));
      CHECK(same_bits<float>(b.moment1(), a.moment1()));
      CHECK(same_bits<float>(b.moment2(), a.moment2()));
    }
  }
}

TEST_CASE("an unknown backend name in the pipeline config is refused") {
  auto c = make_config(2, 2, 1, false);
  c.backend = "no-such-backend";
  CHECK_THROWS_AS(ThreadsJob<float>{c}, pd2bw::UsageError);
  c.backend = "cpu";
  c.compute = DType::bf16;
  CHECK_THROWS_AS(ThreadsJob<double>{c}, pd2bw::UsageError);  // bf16 keeps fp32 masters only
}

TEST_CASE("bf16 compute trains the tiny GPT as well as fp32, with two versions and one master per stage") {
  auto c = make_config(2, 2, 1, false);
  c.optimizer.lr = {1e-2, 1e-3, 2, 40};
  const PatternSource data(c.model.vocab, c.microbatch_size, c.seq);
  const int64_t steps = 40;
  const auto fp32 = train(c, data, steps);
  c.compute = DType::bf16;
  const auto bf16run = train(c, data, steps);
  const auto tail_mean = [&](const Losses& l) {
    double s = 0;
    for (int64_t j = steps - 5; j < steps; ++j) s += l.mean_of_step(j);
    return s / 5;
  };
  const double f = tail_mean(fp32->losses), h = tail_mean(bf16run->losses);
  INFO("fp32 last-5 mean " << f << ", bf16 " << h << ", bf16 first step " << bf16run->losses.mean_of_step(0));
  CHECK(std::abs(h - f) <= 0.02 * f);
  CHECK(bf16run->losses.mean_of_step(steps - 1) < bf16run->losses.mean_of_step(0));
  CHECK(h < 0.75 * bf16run->losses.mean_of_step(0));  // it learnt the rule, not just noise
  CHECK(bf16run->losses.by_key != fp32->losses.by_key);  // bf16 really ran (rounding changes the losses)
  for (int64_t r = 0; r < c.ranks_total(); ++r) {
    CAPTURE(r);
    auto& a = fp32->job->worker(r);
    auto& b = bf16run->job->worker(r);
    CHECK(a.versions_allocated() == 2);
    CHECK(a.master_buffers() == 0);
    CHECK(a.compute_dtype() == DType::f32);
    CHECK(b.versions_allocated() == 2);
    CHECK(b.master_buffers() == 1);
    CHECK(b.compute_dtype() == DType::bf16);
    // The older version is the bf16 cast of a master: every value of it is a bf16 value.
    const auto older = b.weights(steps - 1);
    bool representable = !older.empty();
    for (float x : older) representable = representable && static_cast<float>(bf16(x)) == x;
    CHECK(representable);
  }
}

TEST_CASE("bf16: resuming from the saved state continues bit-identically") {
  auto c = make_config(2, 3, 2, true);
  c.compute = DType::bf16;
  const PatternSource data(c.model.vocab, c.microbatch_size, c.seq);
  const auto whole = train(c, data, 6);
  ThreadsJob<float> first(c), second(c);
  Losses parts;
  first.run(data, 0, 3, &parts);
  for (int64_t r = 0; r < first.ranks(); ++r) {
    auto& a = first.worker(r);
    REQUIRE(a.steps_done() == 3);
    // Copies: weights(version) of the older version is a view valid until the next call.
    const auto prev = a.weights(2);
    const std::vector<float> previous(prev.begin(), prev.end());
    const auto cur = a.weights(3);
    const std::vector<float> current(cur.begin(), cur.end());
    second.worker(r).restore(3, previous, current, a.moment1(), a.moment2());
    CHECK(second.worker(r).versions_allocated() == 2);
    CHECK(same_bits<float>(second.worker(r).weights(2), std::span<const float>(previous)));
    CHECK(same_bits<float>(second.worker(r).weights(3), std::span<const float>(current)));
  }
  second.run(data, 3, 3, &parts);
  CHECK(parts.by_key.size() == whole->losses.by_key.size());
  CHECK(parts.by_key == whole->losses.by_key);
  for (int64_t r = 0; r < second.ranks(); ++r) {
    auto& a = whole->job->worker(r);
    auto& b = second.worker(r);
    CHECK(b.master_buffers() == 1);
    CHECK(b.versions_allocated() == 2);
    CHECK(same_bits<float>(b.weights(6), a.weights(6)));
    CHECK(same_bits<float>(b.weights(5), a.weights(5)));
    CHECK(same_bits<float>(b.moment1(), a.moment1()));
  }
}
