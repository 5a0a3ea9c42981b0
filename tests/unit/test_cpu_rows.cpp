// The cpu backend's row operations at every kernel level this CPU has (executor/src/cpu/rows.hpp): float
// layer norm (forward and backward) and the attention's masked softmax (forward and backward) on odd row
// lengths stay within stated bounds of a long-double reference, repeat themselves bit for bit, and give
// the same bits with every buffer at another address; the SIMD rows stay within a few float ulps of the
// scalar (baseline) ones. Causal attention, which skips the masked triangle above the baseline level,
// gives the bits of the whole products.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "cpu/gemm.hpp"
#include "cpu/rows.hpp"
#include "pd2bw/executor/ops.hpp"

using namespace pd2bw::executor::cpu::detail;

namespace {

constexpr double kU = 0x1p-24;  // float's unit roundoff

std::vector<KernelLevel> levels() {
  std::vector<KernelLevel> out;
  for (KernelLevel l : {KernelLevel::baseline, KernelLevel::avx2, KernelLevel::avx512})
    if (kernel_level_supported(l)) out.push_back(l);
  return out;
}

// Buffers of a call, copied `shift` floats into fresh vectors (other addresses, other alignments).
struct Shifted {
  std::vector<std::vector<float>> bufs;
  int shift;
  Shifted(std::initializer_list<const std::vector<float>*> src, int s) : shift(s) {
    for (const auto* v : src) {
      auto& b = bufs.emplace_back(v->size() + 16, 0.0f);
      std::copy(v->begin(), v->end(), b.begin() + s);
    }
  }
  float* operator[](size_t i) { return bufs[i].data() + shift; }
  std::vector<float> get(size_t i, size_t n) const { return {bufs[i].begin() + shift, bufs[i].begin() + shift + n}; }
};

struct LnCase {
  int64_t n, c;
  std::vector<float> x, gamma, beta, dy, dgamma0, dbeta0;
};

LnCase ln_case(int64_t n, int64_t c, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  LnCase k{n, c, {}, {}, {}, {}, {}, {}};
  auto fill = [&](std::vector<float>& v, int64_t count, float scale, float offset) {
    v.resize(static_cast<size_t>(count));
    for (float& e : v) e = offset + scale * g(rng);
  };
  fill(k.x, n * c, 2.0f, 3.0f);  // a mean well away from zero
  fill(k.gamma, c, 0.5f, 1.0f);
  fill(k.beta, c, 0.3f, 0.0f);
  fill(k.dy, n * c, 1.0f, 0.0f);
  fill(k.dgamma0, c, 1.0f, 0.0f);
  fill(k.dbeta0, c, 1.0f, 0.0f);
  return k;
}

// Outputs of one level's forward and backward: y, mean, rstd, dx, dgamma, dbeta (in that order).
std::vector<std::vector<float>> ln_run(KernelLevel level, const LnCase& k, int shift) {
  const std::vector<float> zeros_nc(static_cast<size_t>(k.n * k.c)), zeros_n(static_cast<size_t>(k.n));
  Shifted s({&k.x, &k.gamma, &k.beta, &k.dy, &k.dgamma0, &k.dbeta0, &zeros_nc, &zeros_n, &zeros_n, &zeros_nc}, shift);
  layernorm_forward_at<float>(level, s[0], s[1], s[2], s[6], s[7], s[8], k.n, k.c);
  layernorm_backward_at<float>(level, s[3], s[0], s[1], s[7], s[8], s[9], s[4], s[5], k.n, k.c);
  const auto nc = static_cast<size_t>(k.n * k.c), n = static_cast<size_t>(k.n), c = static_cast<size_t>(k.c);
  return {s.get(6, nc), s.get(7, n), s.get(8, n), s.get(9, nc), s.get(4, c), s.get(5, c)};
}

bool within(double got, long double ref, double tol) {
  return std::fabs(static_cast<long double>(got) - ref) <= tol;
}

// Forward: mean and rstd are the long-double statistics rounded (within 2 ulps), and y is within
// 8u (|xhat| |gamma| + |mean| rstd |gamma| + |beta|) (the float operations on rounded statistics).
// Backward, from the stored statistics: dx within 8u rstd (|dxhat| + mean|dxhat| + |xhat| mean|dxhat xhat|)
// + 2u|dx|, and dgamma, dbeta (added row after row in float) within (n + 2)u of their sums of magnitudes.
void ln_check(const LnCase& k, const std::vector<std::vector<float>>& o) {
  const auto& [y, mean, rstd, dx, dgamma, dbeta] = std::tie(o[0], o[1], o[2], o[3], o[4], o[5]);
  std::vector<long double> dg(k.dgamma0.begin(), k.dgamma0.end()), db(k.dbeta0.begin(), k.dbeta0.end());
  std::vector<long double> dg_mag(dg.size()), db_mag(db.size());
  for (int64_t i = 0; i < k.n; ++i) {
    const float* x = k.x.data() + i * k.c;
    const float* dy = k.dy.data() + i * k.c;
    long double mu = 0, var = 0;
    for (int64_t j = 0; j < k.c; ++j) mu += x[j];
    mu /= k.c;
    for (int64_t j = 0; j < k.c; ++j) var += (x[j] - mu) * (x[j] - mu);
    const long double rs = 1.0L / std::sqrt(var / k.c + 1e-5L);
    REQUIRE(within(mean[i], mu, 2 * kU * std::fabs(static_cast<double>(mu)) + 1e-30));
    REQUIRE(within(rstd[i], rs, 2 * kU * static_cast<double>(rs)));
    const long double m = mean[i], r = rstd[i];  // backward: from the stored statistics
    long double s1 = 0, s2 = 0, a1 = 0, a2 = 0;
    for (int64_t j = 0; j < k.c; ++j) {
      const long double xh = (x[j] - m) * r, dxh = static_cast<long double>(dy[j]) * k.gamma[j];
      s1 += dxh, s2 += dxh * xh, a1 += std::fabs(dxh), a2 += std::fabs(dxh * xh);
      dg[j] += dy[j] * xh, db[j] += dy[j];
      dg_mag[j] += std::fabs(dy[j] * xh), db_mag[j] += std::fabs(dy[j]);
    }
    for (int64_t j = 0; j < k.c; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      CAPTURE(k.c);
      const long double xr = (x[j] - mu) * rs, g = k.gamma[j];
      const double ytol =
          8 * kU * static_cast<double>(std::fabs(xr * g) + std::fabs(mu * rs * g) + std::fabs(k.beta[j]));
      REQUIRE(within(y[i * k.c + j], xr * g + k.beta[j], ytol));
      const long double xh = (x[j] - m) * r, dxh = static_cast<long double>(dy[j]) * g;
      const long double ref = r * (dxh - s1 / k.c - xh * s2 / k.c);
      const double dtol = static_cast<double>(8 * kU * r * (std::fabs(dxh) + a1 / k.c + std::fabs(xh) * a2 / k.c) +
                                              2 * kU * std::fabs(ref));
      REQUIRE(within(dx[i * k.c + j], ref, dtol));
    }
  }
  for (int64_t j = 0; j < k.c; ++j) {
    const double tol = static_cast<double>(k.n + 2) * kU;
    REQUIRE(within(dgamma[j], dg[j], tol * static_cast<double>(dg_mag[j] + std::fabs(k.dgamma0[j]))));
    REQUIRE(within(dbeta[j], db[j], tol * static_cast<double>(db_mag[j] + std::fabs(k.dbeta0[j]))));
  }
}

}  // namespace

