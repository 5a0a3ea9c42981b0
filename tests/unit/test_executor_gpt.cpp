// Tests of the GPT layers and the sequential model: layouts and names, central-difference gradient
// checks in double (tolerances in executor_test_util.hpp) for the embedding, a block, the head (tied
// and untied) and a whole 2-block GPT, recompute bit-for-bit, runs against a second weight buffer,
// microbatch gradient accumulation, and float-vs-double agreement.
#include <doctest/doctest.h>

#include <algorithm>
#include <span>
#include <vector>

#include "executor_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/layers.hpp"
#include "pd2bw/executor/sequential_model.hpp"

namespace ex = pd2bw::executor;
using pd2bw::test::check_gradient;
using pd2bw::test::random_ids;
using pd2bw::test::random_values;
using pd2bw::test::weighted_sum;
using Vec = std::vector<double>;

namespace {

constexpr int64_t kB = 2, kS = 5;

ex::ModelConfig tiny_config(bool tied) {
  return {.vocab = 11, .seq_len = 5, .d_model = 8, .heads = 2, .blocks = 2, .tie_embeddings = tied};
}

// Replaces a layer's initial parameters by larger random values so every gradient is far from zero.
void randomise(std::span<double> params, uint64_t seed) {
  const Vec r = random_values(static_cast<int64_t>(params.size()), seed, 0.5);
  std::copy(r.begin(), r.end(), params.begin());
}

Vec delta(std::span<const double> after, const Vec& before) {
  Vec d(after.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = after[i] - before[i];
  return d;
}

template <typename T>
bool same_block_stash(const typename ex::HostBlock<T>::Stash& a, const typename ex::HostBlock<T>::Stash& b) {
  return a.batch == b.batch && a.seq == b.seq && a.x == b.x && a.ln1 == b.ln1 && a.ln1_mean == b.ln1_mean &&
         a.ln1_rstd == b.ln1_rstd && a.qkv == b.qkv && a.attn_stash == b.attn_stash && a.attn == b.attn &&
         a.x1 == b.x1 && a.ln2 == b.ln2 && a.ln2_mean == b.ln2_mean && a.ln2_rstd == b.ln2_rstd &&
         a.fc == b.fc && a.fc_act == b.fc_act;
}

}  // namespace

TEST_CASE("config, layer names and HF-named layouts") {
  const ex::ModelConfig cfg = tiny_config(false);
  CHECK(cfg.layer_count() == 4);
  CHECK(ex::layer_name(cfg, 0) == "embedding");
  CHECK(ex::layer_name(cfg, 2) == "block.1");
  CHECK(ex::layer_name(cfg, 3) == "head");
  CHECK(ex::layer_kind(cfg, 1) == ex::LayerKind::block);
  CHECK_THROWS_AS(ex::layer_name(cfg, 4), pd2bw::UsageError);
  ex::ModelConfig bad = cfg;
  bad.heads = 3;
  CHECK_THROWS_AS(bad.validate(), pd2bw::UsageError);

  const ex::ParamLayout block = ex::layer_layout(cfg, 2);
  std::vector<std::string> names;
  for (const auto& t : block) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"h.1.ln_1.weight", "h.1.ln_1.bias", "h.1.attn.c_attn.weight",
                                          "h.1.attn.c_attn.bias", "h.1.attn.c_proj.weight",
                                          "h.1.attn.c_proj.bias", "h.1.ln_2.weight", "h.1.ln_2.bias",
                                          "h.1.mlp.c_fc.weight", "h.1.mlp.c_fc.bias", "h.1.mlp.c_proj.weight",
                                          "h.1.mlp.c_proj.bias"});
  const int64_t c = cfg.d_model;
  CHECK(ex::layout_numel(block) == 12 * c * c + 13 * c);
  CHECK(ex::find_tensor(block, "h.1.mlp.c_proj.weight").shape == std::vector<int64_t>{c, 4 * c});
  CHECK(ex::find_tensor(block, "h.1.attn.c_attn.weight").is_matrix());
  CHECK_FALSE(ex::find_tensor(block, "h.1.attn.c_attn.bias").is_matrix());
  CHECK(ex::layout_numel(ex::layer_layout(cfg, 0)) == (cfg.vocab + cfg.seq_len) * c);
  CHECK(ex::layer_layout(cfg, 3).back().name == "lm_head.weight");
  CHECK(ex::layout_numel(ex::layer_layout(tiny_config(true), 3)) == 2 * c);

  ex::ParamLayout stage = ex::layer_layout(cfg, 1);
  CHECK(ex::append_layout(stage, block) == 12 * c * c + 13 * c);
  CHECK(ex::find_tensor(stage, "h.1.ln_1.weight").offset == 12 * c * c + 13 * c);
  CHECK_THROWS_AS(ex::find_tensor(stage, "wte.weight"), pd2bw::Error);
}

