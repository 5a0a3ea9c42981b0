// Tests of the optimizers against hand-written scalar double loops, in and out of place; the
// learning-rate schedule against its closed form; gradient norms and clipping; and the portable RNG
// behind initialisation (reference vectors, accuracy of its log/sin/cos, normal statistics, seeding).
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <span>
#include <vector>

#include "executor_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/layers.hpp"
#include "pd2bw/executor/optimizer.hpp"
#include "pd2bw/executor/rng.hpp"

namespace ex = pd2bw::executor;
using pd2bw::test::random_values;
using Vec = std::vector<double>;

namespace {

// A matrix (decayed) and a bias (not decayed).
ex::ParamLayout two_tensors() {
  ex::ParamLayout layout;
  ex::push_tensor(layout, "w", {3, 4});
  ex::push_tensor(layout, "b", {5});
  return layout;
}

// Scalar AdamW, written out from the formula independently of the library's loop structure.
void adamw_reference(const ex::AdamWConfig& c, double lr, int step, double scale, const Vec& p_in,
                     const Vec& g, Vec& m, Vec& v, Vec& p_out, size_t matrix_elems) {
  for (size_t i = 0; i < p_in.size(); ++i) {
    const double gi = g[i] * scale;
    m[i] = c.beta1 * m[i] + (1 - c.beta1) * gi;
    v[i] = c.beta2 * v[i] + (1 - c.beta2) * gi * gi;
    const double mhat = m[i] / (1 - std::pow(c.beta1, step));
    const double vhat = v[i] / (1 - std::pow(c.beta2, step));
    const double wd = i < matrix_elems ? c.weight_decay : 0.0;
    p_out[i] = p_in[i] - lr * (mhat / (std::sqrt(vhat) + c.eps) + wd * p_in[i]);
  }
}

}  // namespace

