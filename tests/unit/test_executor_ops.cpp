// Tests of the CPU ops: central-difference gradient checks in double for every op (tolerances in
// executor_test_util.hpp), forward values against naive formulas, accumulation of parameter gradients,
// float-vs-double agreement, id range errors, and results that do not depend on buffer addresses.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "executor_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/ops.hpp"

namespace cpu = pd2bw::executor::cpu;
using pd2bw::test::check_gradient;
using pd2bw::test::random_ids;
using pd2bw::test::random_values;
using pd2bw::test::weighted_sum;
using Vec = std::vector<double>;

namespace {

// after - before, elementwise: what an accumulating backward added.
Vec delta(const Vec& after, const Vec& before) {
  Vec d(after.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = after[i] - before[i];
  return d;
}

void check_linear(int64_t n, int64_t in, int64_t out, bool with_bias) {
  Vec x = random_values(n * in, 1), w = random_values(out * in, 2), b = random_values(out, 3);
  const Vec r = random_values(n * out, 4);
  Vec y(static_cast<size_t>(n * out));
  const auto loss = [&] {
    cpu::linear_forward(x.data(), w.data(), with_bias ? b.data() : nullptr, y.data(), n, in, out);
    return weighted_sum(y, r);
  };
  loss();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < out; ++j) {
      double ref = with_bias ? b[j] : 0.0;
      for (int64_t k = 0; k < in; ++k) ref += x[i * in + k] * w[j * in + k];
      REQUIRE(y[i * out + j] == doctest::Approx(ref).epsilon(1e-12));
    }
  }
  Vec dx(x.size());
  const Vec dw0 = random_values(out * in, 5), db0 = random_values(out, 6);  // earlier microbatches
  Vec dw = dw0, db = db0;
  cpu::linear_backward(r.data(), x.data(), w.data(), dx.data(), dw.data(), with_bias ? db.data() : nullptr, n,
                       in, out);
  PD2BW_CHECK_GRAD(check_gradient(loss, x, dx));
  PD2BW_CHECK_GRAD(check_gradient(loss, w, delta(dw, dw0)));
  if (with_bias) {
    PD2BW_CHECK_GRAD(check_gradient(loss, b, delta(db, db0)));
  } else {
    CHECK(db == db0);
  }
}

// Naive causal attention in double, straight from the formula.
Vec attention_reference(const Vec& qkv, int64_t b, int64_t t, int64_t c, int64_t h) {
  const int64_t hd = c / h;
  Vec out(static_cast<size_t>(b * t * c), 0.0);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      for (int64_t i = 0; i < t; ++i) {
        Vec w(static_cast<size_t>(i + 1));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t d = 0; d < hd; ++d) {
            s += qkv[(bi * t + i) * 3 * c + hi * hd + d] * qkv[(bi * t + j) * 3 * c + c + hi * hd + d];
          }
          w[j] = s / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, w[j]);
        }
        for (double& v : w) sum += (v = std::exp(v - mx));
        for (int64_t d = 0; d < hd; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j)
            acc += w[j] / sum * qkv[(bi * t + j) * 3 * c + 2 * c + hi * hd + d];
          out[(bi * t + i) * c + hi * hd + d] = acc;
        }
      }
    }
  }
  return out;
}

void check_attention(int64_t b, int64_t t, int64_t c, int64_t h) {
  Vec qkv = random_values(b * t * 3 * c, 11);
  const Vec r = random_values(b * t * c, 12);
  Vec out(r.size()), probs(static_cast<size_t>(b * h * t * t));
  const auto loss = [&] {
    cpu::attention_forward(qkv.data(), out.data(), probs.data(), b, t, c, h);
    return weighted_sum(out, r);
  };
  loss();
  CHECK(pd2bw::test::max_rel_diff(out, attention_reference(qkv, b, t, c, h)) < 1e-12);
  for (int64_t row = 0; row < b * h * t; ++row) {
    const int64_t i = row % t;
    double sum = 0;
    for (int64_t j = 0; j < t; ++j) {
      const double p = probs[row * t + j];
      if (j > i) REQUIRE(p == 0.0);
      sum += p;
    }
    REQUIRE(sum == doctest::Approx(1.0).epsilon(1e-12));
  }
  Vec dqkv(qkv.size(), 123.0);  // overwritten, not accumulated
  cpu::attention_backward(r.data(), qkv.data(), probs.data(), dqkv.data(), b, t, c, h);
  PD2BW_CHECK_GRAD(check_gradient(loss, qkv, dqkv));
}

}  // namespace