TEST_CASE("embedding layer: gradients pass the check and accumulate") {
  const ex::ModelConfig cfg = tiny_config(false);
  ex::HostEmbedding<double> emb(cfg, 1);
  randomise(emb.params(), 2);
  const std::vector<int32_t> tokens = random_ids(kB * kS, 11, 3);
  const Vec r = random_values(kB * kS * cfg.d_model, 4);
  Vec out(r.size());
  ex::HostEmbedding<double>::Stash stash;
  const auto loss = [&] {
    emb.forward(emb.params().data(), tokens.data(), kB, kS, stash, out.data());
    return weighted_sum(out, r);
  };
  loss();
  const Vec before = random_values(emb.size(), 5);
  std::copy(before.begin(), before.end(), emb.grads().begin());
  emb.backward(stash, r.data(), emb.grads().data());
  PD2BW_CHECK_GRAD(check_gradient(loss, emb.params(), delta(emb.grads(), before)));
  CHECK(stash.bytes() == kB * kS * 4);
  CHECK_THROWS_AS(emb.forward(emb.params().data(), tokens.data(), 1, 6, stash, out.data()),
                  pd2bw::UsageError);
}

TEST_CASE("block layer: input and parameter gradients pass the check") {
  const ex::ModelConfig cfg = tiny_config(false);
  ex::HostBlock<double> blk(cfg, 1, 1);
  randomise(blk.params(), 6);
  Vec x = random_values(kB * kS * cfg.d_model, 7);
  const Vec r = random_values(static_cast<int64_t>(x.size()), 8);
  Vec out(x.size());
  ex::HostBlock<double>::Stash stash;
  const auto loss = [&] {
    blk.forward(blk.params().data(), x.data(), kB, kS, stash, out.data());
    return weighted_sum(out, r);
  };
  loss();
  const Vec before = random_values(blk.size(), 9);
  std::copy(before.begin(), before.end(), blk.grads().begin());
  Vec dx(x.size());
  blk.backward(blk.params().data(), stash, r.data(), dx.data(), blk.grads().data());
  PD2BW_CHECK_GRAD(check_gradient(loss, x, dx));
  PD2BW_CHECK_GRAD(check_gradient(loss, blk.params(), delta(blk.grads(), before)));
  const int64_t n = kB * kS, c = cfg.d_model;
  CHECK(stash.bytes() == 8 * (n * c * 5 + n * 4 + n * 3 * c + kB * cfg.heads * kS * kS + 2 * n * 4 * c));
}