TEST_CASE("every level's float layer norm is close to the reference and repeats itself at any address") {
  std::mt19937 rng(11);
  for (auto [n, c] :
       std::vector<std::pair<int64_t, int64_t>>{{3, 1}, {5, 7}, {4, 8}, {7, 13}, {2, 256}, {3, 259}, {2, 1001}}) {
    const LnCase k = ln_case(n, c, rng);
    std::vector<std::vector<float>> scalar;
    for (KernelLevel level : levels()) {
      CAPTURE(kernel_level_name(level));
      const auto out = ln_run(level, k, 0);
      ln_check(k, out);
      CHECK(ln_run(level, k, 0) == out);
      for (int shift : {1, 3, 5, 8}) CHECK(ln_run(level, k, shift) == out);
      if (level == KernelLevel::baseline) scalar = out;
      // The SIMD rows' statistics and outputs within 2 ulps of the scalar code's.
      for (size_t b = 0; b < out.size(); ++b)
        for (size_t e = 0; e < out[b].size(); ++e) {
          const float s = scalar[b][e], v = out[b][e];
          REQUIRE(std::fabs(s - v) <= 2 * std::fabs(std::nextafter(s, 2 * s) - s) + 1e-30f);
        }
    }
  }
}

namespace {

struct SmCase {
  int64_t t;
  KeyRange keys;
  float scale;
  std::vector<float> scores, dp;
};

SmCase sm_case(int64_t t, KeyRange keys, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 4.0f);
  SmCase k{t, keys, 0.125f, std::vector<float>(static_cast<size_t>(t * t)),
           std::vector<float>(static_cast<size_t>(t * t))};
  for (float& e : k.scores) e = g(rng);
  for (float& e : k.dp) e = g(rng);
  // Far-out scores: exp underflows to subnormals or zero.
  for (int64_t r = 0; r < t; r += 3) k.scores[r * t + r / 2] = -750.0f - static_cast<float>(r);
  return k;
}