TEST_CASE("gradient checker: rejects a wrong gradient") {
  Vec x = random_values(6, 7);
  const auto loss = [&] { return x[0] * x[1] + std::sin(x[2]) + x[3] * x[3] * x[4] + x[5]; };
  Vec right = {x[1], x[0], std::cos(x[2]), 2 * x[3] * x[4], x[3] * x[3], 1.0};
  CHECK(check_gradient(loss, x, right).ok());
  Vec wrong = right;
  wrong[3] *= 1.0 + 1e-5;  // a 1e-5 relative error must not pass the 1e-6 tolerance
  const auto report = check_gradient(loss, x, wrong);
  CHECK_FALSE(report.ok());
  CHECK(report.worst_index == 3);
}

TEST_CASE("linear: forward matches the formula and the gradients pass the check") {
  SUBCASE("small shapes (fixed-order loop)") { check_linear(3, 4, 5, true); }
  SUBCASE("larger shapes (Eigen GEMM)") { check_linear(7, 9, 11, true); }
  SUBCASE("no bias") { check_linear(6, 10, 9, false); }
}

TEST_CASE("layernorm: normalises rows and the gradients pass the check") {
  const int64_t n = 4, c = 7;
  Vec x = random_values(n * c, 21, 2.0), gamma = random_values(c, 22), beta = random_values(c, 23);
  for (double& g : gamma) g += 1.0;
  const Vec r = random_values(n * c, 24);
  Vec y(x.size()), mean(n), rstd(n);
  const auto loss = [&] {
    cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), n, c);
    return weighted_sum(y, r);
  };
  loss();
  for (int64_t i = 0; i < n; ++i) {
    double s = 0, sq = 0;
    for (int64_t j = 0; j < c; ++j) s += x[i * c + j];
    for (int64_t j = 0; j < c; ++j) sq += (x[i * c + j] - s / c) * (x[i * c + j] - s / c);
    CHECK(mean[i] == doctest::Approx(s / c).epsilon(1e-14));
    CHECK(rstd[i] == doctest::Approx(1.0 / std::sqrt(sq / c + cpu::kLayerNormEps)).epsilon(1e-14));
    const double xhat0 = (x[i * c] - mean[i]) * rstd[i];
    CHECK(y[i * c] == doctest::Approx(xhat0 * gamma[0] + beta[0]).epsilon(1e-14));
  }
  Vec dx(x.size());
  const Vec dg0 = random_values(c, 25), db0 = random_values(c, 26);
  Vec dg = dg0, db = db0;
  cpu::layernorm_backward(r.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(), dg.data(),
                          db.data(), n, c);
  PD2BW_CHECK_GRAD(check_gradient(loss, x, dx));
  PD2BW_CHECK_GRAD(check_gradient(loss, gamma, delta(dg, dg0)));
  PD2BW_CHECK_GRAD(check_gradient(loss, beta, delta(db, db0)));
}

TEST_CASE("gelu: tanh approximation values and gradient") {
  Vec x = {-3.0, -1.0, -0.2, 0.0, 0.3, 1.0, 2.5};
  Vec y(x.size());
  cpu::gelu_forward(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = std::sqrt(2.0 / std::numbers::pi) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
    CHECK(y[i] == doctest::Approx(0.5 * x[i] * (1 + std::tanh(u))).epsilon(1e-14));
  }
  CHECK(y[5] == doctest::Approx(0.8411919906082768).epsilon(1e-12));  // gelu(1), tanh form
  const Vec r = random_values(static_cast<int64_t>(x.size()), 31);
  const auto loss = [&] {
    cpu::gelu_forward(x.data(), y.data(), static_cast<int64_t>(x.size()));
    return weighted_sum(y, r);
  };
  Vec dx(x.size());
  cpu::gelu_backward(r.data(), x.data(), dx.data(), static_cast<int64_t>(x.size()));
  PD2BW_CHECK_GRAD(check_gradient(loss, x, dx));
}

TEST_CASE("attention: matches the naive formula, is causal, and the gradient passes the check") {
  SUBCASE("B2 T5 C8 H2") { check_attention(2, 5, 8, 2); }
  SUBCASE("B1 T13 C12 H3 (Eigen GEMM for the scores)") { check_attention(1, 13, 12, 3); }
  SUBCASE("one position") { check_attention(2, 1, 4, 1); }
}

