// Tests of the BERT layers in double: central-difference gradient checks of a whole tiny BERT
// (SequentialModel<double>, post-LN and pre-LN) on a padded batch with ignored targets, at a handful of
// entries of every parameter tensor (tolerances in executor_test_util.hpp); the split backward (B + W) of
// a bert block and the masked-LM head against the fused one, bit for bit; independence of a padded row's
// loss from the tokens past its length and of a row's loss from the other rows; bad configs and inputs;
// the HF BertForMaskedLM names and BERT's initialisation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "executor_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/data.hpp"
#include "pd2bw/executor/layers.hpp"
#include "pd2bw/executor/sequential_model.hpp"

namespace ex = pd2bw::executor;
using pd2bw::test::GradReport;
using pd2bw::test::random_ids;
using pd2bw::test::random_values;
using Vec = std::vector<double>;
using Ids = std::vector<int32_t>;

namespace {

constexpr int64_t kV = 20, kB = 3, kS = 8;

ex::ModelConfig bert_config(ex::LnPlacement ln) {
  ex::ModelConfig c = ex::ModelConfig::of(ex::ModelFamily::bert);
  c.vocab = kV;
  c.seq_len = kS;
  c.d_model = 8;
  c.heads = 2;
  c.blocks = 2;
  c.ln = ln;
  return c;
}

// A padded microbatch of kB rows of kS positions: lengths 8, 5 and 1; types 0 then 1 (segments A and B)
// inside each row; pad token 0 and type 0 past the length, where no target counts; inside, every third
// position's target is ignored (the unmasked tokens of masked-LM) and the others are random ids.
struct Batch {
  Ids tokens, types, targets, lengths = {8, 5, 1};
};
Batch padded_batch(uint64_t seed) {
  Batch b;
  b.tokens = random_ids(kB * kS, kV, seed);
  b.targets = random_ids(kB * kS, kV, seed + 1);
  b.types.assign(kB * kS, 0);
  for (int64_t r = 0; r < kB; ++r) {
    for (int64_t p = 0; p < kS; ++p) {
      const int64_t i = r * kS + p;
      if (p >= b.lengths[r]) {
        b.tokens[i] = 0;
        b.targets[i] = ex::kIgnoreTarget;
      } else {
        b.types[i] = p >= b.lengths[r] / 2 ? 1 : 0;
        if (p % 3 == 1) b.targets[i] = ex::kIgnoreTarget;
      }
    }
  }
  return b;
}

// Replaces a layer's initial parameters by larger random values so every gradient is far from zero.
void randomise(std::span<double> params, uint64_t seed) {
  const Vec r = random_values(static_cast<int64_t>(params.size()), seed, 0.5);
  std::copy(r.begin(), r.end(), params.begin());
}

template <typename Model>
void randomise_model(Model& m) {
  randomise(m.embedding().params(), 2);
  for (int64_t i = 0; i < m.config().blocks; ++i) randomise(m.block(i).params(), 3 + static_cast<uint64_t>(i));
  randomise(m.head().params(), 9);
}

// Central differences of loss() at six entries of each tensor of a layer (first, last, middle and three
// spread by a hash), against the accumulated gradient; one INFO'd check per tensor.
template <typename Layer>
void check_layer_entries(const std::function<double()>& loss, Layer& layer) {
  for (const ex::TensorInfo& t : layer.layout()) {
    const int64_t n = t.numel();
    std::vector<int64_t> which = {0, n - 1, n / 2, (n * 7 + 3) / 11 % n, (n * 3 + 1) / 5 % n, (n * 13 + 5) / 17 % n};
    std::sort(which.begin(), which.end());
    which.erase(std::unique(which.begin(), which.end()), which.end());
    Vec x(which.size()), a(which.size());
    for (size_t i = 0; i < which.size(); ++i) {
      x[i] = layer.params()[t.offset + which[i]];
      a[i] = layer.grads()[t.offset + which[i]];
    }
    const auto mirrored = [&] {
      for (size_t i = 0; i < which.size(); ++i) layer.params()[t.offset + which[i]] = x[i];
      return loss();
    };
    const GradReport r = pd2bw::test::check_gradient(mirrored, x, a);
    for (size_t i = 0; i < which.size(); ++i) layer.params()[t.offset + which[i]] = x[i];
    INFO("tensor " << t.name);
    PD2BW_CHECK_GRAD(r);
  }
}

}  // namespace

