// The split backward of the GPT layers (zero-bubble schedules): B then W gives the fused backward's
// input gradient and accumulated parameter gradients bit for bit, in double and float, for a block and
// for the head (untied and tied); B alone touches no parameter gradient, W no input gradient, and B
// frees the stash buffers only it reads. The embedding has no input gradient: its whole backward is
// its W (the stage-level tests in test_pipeline_zb.cpp cover it).
#include <doctest/doctest.h>

#include <vector>

#include "executor_test_util.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/layers.hpp"

namespace ex = pd2bw::executor;
using pd2bw::test::random_ids;
using pd2bw::test::random_values;

namespace {

constexpr int64_t kB = 2, kS = 5;

ex::ModelConfig tiny_config(bool tied) {
  return {.vocab = 11, .seq_len = 5, .d_model = 8, .heads = 2, .blocks = 2, .tie_embeddings = tied};
}

template <typename T>
std::vector<T> block_params(const ex::ModelConfig& cfg) {
  return random_values<T>(ex::layout_numel(ex::layer_layout(cfg, 2)), 3, 0.5);
}

template <typename T>
void check_block() {
  const ex::ModelConfig cfg = tiny_config(false);
  ex::Backend& be = ex::default_backend();
  const ex::BlockLayer layer(cfg, 1, be, ex::dtype_of<T>());
  const std::vector<T> params = block_params<T>(cfg);
  const int64_t act = kB * kS * cfg.d_model;
  const std::vector<T> x = random_values<T>(act, 4), dy = random_values<T>(act, 5);
  const std::vector<T> start = random_values<T>(static_cast<int64_t>(params.size()), 6);  // earlier microbatches
  const auto p = ex::view_of(params.data(), static_cast<int64_t>(params.size()));

  std::vector<T> out(x.size()), fused_dx(x.size()), fused_grads = start;
  ex::BlockStash fused;
  layer.forward(p, ex::view_of(x.data(), act), kB, kS, fused, ex::view_of(out.data(), act));
  layer.backward(p, fused, ex::view_of(dy.data(), act), ex::view_of(fused_dx.data(), act),
                 ex::view_of(fused_grads.data(), static_cast<int64_t>(fused_grads.size())));

  std::vector<T> split_dx(x.size()), split_grads = start;
  ex::BlockStash s;
  ex::BlockWeightStash w;
  layer.forward(p, ex::view_of(x.data(), act), kB, kS, s, ex::view_of(out.data(), act));
  const int64_t stash_bytes = s.bytes();
  layer.backward_input(p, s, ex::view_of(dy.data(), act), ex::view_of(split_dx.data(), act), w);
  CHECK(split_dx == fused_dx);
  CHECK(split_grads == start);  // B leaves the parameter gradients alone
  CHECK(s.qkv.empty());
  CHECK(s.attn_stash.empty());
  CHECK(s.fc.empty());
  CHECK(s.bytes() < stash_bytes);
  CHECK(w.bytes() == static_cast<int64_t>(sizeof(T)) * act * (1 + 4 + 1 + 1 + 3 + 1));
  const std::vector<T> dx_after_b = split_dx;
  layer.backward_weight(p, s, w, ex::view_of(split_grads.data(), static_cast<int64_t>(split_grads.size())));
  CHECK(split_grads == fused_grads);
  CHECK(split_grads != start);
  CHECK(split_dx == dx_after_b);  // W writes no input gradient
  CHECK(w.bytes() == 0);          // W spends both stashes
  CHECK(s.bytes() == 0);
}

template <typename T>
void check_head(bool tied) {
  const ex::ModelConfig cfg = tiny_config(tied);
  ex::Backend& be = ex::default_backend();
  const ex::HeadLayer layer(cfg, be, ex::dtype_of<T>());
  const int64_t numel = ex::layout_numel(ex::layer_layout(cfg, cfg.blocks + 1));
  const int64_t act = kB * kS * cfg.d_model, table = cfg.vocab * cfg.d_model;
  const std::vector<T> params = random_values<T>(numel, 7, 0.5), x = random_values<T>(act, 8);
  const std::vector<T> wte = random_values<T>(table, 9, 0.5);
  const std::vector<int32_t> targets = random_ids(kB * kS, 11, 10);
  const std::vector<T> start = random_values<T>(numel, 11), dwte_start = random_values<T>(table, 12);
  const auto p = ex::view_of(params.data(), numel);
  const auto e = tied ? ex::view_of(wte.data(), table) : ex::ConstView{};
  const auto tg = ex::view_of(targets.data(), kB * kS);
  const double scale = 0.25;
  double loss = 0;

  std::vector<T> fused_dx(x.size()), fused_grads = start, fused_dwte = dwte_start;
  ex::HeadStash fused;
  layer.forward(p, e, ex::view_of(x.data(), act), tg, kB, kS, fused, ex::view_of(&loss, 1));
  layer.backward(p, e, fused, scale, ex::view_of(fused_dx.data(), act), ex::view_of(fused_grads.data(), numel),
                 tied ? ex::view_of(fused_dwte.data(), table) : ex::View{});

  std::vector<T> split_dx(x.size()), split_grads = start, split_dwte = dwte_start;
  ex::HeadStash s;
  ex::HeadWeightStash w;
  layer.forward(p, e, ex::view_of(x.data(), act), tg, kB, kS, s, ex::view_of(&loss, 1));
  layer.backward_input(p, e, s, scale, ex::view_of(split_dx.data(), act), w);
  CHECK(split_dx == fused_dx);
  CHECK(split_grads == start);
  CHECK(split_dwte == dwte_start);
  CHECK(w.bytes() == static_cast<int64_t>(sizeof(T)) * act);
  layer.backward_weight(p, s, w, ex::view_of(split_grads.data(), numel),
                        tied ? ex::view_of(split_dwte.data(), table) : ex::View{});
  CHECK(split_grads == fused_grads);
  CHECK(split_dwte == fused_dwte);
  CHECK(split_grads != start);
  if (tied) CHECK(split_dwte != dwte_start);
  CHECK(s.bytes() == 0);
}

}  // namespace