TEST_CASE("head layer: gradients pass the check, untied and tied") {
  for (const bool tied : {false, true}) {
    CAPTURE(tied);
    const ex::ModelConfig cfg = tiny_config(tied);
    ex::HostHead<double> head(cfg, 1);
    randomise(head.params(), 10);
    Vec x = random_values(kB * kS * cfg.d_model, 11);
    Vec wte = random_values(cfg.vocab * cfg.d_model, 12, 0.5);
    const std::vector<int32_t> targets = random_ids(kB * kS, 11, 13);
    const double scale = 0.5;
    ex::HostHead<double>::Stash stash;
    const auto loss = [&] {
      return scale * head.forward(head.params().data(), wte.data(), x.data(), targets.data(), kB, kS, stash);
    };
    loss();
    const Vec before = random_values(head.size(), 14),
              dwte_before = random_values(static_cast<int64_t>(wte.size()), 15);
    std::copy(before.begin(), before.end(), head.grads().begin());
    Vec dwte = dwte_before, dx(x.size());
    head.backward(head.params().data(), wte.data(), stash, scale, dx.data(), head.grads().data(),
                  dwte.data());
    PD2BW_CHECK_GRAD(check_gradient(loss, x, dx));
    PD2BW_CHECK_GRAD(check_gradient(loss, head.params(), delta(head.grads(), before)));
    if (tied) {
      PD2BW_CHECK_GRAD(check_gradient(loss, wte, delta(dwte, dwte_before)));
      CHECK_THROWS_AS(head.forward(head.params().data(), nullptr, x.data(), targets.data(), kB, kS, stash),
                      pd2bw::UsageError);
    } else {
      CHECK(dwte == dwte_before);  // an untied head never touches wte
    }
  }
}

TEST_CASE("whole 2-block GPT: every parameter's gradient passes the check, untied and tied") {
  for (const bool tied : {false, true}) {
    CAPTURE(tied);
    const ex::ModelConfig cfg = tiny_config(tied);
    ex::SequentialModel<double> model(cfg, 21);
    randomise(model.embedding().params(), 22);
    for (int64_t i = 0; i < cfg.blocks; ++i)
      randomise(model.block(i).params(), 23 + static_cast<uint64_t>(i));
    randomise(model.head().params(), 30);
    const std::vector<int32_t> tokens = random_ids(kB * kS, 11, 31), targets = random_ids(kB * kS, 11, 32);
    const auto loss = [&] { return model.loss(tokens.data(), targets.data(), kB, kS); };
    model.zero_grads();
    const double l = model.forward_backward(tokens.data(), targets.data(), kB, kS, 1.0);
    CHECK(l == loss());
    const auto grads = [](auto& layer) { return Vec(layer.grads().begin(), layer.grads().end()); };
    PD2BW_CHECK_GRAD(check_gradient(loss, model.embedding().params(), grads(model.embedding())));
    for (int64_t i = 0; i < cfg.blocks; ++i) {
      PD2BW_CHECK_GRAD(check_gradient(loss, model.block(i).params(), grads(model.block(i))));
    }
    PD2BW_CHECK_GRAD(check_gradient(loss, model.head().params(), grads(model.head())));
  }
}

TEST_CASE("microbatches with loss scale 1/m accumulate the gradient of the whole step") {
  const ex::ModelConfig cfg = tiny_config(true);
  ex::SequentialModel<double> split(cfg, 41), whole(cfg, 41);
  const std::vector<int32_t> tokens = random_ids(2 * kB * kS, 11, 42),
                             targets = random_ids(2 * kB * kS, 11, 43);
  split.zero_grads();
  whole.zero_grads();
  const double l1 = split.forward_backward(tokens.data(), targets.data(), kB, kS, 0.5);
  const double l2 = split.forward_backward(tokens.data() + kB * kS, targets.data() + kB * kS, kB, kS, 0.5);
  const double l = whole.forward_backward(tokens.data(), targets.data(), 2 * kB, kS, 1.0);
  CHECK(l == doctest::Approx(0.5 * (l1 + l2)).epsilon(1e-13));
  const auto same = [](const auto& a, const auto& b) {
    return pd2bw::test::max_rel_diff(Vec(a.grads().begin(), a.grads().end()),
                                     Vec(b.grads().begin(), b.grads().end()), 1e-6);
  };
  CHECK(same(split.embedding(), whole.embedding()) < 1e-10);
  CHECK(same(split.block(1), whole.block(1)) < 1e-10);
  CHECK(same(split.head(), whole.head()) < 1e-10);
}