TEST_CASE("attention: a later position never changes an earlier output") {
  const int64_t b = 1, t = 6, c = 8, h = 2;
  Vec qkv = random_values(b * t * 3 * c, 41);
  Vec out1(static_cast<size_t>(b * t * c)), out2(out1.size()), probs(static_cast<size_t>(b * h * t * t));
  cpu::attention_forward(qkv.data(), out1.data(), probs.data(), b, t, c, h);
  for (int64_t j = 0; j < 3 * c; ++j) qkv[(t - 1) * 3 * c + j] += 5.0;  // disturb the last position
  cpu::attention_forward(qkv.data(), out2.data(), probs.data(), b, t, c, h);
  for (int64_t i = 0; i < (t - 1) * c; ++i) REQUIRE(out1[i] == out2[i]);
  bool last_changed = false;
  for (int64_t i = (t - 1) * c; i < t * c; ++i) last_changed = last_changed || out1[i] != out2[i];
  CHECK(last_changed);
}

TEST_CASE("embedding: lookup, accumulated table gradients, token range") {
  const int64_t b = 2, t = 4, c = 3, v = 5, tmax = 6;
  const std::vector<int32_t> tokens = {1, 4, 1, 0, 4, 4, 2, 1};  // repeats accumulate
  Vec wte = random_values(v * c, 51), wpe = random_values(tmax * c, 52);
  const Vec r = random_values(b * t * c, 53);
  Vec out(r.size());
  const auto loss = [&] {
    cpu::embedding_forward(tokens.data(), wte.data(), wpe.data(), out.data(), b, t, c, v);
    return weighted_sum(out, r);
  };
  loss();
  CHECK(out[5 * c + 2] == wte[4 * c + 2] + wpe[1 * c + 2]);
  const Vec dte0 = random_values(v * c, 54), dpe0 = random_values(tmax * c, 55);
  Vec dte = dte0, dpe = dpe0;
  cpu::embedding_backward(tokens.data(), r.data(), dte.data(), dpe.data(), b, t, c);
  PD2BW_CHECK_GRAD(check_gradient(loss, wte, delta(dte, dte0)));
  PD2BW_CHECK_GRAD(check_gradient(loss, wpe, delta(dpe, dpe0)));
  const std::vector<int32_t> bad = {0, 1, 5, 2};
  CHECK_THROWS_AS(cpu::embedding_forward(bad.data(), wte.data(), wpe.data(), out.data(), 1, 4, c, v),
                  pd2bw::Error);
}

TEST_CASE("cross-entropy: closed form, scaled gradient, target range, in-place backward") {
  const int64_t n = 5, v = 7;
  SUBCASE("uniform logits give log V") {
    const Vec logits(static_cast<size_t>(n * v), 0.3);
    const std::vector<int32_t> targets = random_ids(n, v, 61);
    Vec lse(n);
    CHECK(cpu::cross_entropy_forward(logits.data(), targets.data(), lse.data(), n, v) ==
          doctest::Approx(std::log(7.0)).epsilon(1e-14));
  }
  Vec logits = random_values(n * v, 62, 3.0);
  const std::vector<int32_t> targets = random_ids(n, v, 63);
  Vec lse(n);
  const double scale = 0.25;  // e.g. a step of four microbatches
  const auto loss = [&] {
    return scale * cpu::cross_entropy_forward(logits.data(), targets.data(), lse.data(), n, v);
  };
  loss();
  Vec dlogits(logits.size());
  cpu::cross_entropy_backward(logits.data(), targets.data(), lse.data(), dlogits.data(), n, v, scale);
  PD2BW_CHECK_GRAD(check_gradient(loss, logits, dlogits));
  loss();  // the check left lse from a perturbed input; restore it
  Vec in_place = logits;
  cpu::cross_entropy_backward(in_place.data(), targets.data(), lse.data(), in_place.data(), n, v, scale);
  CHECK(in_place == dlogits);
  std::vector<int32_t> bad = targets;
  bad[3] = -1;
  CHECK_THROWS_AS(cpu::cross_entropy_forward(logits.data(), bad.data(), lse.data(), n, v), pd2bw::Error);
}

TEST_CASE("add and accumulate") {
  Vec a = {1, 2, 3}, b = {10, 20, 30}, out(3);
  cpu::add(a.data(), b.data(), out.data(), 3);
  CHECK(out == Vec{11, 22, 33});
  cpu::accumulate(a.data(), b.data(), 3);
  CHECK(a == Vec{11, 22, 33});
}

