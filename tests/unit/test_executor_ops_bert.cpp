// Tests of the CPU ops BERT added, in double against naive references written here from the formulas and
// against central finite differences (tolerances in executor_test_util.hpp): attention under a key
// padding mask (lengths of 1, of T and between) and the causal path, padding independence, bad lengths;
// the exact (erf) GELU; the token-type embedding; cross-entropy with ignored targets. The masked attention
// and the erf GELU through the Backend interface are tested in test_executor_ops_bert_backend.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "executor_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/data.hpp"
#include "pd2bw/executor/ops.hpp"

namespace ex = pd2bw::executor;
namespace cpu = pd2bw::executor::cpu;
using pd2bw::test::check_gradient;
using pd2bw::test::GradReport;
using pd2bw::test::random_values;
using pd2bw::test::weighted_sum;
using Vec = std::vector<double>;
using Ids = std::vector<int32_t>;

namespace {

constexpr int64_t kB = 3, kT = 6, kC = 8, kH = 2, kHd = kC / kH;
constexpr int64_t kQkv = kB * kT * 3 * kC, kOut = kB * kT * kC, kProbs = kB * kH * kT * kT;
const Ids kLengths = {kT, 1, 4};  // a full sequence, a single token, a padded one

// Index of element d of head hi in part (0 q, 1 k, 2 v) of token pos of sequence bi in a (B, T, 3C) qkv.
int64_t qkv_index(int64_t bi, int64_t pos, int64_t part, int64_t hi, int64_t d) {
  return (bi * kT + pos) * 3 * kC + part * kC + hi * kHd + d;
}

struct AttnRef {
  Vec out, probs;
};

// Naive attention from the formula: query r of sequence bi weighs key s by softmax over the visible keys
// (causal: s <= r; else s < lengths[bi], every key without lengths) of q.k / sqrt(hd).
AttnRef attention_ref(const Vec& qkv, bool causal, const int32_t* lengths) {
  AttnRef r{Vec(kOut, 0.0), Vec(kProbs, 0.0)};
  for (int64_t bi = 0; bi < kB; ++bi) {
    for (int64_t hi = 0; hi < kH; ++hi) {
      for (int64_t i = 0; i < kT; ++i) {
        const int64_t end = causal ? i + 1 : (lengths == nullptr ? kT : lengths[bi]);
        Vec e(static_cast<size_t>(end));
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j < end; ++j) {
          double s = 0;
          for (int64_t d = 0; d < kHd; ++d) s += qkv[qkv_index(bi, i, 0, hi, d)] * qkv[qkv_index(bi, j, 1, hi, d)];
          e[j] = s / std::sqrt(static_cast<double>(kHd));
          mx = std::max(mx, e[j]);
        }
        for (double& x : e) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < end; ++j) r.probs[((bi * kH + hi) * kT + i) * kT + j] = e[j] / sum;
        for (int64_t d = 0; d < kHd; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < end; ++j) acc += e[j] / sum * qkv[qkv_index(bi, j, 2, hi, d)];
          r.out[(bi * kT + i) * kC + hi * kHd + d] = acc;
        }
      }
    }
  }
  return r;
}

double max_abs_diff(const Vec& a, const Vec& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b.at(i)));
  return worst;
}

struct AttnCase {
  Vec qkv = random_values(kQkv, 101, 1.5);
  const Vec w = random_values(kOut, 102);  // loss = sum(out * w), so dout = w
  Vec out = Vec(kOut), probs = Vec(kProbs);
  double loss(bool causal, const int32_t* lengths) {
    cpu::attention_forward(qkv.data(), out.data(), probs.data(), kB, kT, kC, kH, causal, lengths);
    return weighted_sum(out, w);
  }
  Vec backward(bool causal, const int32_t* lengths) {
    Vec dqkv(kQkv, 123.0);  // overwritten, not accumulated
    cpu::attention_backward(w.data(), qkv.data(), probs.data(), dqkv.data(), kB, kT, kC, kH, causal, lengths);
    return dqkv;
  }
};

}  // namespace