// p and the backward's d (from the same level's p): the forward's outputs and the backward's.
std::pair<std::vector<float>, std::vector<float>> sm_run(KernelLevel level, const SmCase& k, int shift) {
  const std::vector<float> junk(k.scores.size(), 7.0f);  // overwritten everywhere, past the keys too
  Shifted s({&k.scores, &junk, &k.dp}, shift);
  masked_softmax_at<float>(level, s[0], s[1], k.t, k.scale, k.keys);
  masked_softmax_backward_at<float>(level, s[1], s[2], k.t, k.scale, k.keys);
  return {s.get(1, k.scores.size()), s.get(2, k.scores.size())};
}

// p within (8 + |a - max a|) u p + 2^-126 of the long-double softmax of the float arguments a = scale *
// score (the float subtraction of the maximum rounds by up to u |a - max a|, exp by an ulp or two; the
// last term covers a subnormal the SIMD rows flush to zero). The backward, from this p, within
// (4u |scale p| + 2^-140) (|d| + sum|p d|) (the last term for products of subnormal p). Past each row's
// keys both are zero.
void sm_check(const SmCase& k, const std::vector<float>& p, const std::vector<float>& d) {
  for (int64_t r = 0; r < k.t; ++r) {
    const int64_t end = k.keys.end(r);
    const float* sr = k.scores.data() + r * k.t;
    float mx = k.scale * sr[0];
    for (int64_t s = 0; s < end; ++s) mx = std::max(mx, k.scale * sr[s]);
    long double sum = 0, dot = 0, dot_mag = 0;
    for (int64_t s = 0; s < end; ++s) sum += std::exp(static_cast<long double>(k.scale * sr[s]) - mx);
    for (int64_t s = 0; s < end; ++s) {
      const long double pv = p[r * k.t + s], dv = k.dp[r * k.t + s];
      dot += pv * dv, dot_mag += std::fabs(pv * dv);
    }
    for (int64_t s = 0; s < k.t; ++s) {
      CAPTURE(r);
      CAPTURE(s);
      CAPTURE(k.t);
      CAPTURE(end);
      const size_t e = static_cast<size_t>(r * k.t + s);
      if (s >= end) {
        REQUIRE(p[e] == 0.0f);
        REQUIRE(d[e] == 0.0f);
        continue;
      }
      const long double arg = static_cast<long double>(k.scale * sr[s]) - mx;
      const long double ref = std::exp(arg) / sum;
      REQUIRE(within(p[e], ref, static_cast<double>((8 - arg) * kU * ref) + 0x1p-126));
      const long double dref = k.scale * static_cast<long double>(p[e]) * (k.dp[e] - dot);
      const long double dmag = std::fabs(k.dp[e]) + dot_mag;
      REQUIRE(within(d[e], dref, static_cast<double>((4 * kU * std::fabs(k.scale * p[e]) + 0x1p-140L) * dmag)));
    }
  }
}

}  // namespace