TEST_CASE("block: B then W equals the fused backward bit for bit") {
  SUBCASE("double") {
    check_block<double>();
  }
  SUBCASE("float") {
    check_block<float>();
  }
}

TEST_CASE("head: B then W equals the fused backward bit for bit, untied and tied") {
  for (const bool tied : {false, true}) {
    CAPTURE(tied);
    check_head<double>(tied);
    check_head<float>(tied);
  }
}

TEST_CASE("the backend's optional halves: linear and layer norm parts computed apart keep their bits") {
  ex::Backend& be = ex::default_backend();
  const int64_t n = 7, in = 5, out = 3;
  const std::vector<double> dy = random_values(n * out, 20), x = random_values(n * in, 21),
                            wt = random_values(out * in, 22);
  std::vector<double> dx1(n * in), dw1(out * in, 0.5), db1(out, 0.25), dx2(n * in), dw2 = dw1, db2 = db1;
  be.linear_backward(ex::view_of(dy.data(), n * out), ex::view_of(x.data(), n * in), ex::view_of(wt.data(), out * in),
                     ex::view_of(dx1.data(), n * in), ex::view_of(dw1.data(), out * in), ex::view_of(db1.data(), out),
                     n, in, out);
  be.linear_backward(ex::view_of(dy.data(), n * out), ex::view_of(x.data(), n * in), ex::view_of(wt.data(), out * in),
                     ex::view_of(dx2.data(), n * in), {}, {}, n, in, out);
  CHECK(dw2 == std::vector<double>(out * in, 0.5));
  be.linear_backward(ex::view_of(dy.data(), n * out), ex::view_of(x.data(), n * in), {}, {},
                     ex::view_of(dw2.data(), out * in), ex::view_of(db2.data(), out), n, in, out);
  CHECK(dx1 == dx2);
  CHECK(dw1 == dw2);
  CHECK(db1 == db2);
}