TEST_CASE("AdamW matches a scalar reference over several out-of-place steps (relative 1e-14)") {
  const ex::ParamLayout layout = two_tensors();
  const ex::AdamWConfig cfg{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  // 2BW style: read one buffer, write the other, swap.
  Vec a = random_values(17, 1), b(17), m(17, 0.0), v(17, 0.0);
  Vec ra = a, rb(17), rm(17, 0.0), rv(17, 0.0);
  for (int step = 1; step <= 5; ++step) {
    const Vec g = random_values(17, 10 + static_cast<uint64_t>(step));
    const double lr = 1e-2 * step;
    ex::adamw_step<double>(cfg, layout, lr, step, 0.5, a, g, m, v, b);
    adamw_reference(cfg, lr, step, 0.5, ra, g, rm, rv, rb, 12);
    std::swap(a, b);
    std::swap(ra, rb);
  }
  CHECK(pd2bw::test::max_rel_diff(a, ra, 1e-300) < 1e-14);
  CHECK(pd2bw::test::max_rel_diff(m, rm, 1e-300) < 1e-14);
  CHECK(pd2bw::test::max_rel_diff(v, rv, 1e-300) < 1e-14);
  CHECK(b != a);  // the old version stays intact
}

TEST_CASE("AdamW: in place equals out of place; weight decay touches matrices only") {
  const ex::ParamLayout layout = two_tensors();
  const ex::AdamWConfig cfg;
  const Vec p = random_values(17, 2), g = random_values(17, 3);
  Vec m1(17, 0.0), v1(17, 0.0), out(17), m2(17, 0.0), v2(17, 0.0), inplace = p;
  ex::adamw_step<double>(cfg, layout, 1e-3, 1, 1.0, p, g, m1, v1, out);
  ex::adamw_step<double>(cfg, layout, 1e-3, 1, 1.0, inplace, g, m2, v2, inplace);
  CHECK(out == inplace);

  // Zero gradient and zero moments: only the decoupled decay moves the weights.
  const Vec zero(17, 0.0);
  Vec mz(17, 0.0), vz(17, 0.0), decayed(17);
  ex::adamw_step<double>(cfg, layout, 0.5, 3, 1.0, p, zero, mz, vz, decayed);
  for (size_t i = 0; i < 17; ++i) {
    CAPTURE(i);
    CHECK(decayed[i] == doctest::Approx(i < 12 ? p[i] * (1 - 0.5 * cfg.weight_decay) : p[i]).epsilon(1e-15));
  }
}

TEST_CASE("AdamW in float tracks double (relative 1e-5)") {
  const ex::ParamLayout layout = two_tensors();
  const Vec pd = random_values(17, 4), gd = random_values(17, 5);
  const std::vector<float> pf(pd.begin(), pd.end()), gf(gd.begin(), gd.end());
  Vec md(17, 0.0), vd(17, 0.0), od(17);
  std::vector<float> mf(17, 0.f), vf(17, 0.f), of(17);
  ex::adamw_step<double>({}, layout, 1e-2, 1, 1.0, pd, gd, md, vd, od);
  ex::adamw_step<float>({}, layout, 1e-2, 1, 1.0, pf, gf, mf, vf, of);
  CHECK(pd2bw::test::max_rel_diff(of, od) < 1e-5);
}

TEST_CASE("SGD with momentum matches a scalar reference") {
  const ex::ParamLayout layout = two_tensors();
  const ex::SgdConfig cfg{.momentum = 0.9, .weight_decay = 0.01};
  Vec p = random_values(17, 6), buf(17, 0.0), rp = p, rbuf(17, 0.0);
  for (int step = 1; step <= 4; ++step) {
    const Vec g = random_values(17, 20 + static_cast<uint64_t>(step));
    ex::sgd_step<double>(cfg, layout, 0.1, 2.0, p, g, buf, p);  // in place
    for (size_t i = 0; i < 17; ++i) {
      const double gi = g[i] * 2.0 + (i < 12 ? 0.01 * rp[i] : 0.0);
      rbuf[i] = 0.9 * rbuf[i] + gi;
      rp[i] = rp[i] - 0.1 * rbuf[i];
    }
  }
  CHECK(pd2bw::test::max_rel_diff(p, rp, 1e-300) < 1e-14);
  CHECK(pd2bw::test::max_rel_diff(buf, rbuf, 1e-300) < 1e-14);
}

TEST_CASE("optimizers reject mismatched buffers, partial overlap and step 0") {
  const ex::ParamLayout layout = two_tensors();
  Vec p(17, 1.0), g(17, 0.1), m(17, 0.0), v(17, 0.0), out(17), small(16);
  CHECK_THROWS_AS(ex::adamw_step<double>({}, layout, 1e-3, 1, 1.0, p, g, m, v, small), pd2bw::Error);
  CHECK_THROWS_AS(ex::adamw_step<double>({}, layout, 1e-3, 0, 1.0, p, g, m, v, out), pd2bw::Error);
  Vec big(18, 1.0);
  const std::span<const double> in(big.data(), 17);
  const std::span<double> shifted(big.data() + 1, 17);
  CHECK_THROWS_AS(ex::adamw_step<double>({}, layout, 1e-3, 1, 1.0, in, g, m, v, shifted), pd2bw::Error);
  CHECK_THROWS_AS(ex::sgd_step<double>({}, layout, 0.1, 1.0, in, g, m, shifted), pd2bw::Error);
  CHECK_NOTHROW(ex::adamw_step<double>({}, layout, 1e-3, 1, 1.0, p, g, m, v, out));
}

TEST_CASE("learning-rate schedule: warm-up then cosine decay, against the closed form") {
  const ex::LrSchedule s{.max_lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 10, .total_steps = 110};
  CHECK_NOTHROW(s.validate());
  CHECK(s.at(0) == doctest::Approx(1e-4).epsilon(1e-15));
  CHECK(s.at(4) == doctest::Approx(5e-4).epsilon(1e-15));
  CHECK(s.at(9) == doctest::Approx(1e-3).epsilon(1e-15));
  CHECK(s.at(10) == doctest::Approx(1e-3).epsilon(1e-15));
  CHECK(s.at(60) == doctest::Approx(5.5e-4).epsilon(1e-15));  // half way: cos(pi/2) = 0
  CHECK(s.at(35) == doctest::Approx(1e-4 + 0.5 * (1 + std::cos(std::numbers::pi / 4)) * 9e-4).epsilon(1e-15));
  CHECK(s.at(109) > 1e-4);
  CHECK(s.at(110) == 1e-4);
  CHECK(s.at(5000) == 1e-4);
  for (int64_t i = 10; i < 110; ++i) REQUIRE(s.at(i + 1) <= s.at(i));
  const ex::LrSchedule no_warmup{.max_lr = 2.0, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 4};
  CHECK(no_warmup.at(0) == 2.0);
  CHECK(no_warmup.at(2) == doctest::Approx(1.0).epsilon(1e-15));
  CHECK_THROWS_AS(s.at(-1), pd2bw::UsageError);
  CHECK_THROWS_AS((ex::LrSchedule{.max_lr = 1, .min_lr = 2, .warmup_steps = 0, .total_steps = 1}.validate()),
                  pd2bw::UsageError);
  CHECK_THROWS_AS((ex::LrSchedule{.max_lr = 1, .min_lr = 0, .warmup_steps = 5, .total_steps = 4}.validate()),
                  pd2bw::UsageError);
}

TEST_CASE("gradient norm helpers: sum of squares and clip factor") {
  const std::vector<float> g = {3.0f, -4.0f};
  const Vec h = {12.0};
  const double total = ex::sum_of_squares<float>(g) + ex::sum_of_squares<double>(h);  // two stages
  CHECK(total == 169.0);
  CHECK(ex::clip_factor(total, 1.0) == doctest::Approx(1.0 / 13.0).epsilon(1e-15));
  CHECK(ex::clip_factor(total, 20.0) == 1.0);
  CHECK(ex::clip_factor(total, 0.0) == 1.0);  // clipping off
  CHECK_THROWS_AS(ex::clip_factor(std::nan(""), 1.0), pd2bw::Error);
  CHECK_THROWS_AS(ex::clip_factor(INFINITY, 1.0), pd2bw::Error);
}

TEST_CASE("rng: reference vectors, portable log and sin/cos, normal statistics") {
  uint64_t state = 0;
  CHECK(ex::splitmix64(state) == 0xE220A8397B1DCDAFULL);
  CHECK(ex::splitmix64(state) == 0x6E789E6AA1B965F4ULL);
  CHECK(ex::splitmix64(state) == 0x06C45D188009454FULL);
  CHECK(ex::fnv1a64("") == 0xCBF29CE484222325ULL);
  CHECK(ex::fnv1a64("a") == 0xAF63DC4C8601EC8CULL);
  for (double x : {1e-300, 1e-16, 0.001, 0.3, 0.7071, 0.99999, 1.0, 1.5, 2.0, 1e10}) {
    CAPTURE(x);
    CHECK(ex::portable_log(x) == doctest::Approx(std::log(x)).epsilon(4e-16).scale(1e-300));
  }
  CHECK(ex::portable_log(1.0) == 0.0);
  for (int i = 0; i < 64; ++i) {
    const double u = i / 64.0 + 0.003;
    double s = 0, c = 0;
    ex::portable_sincos_2pi(u, s, c);
    CAPTURE(u);
    CHECK(std::abs(s - std::sin(2 * std::numbers::pi * u)) < 1e-15);
    CHECK(std::abs(c - std::cos(2 * std::numbers::pi * u)) < 1e-15);
  }
  ex::NormalRng rng(123);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = rng.next();
    sum += z;
    sq += z * z;
  }
  CHECK(std::abs(sum / n) < 0.01);
  CHECK(std::abs(sq / n - 1.0) < 0.01);
  CHECK(ex::tensor_seed(1, 2, "wte.weight") != ex::tensor_seed(1, 3, "wte.weight"));
  CHECK(ex::tensor_seed(1, 2, "wte.weight") != ex::tensor_seed(2, 2, "wte.weight"));
  CHECK(ex::tensor_seed(1, 2, "wte.weight") != ex::tensor_seed(1, 2, "wpe.weight"));
}