TEST_CASE("float and double forward passes agree (relative 1e-5)") {
  const int64_t n = 6, c = 16, hidden = 24, b = 2, t = 3, h = 4;
  const Vec xd = random_values(n * c, 71), wd = random_values(hidden * c, 72, 0.3),
            bd = random_values(hidden, 73);
  const Vec gd = random_values(c, 74), qd = random_values(n * 3 * c, 75);
  const auto f = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  const std::vector<float> xf = f(xd), wf = f(wd), bf = f(bd), gf = f(gd), qf = f(qd);
  Vec yd(static_cast<size_t>(n * hidden)), ld(xd.size()), md(n), rd(n), ad(xd.size()),
      pd(static_cast<size_t>(b * h * t * t));
  std::vector<float> yf(yd.size()), lf(ld.size()), mf(n), rf(n), af(ad.size()), pf(pd.size());
  cpu::linear_forward(xd.data(), wd.data(), bd.data(), yd.data(), n, c, hidden);
  cpu::linear_forward(xf.data(), wf.data(), bf.data(), yf.data(), n, c, hidden);
  // 3e-5 here: the worst output (0.006) cancels terms of 1.35 in all (bias included), so float's bound
  // (k + 3) u |terms| / |y| is 2.6e-4; the baseline's SSE2 sums land at 3.2e-6, the FMA kernels at 1.2e-5.
  CHECK(pd2bw::test::max_rel_diff(yf, yd) < 3e-5);
  cpu::layernorm_forward(xd.data(), gd.data(), gd.data(), ld.data(), md.data(), rd.data(), n, c);
  cpu::layernorm_forward(xf.data(), gf.data(), gf.data(), lf.data(), mf.data(), rf.data(), n, c);
  CHECK(pd2bw::test::max_rel_diff(lf, ld) < 1e-5);
  cpu::gelu_forward(xd.data(), ld.data(), n * c);
  cpu::gelu_forward(xf.data(), lf.data(), n * c);
  CHECK(pd2bw::test::max_rel_diff(lf, ld) < 1e-5);
  cpu::attention_forward(qd.data(), ad.data(), pd.data(), b, t, c, h);
  cpu::attention_forward(qf.data(), af.data(), pf.data(), b, t, c, h);
  CHECK(pd2bw::test::max_rel_diff(af, ad) < 1e-5);
  const std::vector<int32_t> targets = random_ids(n, static_cast<int32_t>(c), 76);
  Vec lsed(n);
  std::vector<float> lsef(n);
  const double lossd = cpu::cross_entropy_forward(xd.data(), targets.data(), lsed.data(), n, c);
  const double lossf = cpu::cross_entropy_forward(xf.data(), targets.data(), lsef.data(), n, c);
  CHECK(lossf == doctest::Approx(lossd).epsilon(1e-5));
}

TEST_CASE("results do not depend on buffer addresses (bit-identical at another alignment)") {
  // The same data at offset 0 and at offset 1 element: SIMD peeling would change rounding if any
  // reduction depended on alignment.
  for (const auto& [n, in, out] :
       {std::tuple<int64_t, int64_t, int64_t>{3, 4, 5}, {33, 17, 19}, {1, 40, 30}}) {
    const std::vector<float> x = random_values<float>(n * in, 81), w = random_values<float>(out * in, 82);
    const std::vector<float> dy = random_values<float>(n * out, 83);
    std::vector<float> x1(x.size() + 1), w1(w.size() + 1), dy1(dy.size() + 1);
    std::copy(x.begin(), x.end(), x1.begin() + 1);
    std::copy(w.begin(), w.end(), w1.begin() + 1);
    std::copy(dy.begin(), dy.end(), dy1.begin() + 1);
    std::vector<float> y0(static_cast<size_t>(n * out)), y1(y0.size() + 1);
    std::vector<float> dw0(w.size(), 0.f), dw1(w.size() + 1, 0.f), dx0(x.size()), dx1(x.size() + 1);
    cpu::linear_forward<float>(x.data(), w.data(), nullptr, y0.data(), n, in, out);
    cpu::linear_forward<float>(x1.data() + 1, w1.data() + 1, nullptr, y1.data() + 1, n, in, out);
    cpu::linear_backward<float>(dy.data(), x.data(), w.data(), dx0.data(), dw0.data(), nullptr, n, in, out);
    cpu::linear_backward<float>(dy1.data() + 1, x1.data() + 1, w1.data() + 1, dx1.data() + 1, dw1.data() + 1,
                                nullptr, n, in, out);
    CAPTURE(n);
    CHECK(std::equal(y0.begin(), y0.end(), y1.begin() + 1));
    CHECK(std::equal(dx0.begin(), dx0.end(), dx1.begin() + 1));
    CHECK(std::equal(dw0.begin(), dw0.end(), dw1.begin() + 1));
  }
}