TEST_CASE("every level's attention softmax is close to the reference and repeats itself at any address") {
  std::mt19937 rng(5);
  std::vector<SmCase> cases;
  for (int64_t t : {1, 7, 8, 9, 17, 33, 130}) cases.push_back(sm_case(t, KeyRange{true, t}, rng));
  for (auto [t, len] : std::vector<std::pair<int64_t, int64_t>>{{9, 9}, {13, 5}, {40, 37}, {130, 1}, {130, 123}})
    cases.push_back(sm_case(t, KeyRange{false, len}, rng));
  for (const SmCase& k : cases) {
    std::pair<std::vector<float>, std::vector<float>> scalar;
    for (KernelLevel level : levels()) {
      CAPTURE(kernel_level_name(level));
      CAPTURE(k.t);
      CAPTURE(k.keys.causal);
      CAPTURE(k.keys.length);
      const auto out = sm_run(level, k, 0);
      sm_check(k, out.first, out.second);
      CHECK(sm_run(level, k, 0) == out);
      for (int shift : {1, 3, 5, 8}) CHECK(sm_run(level, k, shift) == out);
      if (level == KernelLevel::baseline) scalar = out;
      // The SIMD probabilities within 4 ulps of the scalar ones (or both subnormal or zero).
      for (size_t e = 0; e < out.first.size(); ++e) {
        const float a = scalar.first[e], b = out.first[e];
        REQUIRE(std::fabs(a - b) <= 4 * (std::nextafter(a, 2.0f) - a) + 0x1p-126f);
      }
    }
  }
}

namespace {

// The causal attention of one head written with whole products (detail::gemm over all t keys or
// queries) and the level's softmax rows: what attention_forward and attention_backward compute without
// skipping the masked triangle.
template <typename T>
void full_products(const std::vector<T>& qkv, const std::vector<T>& dout, int64_t b, int64_t t, int64_t c, int64_t h,
                   std::vector<T>& out, std::vector<T>& probs, std::vector<T>& dqkv) {
  const int64_t hd = c / h;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const KernelLevel level = kernel_level();
  std::vector<T> s(static_cast<size_t>(t * t));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi) {
      const T* q = qkv.data() + bi * t * 3 * c + hi * hd;
      T* p = probs.data() + (bi * h + hi) * t * t;
      T* dq = dqkv.data() + bi * t * 3 * c + hi * hd;
      const T* dout_h = dout.data() + bi * t * c + hi * hd;
      gemm(false, true, t, t, hd, q, 3 * c, q + c, 3 * c, s.data(), t, false);
      masked_softmax_at(level, s.data(), p, t, scale, KeyRange{true, t});
      gemm(false, false, t, hd, t, p, t, q + 2 * c, 3 * c, out.data() + bi * t * c + hi * hd, c, false);
      gemm(false, true, t, t, hd, dout_h, c, q + 2 * c, 3 * c, s.data(), t, false);
      gemm(true, false, t, hd, t, p, t, dout_h, c, dq + 2 * c, 3 * c, false);
      masked_softmax_backward_at(level, p, s.data(), t, scale, KeyRange{true, t});
      gemm(false, false, t, hd, t, s.data(), t, q + c, 3 * c, dq, 3 * c, false);
      gemm(true, false, t, hd, t, s.data(), t, q, 3 * c, dq + c, 3 * c, false);
    }
}

template <typename T>
void check_triangle() {
  std::mt19937 rng(9);
  std::normal_distribution<double> g(0.0, 1.0);
  // t across several 32-key chunks with a partial last one; t = 1 and 33 at the edges.
  for (auto [b, t, c, h] :
       std::vector<std::array<int64_t, 4>>{{2, 70, 32, 2}, {1, 33, 16, 1}, {1, 1, 8, 2}, {1, 128, 64, 1}}) {
    CAPTURE(t);
    std::vector<T> qkv(static_cast<size_t>(b * t * 3 * c)), dout(static_cast<size_t>(b * t * c));
    for (T& x : qkv) x = static_cast<T>(g(rng));
    for (T& x : dout) x = static_cast<T>(g(rng));
    std::vector<T> out(dout.size()), probs(static_cast<size_t>(b * h * t * t)), dqkv(qkv.size());
    std::vector<T> out_ref(out.size()), probs_ref(probs.size()), dqkv_ref(dqkv.size());
    pd2bw::executor::cpu::attention_forward<T>(qkv.data(), out.data(), probs.data(), b, t, c, h, true);
    pd2bw::executor::cpu::attention_backward<T>(dout.data(), qkv.data(), probs.data(), dqkv.data(), b, t, c, h, true);
    full_products<T>(qkv, dout, b, t, c, h, out_ref, probs_ref, dqkv_ref);
    CHECK(probs == probs_ref);
    CHECK(out == out_ref);
    CHECK(dqkv == dqkv_ref);
  }
}

}  // namespace

TEST_CASE("causal attention that skips the masked triangle gives the bits of the whole products") {
  check_triangle<float>();
  check_triangle<double>();
}