TEST_CASE("whole 2-block BERT on a padded batch with ignored targets: every tensor's gradient passes the check") {
  for (const ex::LnPlacement ln : {ex::LnPlacement::post, ex::LnPlacement::pre}) {
    CAPTURE(ex::to_string(ln));
    const ex::ModelConfig cfg = bert_config(ln);
    ex::SequentialModel<double> model(cfg, 1);
    randomise_model(model);
    const Batch b = padded_batch(11);
    const double scale = 0.5;
    const auto loss = [&] {
      return scale * model.loss(b.tokens.data(), b.targets.data(), kB, kS, b.types.data(), b.lengths.data());
    };
    model.zero_grads();
    const double l =
        model.forward_backward(b.tokens.data(), b.targets.data(), kB, kS, scale, b.types.data(), b.lengths.data());
    CHECK(scale * l == loss());
    check_layer_entries(loss, model.embedding());
    for (int64_t i = 0; i < cfg.blocks; ++i) check_layer_entries(loss, model.block(i));
    check_layer_entries(loss, model.head());
  }
}

namespace {

// B then W against the fused backward of a bert block (index 1) on a padded batch, in double.
void check_block_split(ex::LnPlacement ln) {
  const ex::ModelConfig cfg = bert_config(ln);
  ex::Backend& be = ex::default_backend();
  const ex::BlockLayer layer(cfg, 1, be, ex::DType::f64);
  const int64_t numel = ex::layout_numel(ex::layer_layout(cfg, 2)), act = kB * kS * cfg.d_model;
  const Vec params = random_values(numel, 21, 0.5), x = random_values(act, 22), dy = random_values(act, 23);
  const Vec start = random_values(numel, 24);  // earlier microbatches' gradients
  const Ids lengths = padded_batch(1).lengths;
  const auto p = ex::view_of(params.data(), numel);
  const auto len = ex::view_of(lengths.data(), kB);

  Vec out(act), fused_dx(act), fused_grads = start;
  ex::BlockStash fused;
  layer.forward(p, ex::view_of(x.data(), act), kB, kS, fused, ex::view_of(out.data(), act), len);
  layer.backward(p, fused, ex::view_of(dy.data(), act), ex::view_of(fused_dx.data(), act),
                 ex::view_of(fused_grads.data(), numel));

  Vec split_dx(act), split_grads = start;
  ex::BlockStash s;
  ex::BlockWeightStash w;
  layer.forward(p, ex::view_of(x.data(), act), kB, kS, s, ex::view_of(out.data(), act), len);
  layer.backward_input(p, s, ex::view_of(dy.data(), act), ex::view_of(split_dx.data(), act), w);
  CHECK(split_dx == fused_dx);
  CHECK(split_grads == start);  // B touches no parameter gradient
  layer.backward_weight(p, s, w, ex::view_of(split_grads.data(), numel));
  CHECK(split_grads == fused_grads);
  CHECK(split_grads != start);

  // The padding reaches the block: the same input without lengths gives another output.
  Vec unmasked(act);
  ex::BlockStash u;
  layer.forward(p, ex::view_of(x.data(), act), kB, kS, u, ex::view_of(unmasked.data(), act));
  CHECK(unmasked != out);
}

// B then W against the fused backward of the masked-LM head (tied decoder + bias).
void check_head_split(ex::LnPlacement ln) {
  const ex::ModelConfig cfg = bert_config(ln);
  ex::Backend& be = ex::default_backend();
  const ex::HeadLayer layer(cfg, be, ex::DType::f64);
  const int64_t numel = ex::layout_numel(ex::layer_layout(cfg, cfg.blocks + 1));
  const int64_t act = kB * kS * cfg.d_model, table = kV * cfg.d_model;
  const Vec params = random_values(numel, 31, 0.5), x = random_values(act, 32), wte = random_values(table, 33, 0.5);
  const Vec start = random_values(numel, 34), dwte_start = random_values(table, 35);
  const Ids targets = padded_batch(36).targets;
  const auto p = ex::view_of(params.data(), numel);
  const auto e = ex::view_of(wte.data(), table);
  const auto tg = ex::view_of(targets.data(), kB * kS);
  const double scale = 0.25;
  double loss = 0, loss2 = 0;

  Vec fused_dx(act), fused_grads = start, fused_dwte = dwte_start;
  ex::HeadStash fused;
  layer.forward(p, e, ex::view_of(x.data(), act), tg, kB, kS, fused, ex::view_of(&loss, 1));
  layer.backward(p, e, fused, scale, ex::view_of(fused_dx.data(), act), ex::view_of(fused_grads.data(), numel),
                 ex::view_of(fused_dwte.data(), table));

  Vec split_dx(act), split_grads = start, split_dwte = dwte_start;
  ex::HeadStash s;
  ex::HeadWeightStash w;
  layer.forward(p, e, ex::view_of(x.data(), act), tg, kB, kS, s, ex::view_of(&loss2, 1));
  CHECK(loss2 == loss);
  layer.backward_input(p, e, s, scale, ex::view_of(split_dx.data(), act), w);
  CHECK(split_dx == fused_dx);
  CHECK(split_grads == start);
  CHECK(split_dwte == dwte_start);
  layer.backward_weight(p, s, w, ex::view_of(split_grads.data(), numel), ex::view_of(split_dwte.data(), table));
  CHECK(split_grads == fused_grads);
  CHECK(split_dwte == fused_dwte);
  CHECK(split_grads != start);
  CHECK(split_dwte != dwte_start);
  // The decoder bias learns: its gradient sums the counted rows' (softmax - onehot) * scale / K.
  const ex::ParamLayout layout = ex::layer_layout(cfg, cfg.blocks + 1);
  const ex::TensorInfo& bias = ex::find_tensor(layout, "cls.predictions.bias");
  double bias_sum = 0;
  for (int64_t j = 0; j < kV; ++j) bias_sum += fused_grads[bias.offset + j] - start[bias.offset + j];
  CHECK(std::abs(bias_sum) < 1e-12);  // each counted row's (softmax - onehot) sums to 0
}

}  // namespace