TEST_CASE(
    "recompute rebuilds the stash bit for bit; a copy of the weights in another buffer gives the same "
    "results") {
  const ex::ModelConfig cfg = tiny_config(false);
  ex::HostBlock<float> blk(cfg, 0, 51);
  const std::vector<float> x = random_values<float>(kB * kS * cfg.d_model, 52);
  std::vector<float> out(x.size());
  ex::HostBlock<float>::Stash first, again;
  blk.forward(blk.params().data(), x.data(), kB, kS, first, out.data());
  blk.recompute(blk.params().data(), x.data(), kB, kS, again);
  CHECK(same_block_stash<float>(first, again));
  // Another weight version at another address (and misaligned by one element).
  std::vector<float> version(static_cast<size_t>(blk.size()) + 1);
  std::copy(blk.params().begin(), blk.params().end(), version.begin() + 1);
  ex::HostBlock<float>::Stash other;
  std::vector<float> out2(x.size());
  blk.forward(version.data() + 1, x.data(), kB, kS, other, out2.data());
  CHECK(same_block_stash<float>(first, other));
  CHECK(out == out2);

  ex::HostHead<float> head(cfg, 51);
  const std::vector<int32_t> targets = random_ids(kB * kS, 11, 53);
  ex::HostHead<float>::Stash hs1, hs2;
  const double l1 = head.forward(head.params().data(), nullptr, out.data(), targets.data(), kB, kS, hs1);
  const double l2 = head.recompute(head.params().data(), nullptr, out.data(), targets.data(), kB, kS, hs2);
  CHECK(l1 == l2);
  CHECK((hs1.x == hs2.x && hs1.ln == hs2.ln && hs1.ln_mean == hs2.ln_mean && hs1.ln_rstd == hs2.ln_rstd &&
         hs1.logits == hs2.logits && hs1.lse == hs2.lse && hs1.targets == hs2.targets));
  // Changing the weights must change the stash: the comparison above can fail.
  version[5] += 1.0f;
  blk.forward(version.data() + 1, x.data(), kB, kS, other, out2.data());
  CHECK_FALSE(same_block_stash<float>(first, other));
}

TEST_CASE(
    "float and double models: float init is the rounding of double init; losses agree (relative 1e-5)") {
  for (const bool tied : {false, true}) {
    CAPTURE(tied);
    const ex::ModelConfig cfg{
        .vocab = 37, .seq_len = 9, .d_model = 16, .heads = 4, .blocks = 3, .tie_embeddings = tied};
    const ex::SequentialModel<double> md(cfg, 61);
    const ex::SequentialModel<float> mf(cfg, 61);
    const auto rounded = [](std::span<const float> f, std::span<const double> d) {
      for (size_t i = 0; i < f.size(); ++i) {
        if (f[i] != static_cast<float>(d[i])) return false;
      }
      return f.size() == d.size();
    };
    CHECK(rounded(mf.embedding().params(), md.embedding().params()));
    CHECK(rounded(mf.block(2).params(), md.block(2).params()));
    CHECK(rounded(mf.head().params(), md.head().params()));
    const std::vector<int32_t> tokens = random_ids(3 * 9, 37, 62), targets = random_ids(3 * 9, 37, 63);
    const double ld = md.loss(tokens.data(), targets.data(), 3, 9);
    const double lf = mf.loss(tokens.data(), targets.data(), 3, 9);
    CHECK(lf == doctest::Approx(ld).epsilon(1e-5));
    CHECK(ld == doctest::Approx(std::log(37.0)).epsilon(0.05));  // small init: close to uniform
  }
}