TEST_CASE("masked attention: forward and probabilities match the naive reference for lengths T, 1 and 4") {
  AttnCase a;
  a.loss(false, kLengths.data());
  const AttnRef ref = attention_ref(a.qkv, false, kLengths.data());
  CHECK(pd2bw::test::max_rel_diff(a.out, ref.out) < 1e-12);
  CHECK(max_abs_diff(a.probs, ref.probs) < 1e-14);
  for (int64_t row = 0; row < kB * kH * kT; ++row) {
    const int64_t len = kLengths[row / (kH * kT)];
    double sum = 0;
    for (int64_t j = 0; j < kT; ++j) {
      if (j >= len) REQUIRE(a.probs[row * kT + j] == 0.0);  // masked entries are written as 0
      sum += a.probs[row * kT + j];
    }
    REQUIRE(sum == doctest::Approx(1.0).epsilon(1e-13));
  }
  // Without lengths every query sees all T keys: the same as lengths of T, bit for bit.
  const Ids full(kB, static_cast<int32_t>(kT));
  a.loss(false, full.data());
  const Vec with_full = a.out;
  a.loss(false, nullptr);
  CHECK(a.out == with_full);
  CHECK(pd2bw::test::max_rel_diff(a.out, attention_ref(a.qkv, false, nullptr).out) < 1e-12);
}

TEST_CASE("masked attention: q, k and v gradients pass the check; padded keys and values get exactly 0") {
  AttnCase a;
  const auto loss = [&] { return a.loss(false, kLengths.data()); };
  loss();
  const Vec dqkv = a.backward(false, kLengths.data());
  // Every entry of q, k and v (the worst one's part named on failure: 0 q, 1 k, 2 v).
  const GradReport report = check_gradient(loss, a.qkv, dqkv);
  INFO("worst entry in part " << report.worst_index % (3 * kC) / kC);
  PD2BW_CHECK_GRAD(report);
  for (int64_t bi = 0; bi < kB; ++bi)
    for (int64_t pos = kLengths[bi]; pos < kT; ++pos)
      for (int64_t part = 1; part < 3; ++part)
        for (int64_t e = 0; e < kC; ++e) REQUIRE(dqkv[qkv_index(bi, pos, part, 0, e)] == 0.0);
}

TEST_CASE("causal attention (causal = true) is the previous behaviour: the naive causal reference and its gradient") {
  AttnCase a;
  const auto loss = [&] { return a.loss(true, nullptr); };
  loss();
  CHECK(pd2bw::test::max_rel_diff(a.out, attention_ref(a.qkv, true, nullptr).out) < 1e-12);
  CHECK(max_abs_diff(a.probs, attention_ref(a.qkv, true, nullptr).probs) < 1e-14);
  const Vec explicit_out = a.out, dqkv = a.backward(true, nullptr);
  // The default arguments are the causal mask.
  Vec out(kOut), probs(kProbs), dqkv_default(kQkv);
  cpu::attention_forward(a.qkv.data(), out.data(), probs.data(), kB, kT, kC, kH);
  cpu::attention_backward(a.w.data(), a.qkv.data(), probs.data(), dqkv_default.data(), kB, kT, kC, kH);
  CHECK(out == explicit_out);
  CHECK(dqkv_default == dqkv);
  PD2BW_CHECK_GRAD(check_gradient(loss, a.qkv, dqkv));
}