TEST_CASE("bert block: B then W equals the fused backward bit for bit, post-LN and pre-LN") {
  SUBCASE("post") {
    check_block_split(ex::LnPlacement::post);
  }
  SUBCASE("pre") {
    check_block_split(ex::LnPlacement::pre);
  }
}

TEST_CASE("bert masked-LM head: B then W equals the fused backward bit for bit, post-LN and pre-LN") {
  SUBCASE("post") {
    check_head_split(ex::LnPlacement::post);
  }
  SUBCASE("pre") {
    check_head_split(ex::LnPlacement::pre);
  }
}

TEST_CASE("a padded row's loss does not depend on the tokens or types past its length") {
  for (const ex::LnPlacement ln : {ex::LnPlacement::post, ex::LnPlacement::pre}) {
    CAPTURE(ex::to_string(ln));
    ex::SequentialModel<double> model(bert_config(ln), 41);
    randomise_model(model);
    Batch b = padded_batch(42);
    const auto loss = [&] {
      return model.loss(b.tokens.data(), b.targets.data(), kB, kS, b.types.data(), b.lengths.data());
    };
    const double l0 = loss();
    for (int64_t r = 0; r < kB; ++r) {
      for (int64_t p = b.lengths[r]; p < kS; ++p) {
        b.tokens[r * kS + p] = static_cast<int32_t>((7 * p + r) % kV);
        b.types[r * kS + p] = 1;
      }
    }
    CHECK(loss() == l0);  // exactly: masked keys get no weight and padded rows count no loss
    b.tokens[1 * kS + 2] = (b.tokens[1 * kS + 2] + 1) % kV;  // inside row 1's length: the check can fail
    CHECK(loss() != l0);
  }
}

TEST_CASE("a row's masked-LM loss does not depend on the other rows: the batch loss is the count-weighted mean") {
  for (const ex::LnPlacement ln : {ex::LnPlacement::post, ex::LnPlacement::pre}) {
    CAPTURE(ex::to_string(ln));
    ex::SequentialModel<double> model(bert_config(ln), 51);
    randomise_model(model);
    const Batch b = padded_batch(52);
    const double batch_loss = model.loss(b.tokens.data(), b.targets.data(), kB, kS, b.types.data(), b.lengths.data());
    double weighted = 0;
    int64_t total = 0;
    for (int64_t r = 0; r < kB; ++r) {
      const int64_t off = r * kS;
      const int64_t k = std::count_if(b.targets.begin() + off, b.targets.begin() + off + kS,
                                      [](int32_t t) { return t != ex::kIgnoreTarget; });
      REQUIRE(k > 0);
      const double row =
          model.loss(b.tokens.data() + off, b.targets.data() + off, 1, kS, b.types.data() + off, b.lengths.data() + r);
      weighted += static_cast<double>(k) * row;
      total += k;
    }
    CHECK(batch_loss == doctest::Approx(weighted / static_cast<double>(total)).epsilon(1e-12));
  }
}