TEST_CASE("init: GPT-2 statistics, seeded, and independent of the rest of the model") {
  const ex::ModelConfig cfg{.vocab = 50, .seq_len = 16, .d_model = 64, .heads = 4, .blocks = 8};
  Vec p(static_cast<size_t>(ex::layout_numel(ex::layer_layout(cfg, 3))));
  ex::init_layer<double>(cfg, 3, 7, p);
  const ex::ParamLayout layout = ex::layer_layout(cfg, 3);
  const auto stats = [&](const std::string& name) {
    const ex::TensorInfo& t = ex::find_tensor(layout, name);
    double s = 0, sq = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      s += p[t.offset + i];
      sq += p[t.offset + i] * p[t.offset + i];
    }
    const auto n = static_cast<double>(t.numel());
    return std::pair{s / n, std::sqrt(sq / n)};
  };
  CHECK(stats("h.2.attn.c_attn.weight").second == doctest::Approx(0.02).epsilon(0.03));
  CHECK(stats("h.2.mlp.c_fc.weight").second == doctest::Approx(0.02).epsilon(0.03));
  CHECK(stats("h.2.mlp.c_proj.weight").second == doctest::Approx(0.02 / 4).epsilon(0.03));  // 1/sqrt(2*8)
  CHECK(std::abs(stats("h.2.attn.c_attn.weight").first) < 0.001);
  CHECK(stats("h.2.ln_1.weight") == std::pair{1.0, 1.0});
  CHECK(stats("h.2.ln_2.bias") == std::pair{0.0, 0.0});
  CHECK(stats("h.2.mlp.c_fc.bias") == std::pair{0.0, 0.0});

  Vec again(p.size()), other_seed(p.size()), other_model(p.size());
  ex::init_layer<double>(cfg, 3, 7, again);
  ex::init_layer<double>(cfg, 3, 8, other_seed);
  ex::ModelConfig bigger_vocab = cfg;
  bigger_vocab.vocab = 999;
  bigger_vocab.tie_embeddings = true;
  ex::init_layer<double>(bigger_vocab, 3, 7, other_model);
  CHECK(again == p);
  CHECK(other_seed != p);
  CHECK(other_model == p);  // a block does not depend on the vocabulary or the head
  // A stage buffer holding layers 2..3 gets the same values as each layer alone.
  ex::ParamLayout stage = ex::layer_layout(cfg, 2);
  const int64_t off = ex::append_layout(stage, layout);
  Vec stage_buf(static_cast<size_t>(ex::layout_numel(stage)));
  ex::init_layer<double>(cfg, 2, 7, std::span<double>(stage_buf).first(static_cast<size_t>(off)));
  ex::init_layer<double>(cfg, 3, 7, std::span<double>(stage_buf).subspan(static_cast<size_t>(off)));
  CHECK(std::equal(p.begin(), p.end(), stage_buf.begin() + off));
  CHECK_THROWS_AS(ex::init_layer<double>(cfg, 3, 7, std::span<double>(p).first(10)), pd2bw::UsageError);
}