TEST_CASE("masked attention: outputs depend on keys and values only at positions < length") {
  AttnCase a;
  a.loss(false, kLengths.data());
  const Vec out0 = a.out, dqkv0 = a.backward(false, kLengths.data());
  SUBCASE("keys and values past the length change nothing, forward or backward") {
    for (int64_t bi = 0; bi < kB; ++bi)
      for (int64_t pos = kLengths[bi]; pos < kT; ++pos)
        for (int64_t e = 0; e < 2 * kC; ++e) a.qkv[qkv_index(bi, pos, 1, 0, e)] += 3.0 + static_cast<double>(e);
    a.loss(false, kLengths.data());
    CHECK(a.out == out0);
    CHECK(a.backward(false, kLengths.data()) == dqkv0);
  }
  SUBCASE("a query past the length changes only its own row") {
    a.qkv[qkv_index(2, 5, 0, 0, 1)] += 2.0;  // sequence 2 has length 4: query 5 is padding
    a.loss(false, kLengths.data());
    for (int64_t i = 0; i < kOut; ++i) {
      const bool own_row = i / kC == 2 * kT + 5 && i % kC < kHd;  // head 0 of that row
      if (own_row) continue;
      REQUIRE(a.out[i] == out0[i]);
    }
    CHECK(a.out != out0);
  }
  SUBCASE("a key inside the length does change the outputs (the comparisons above can fail)") {
    a.qkv[qkv_index(2, 3, 1, 0, 0)] += 1.0;
    a.loss(false, kLengths.data());
    CHECK(a.out != out0);
  }
}

TEST_CASE("attention: a length outside [1, T] throws pd2bw::Error, forward and backward") {
  AttnCase a;
  a.loss(false, kLengths.data());
  for (const int32_t bad : {0, -1, static_cast<int32_t>(kT + 1)}) {
    CAPTURE(bad);
    const Ids lengths = {static_cast<int32_t>(kT), bad, 2};
    Vec dqkv(kQkv);
    CHECK_THROWS_AS(
        cpu::attention_forward(a.qkv.data(), a.out.data(), a.probs.data(), kB, kT, kC, kH, false, lengths.data()),
        pd2bw::Error);
    CHECK_THROWS_AS(cpu::attention_backward(a.w.data(), a.qkv.data(), a.probs.data(), dqkv.data(), kB, kT, kC, kH,
                                            false, lengths.data()),
                    pd2bw::Error);
  }
}

TEST_CASE("erf GELU: known values, x Phi(x) from erfc, and the derivative by finite differences") {
  const Vec known_x = {1.0, -1.0, 0.0};
  Vec known_y(3);
  cpu::gelu_erf_forward(known_x.data(), known_y.data(), 3);
  CHECK(known_y[0] == doctest::Approx(0.8413447460685429).epsilon(1e-15));
  CHECK(known_y[1] == doctest::Approx(-0.15865525393145707).epsilon(1e-15));
  CHECK(known_y[2] == 0.0);
  const int64_t n = 40;
  Vec x = random_values(n, 111, 4.0);
  x[0] = -9.0;
  x[1] = 9.0;
  Vec y(n);
  cpu::gelu_erf_forward(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double ref = x[i] * 0.5 * std::erfc(-x[i] / std::sqrt(2.0));  // x Phi(x), no cancellation for x < 0
    // 1 + erf(x / sqrt 2) cancels for x << 0: an absolute 1e-15 covers it (GELU(-9) is -1e-18, computed 0).
    REQUIRE(std::abs(y[i] - ref) <= 1e-14 * std::abs(ref) + 1e-15);
  }
  const Vec dy = random_values(n, 112);
  const auto loss = [&] {
    cpu::gelu_erf_forward(x.data(), y.data(), n);
    return weighted_sum(y, dy);
  };
  Vec dx(n, 123.0);
  cpu::gelu_erf_backward(dy.data(), x.data(), dx.data(), n);
  PD2BW_CHECK_GRAD(check_gradient(loss, x, dx));
  Vec in_place = dy;  // dx may alias dy
  cpu::gelu_erf_backward(in_place.data(), x.data(), in_place.data(), n);
  CHECK(in_place == dx);
}