TEST_CASE("bert: bad configs and inputs are rejected") {
  SUBCASE("a bert embedding without types throws UsageError; a type of 2 throws Error") {
    const ex::ModelConfig cfg = bert_config(ex::LnPlacement::post);
    const ex::HostEmbedding<double> emb(cfg, 1);
    const Batch b = padded_batch(61);
    Vec out(kB * kS * cfg.d_model);
    ex::EmbeddingStash stash;
    CHECK_THROWS_AS(emb.forward(emb.params().data(), b.tokens.data(), kB, kS, stash, out.data()), pd2bw::UsageError);
    Ids types = b.types;
    types[3] = 2;
    CHECK_THROWS_AS(emb.forward(emb.params().data(), b.tokens.data(), kB, kS, stash, out.data(), types.data()),
                    pd2bw::Error);
    CHECK_NOTHROW(emb.forward(emb.params().data(), b.tokens.data(), kB, kS, stash, out.data(), b.types.data()));
  }
  SUBCASE("an untied bert and a post-LN gpt fail validate()") {
    ex::ModelConfig bert = bert_config(ex::LnPlacement::post);
    CHECK_NOTHROW(bert.validate());
    bert.tie_embeddings = false;
    CHECK_THROWS_AS(bert.validate(), pd2bw::UsageError);
    CHECK_THROWS_AS(ex::SequentialModel<double>(bert, 1), pd2bw::UsageError);
    ex::ModelConfig gpt{.vocab = kV, .seq_len = kS, .d_model = 8, .heads = 2, .blocks = 2};
    CHECK_NOTHROW(gpt.validate());
    gpt.ln = ex::LnPlacement::post;
    CHECK_THROWS_AS(gpt.validate(), pd2bw::UsageError);
  }
  SUBCASE("a key length outside [1, seq] throws Error from the model") {
    const ex::SequentialModel<double> model(bert_config(ex::LnPlacement::post), 1);
    const Batch b = padded_batch(62);
    for (const int32_t bad : {0, static_cast<int32_t>(kS + 1)}) {
      const Ids lengths = {8, bad, 1};
      CHECK_THROWS_AS(model.loss(b.tokens.data(), b.targets.data(), kB, kS, b.types.data(), lengths.data()),
                      pd2bw::Error);
    }
  }
}

TEST_CASE("bert config defaults, HF BertForMaskedLM names, and BERT's initialisation") {
  const ex::ModelConfig d = ex::ModelConfig::of(ex::ModelFamily::bert);
  CHECK(d.is_bert());
  CHECK(d.ln == ex::LnPlacement::post);
  CHECK(d.tie_embeddings);
  CHECK(ex::ModelConfig::of(ex::ModelFamily::gpt).ln == ex::LnPlacement::pre);

  const ex::ModelConfig cfg = bert_config(ex::LnPlacement::post);
  const int64_t c = cfg.d_model;
  const ex::ParamLayout emb = ex::layer_layout(cfg, 0), blk = ex::layer_layout(cfg, 1),
                        head = ex::layer_layout(cfg, cfg.blocks + 1);
  CHECK(emb.front().name == "bert.embeddings.word_embeddings.weight");
  CHECK(emb.front().offset == ex::EmbeddingLayer::kWteOffset);
  CHECK(emb.front().shape == std::vector<int64_t>{kV, c});
  CHECK(ex::find_tensor(emb, "bert.embeddings.token_type_embeddings.weight").shape ==
        std::vector<int64_t>{ex::kBertTypeVocab, c});
  CHECK(blk.front().name == "bert.encoder.layer.0.attention.self.query.weight");
  CHECK(ex::find_tensor(ex::layer_layout(cfg, 2), "bert.encoder.layer.1.output.LayerNorm.bias").shape ==
        std::vector<int64_t>{c});
  CHECK(ex::find_tensor(head, "cls.predictions.bias").shape == std::vector<int64_t>{kV});
  CHECK(ex::tied_copy_name(cfg) == "cls.predictions.decoder.weight");

  // Gammas 1, biases and betas 0, matrices N(0, 0.02^2) (sample std of all the model's matrices).
  const ex::SequentialModel<double> model(cfg, 71);
  double sq = 0;
  int64_t count = 0;
  const auto visit = [&](const auto& layer) {
    for (const ex::TensorInfo& t : layer.layout()) {
      const std::span<const double> v = layer.params().subspan(t.offset, t.numel());
      if (t.is_matrix()) {
        for (const double x : v) sq += x * x;
        count += t.numel();
        continue;
      }
      const double want = t.name.ends_with("LayerNorm.weight") ? 1.0 : 0.0;
      INFO(t.name);
      CHECK(std::all_of(v.begin(), v.end(), [&](double x) { return x == want; }));
    }
  };
  visit(model.embedding());
  for (int64_t i = 0; i < cfg.blocks; ++i) visit(model.block(i));
  visit(model.head());
  CHECK(std::sqrt(sq / static_cast<double>(count)) == doctest::Approx(0.02).epsilon(0.05));
}