TEST_CASE("type embedding: forward adds the type's row, backward gathers by type; a type out of range throws") {
  const int64_t n = 5, c = 3, r = 2;
  const Ids types = {0, 1, 1, 0, 1};
  Vec table = random_values(r * c, 121);
  const Vec base = random_values(n * c, 122), w = random_values(n * c, 123);
  Vec out(n * c);
  const auto loss = [&] {
    out = base;  // forward accumulates into out
    cpu::type_embedding_forward(types.data(), table.data(), out.data(), n, c, r);
    return weighted_sum(out, w);
  };
  loss();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) REQUIRE(out[i * c + j] == base[i * c + j] + table[types[i] * c + j]);
  const Vec before = random_values(r * c, 124);
  Vec dtable = before;
  cpu::type_embedding_backward(types.data(), w.data(), dtable.data(), n, c);
  Vec added(r * c), want(r * c, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) want[types[i] * c + j] += w[i * c + j];
  for (int64_t i = 0; i < r * c; ++i) added[i] = dtable[i] - before[i];
  CHECK(max_abs_diff(added, want) < 1e-14);
  PD2BW_CHECK_GRAD(check_gradient(loss, table, added));
  for (const int32_t bad : {2, -1}) {
    CAPTURE(bad);
    const Ids wrong = {0, 1, bad, 0, 1};
    CHECK_THROWS_AS(cpu::type_embedding_forward(wrong.data(), table.data(), out.data(), n, c, r), pd2bw::Error);
  }
}

TEST_CASE("cross-entropy with ignored targets: mean over counted rows, exact zero rows, gradient of scale * loss") {
  const int64_t n = 6, v = 7;
  const int32_t ign = ex::kIgnoreTarget;
  const Ids targets = {3, ign, 0, 6, ign, 2};
  Vec logits = random_values(n * v, 131, 3.0), lse(n);
  const double loss = cpu::cross_entropy_forward(logits.data(), targets.data(), lse.data(), n, v);
  double total = 0;
  int counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(logits[i * v + j]);
    CHECK(lse[i] == doctest::Approx(std::log(sum)).epsilon(1e-14));  // every row, counted or not
    if (targets[i] == ign) continue;
    total += std::log(sum) - logits[i * v + targets[i]];
    ++counted;
  }
  CHECK(loss == doctest::Approx(total / counted).epsilon(1e-14));
  const double scale = 0.37;
  Vec dlogits(n * v, 123.0);
  cpu::cross_entropy_backward(logits.data(), targets.data(), lse.data(), dlogits.data(), n, v, scale);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < v && targets[i] == ign; ++j) REQUIRE(dlogits[i * v + j] == 0.0);
  const auto scaled = [&] {
    return scale * cpu::cross_entropy_forward(logits.data(), targets.data(), lse.data(), n, v);
  };
  PD2BW_CHECK_GRAD(check_gradient(scaled, logits, dlogits));
  Vec in_place = logits;  // dlogits may alias logits
  cpu::cross_entropy_forward(logits.data(), targets.data(), lse.data(), n, v);
  cpu::cross_entropy_backward(in_place.data(), targets.data(), lse.data(), in_place.data(), n, v, scale);
  CHECK(in_place == dlogits);
}

TEST_CASE("cross-entropy: all rows ignored gives loss 0 and a zero gradient; a target of -5 or V still throws") {
  const int64_t n = 3, v = 4;
  const Vec logits = random_values(n * v, 141);
  Vec lse(n, 9.0), dlogits(n * v, 123.0);
  const Ids none(n, ex::kIgnoreTarget);
  CHECK(cpu::cross_entropy_forward(logits.data(), none.data(), lse.data(), n, v) == 0.0);
  cpu::cross_entropy_backward(logits.data(), none.data(), lse.data(), dlogits.data(), n, v, 1.0);
  CHECK(dlogits == Vec(n * v, 0.0));
  for (const int32_t bad : {-5, -1, static_cast<int32_t>(v)}) {
    CAPTURE(bad);
    const Ids targets = {1, ex::kIgnoreTarget, bad};
    CHECK_THROWS_AS(cpu::cross_entropy_forward(logits.data(), targets.data(), lse.data(), n, v), pd2bw::Error);
  }
}
