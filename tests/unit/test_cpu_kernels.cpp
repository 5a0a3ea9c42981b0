// The cpu backend's kernel levels (executor/src/cpu/kernel_level.hpp): every level this CPU has computes
// each GEMM shape (the small ones the dispatcher sends to its loop included) within a stated tolerance
// of a long-double reference and of the baseline, repeats itself bit for bit at other buffer
// addresses, and the avx2 and avx512 levels agree bit for bit; a bias added with the product gives the
// bits of a separate pass; the SIMD tanh GELU stays within a few float ulps of the double formula, its
// bits do not depend on an element's position, and its 16-lane avx512 form gives the 8-lane avx2 bits.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "cpu/gelu_simd.hpp"
#include "cpu/gemm.hpp"
#include "pd2bw/executor/ops.hpp"

using namespace pd2bw::executor::cpu;
using detail::KernelLevel;

namespace {

struct Shape {
  bool ta, tb;
  int64_t m, n, k;
  bool accumulate;
};

// A product's operands and output with padded rows, placed `shift` elements into their buffers.
template <typename T>
struct Problem {
  Shape s;
  int64_t lda, ldb, ldc;
  std::vector<T> a, b, c0;

  Problem(Shape shape, std::mt19937& rng) : s(shape) {
    lda = (s.ta ? s.m : s.k) + 3;
    ldb = (s.tb ? s.k : s.n) + 1;
    ldc = s.n + 2;
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    auto fill = [&](std::vector<T>& v, int64_t count) {
      v.resize(static_cast<size_t>(count));
      for (T& x : v) x = static_cast<T>(u(rng));
    };
    fill(a, (s.ta ? s.k : s.m) * lda);
    fill(b, (s.tb ? s.n : s.k) * ldb);
    fill(c0, s.m * ldc);
  }
  T av(int64_t i, int64_t p) const { return s.ta ? a[p * lda + i] : a[i * lda + p]; }
  T bv(int64_t p, int64_t j) const { return s.tb ? b[j * ldb + p] : b[p * ldb + j]; }

  // C as gemm_at leaves it, computed from copies placed `shift` elements into fresh buffers (with a bias
  // of n values when one is given).
  std::vector<T> run(KernelLevel level, int shift, const std::vector<T>* bias = nullptr) const {
    std::vector<T> as(a.size() + 16), bs(b.size() + 16), cs(c0.size() + 16), biases(static_cast<size_t>(s.n) + 16);
    std::copy(a.begin(), a.end(), as.begin() + shift);
    std::copy(b.begin(), b.end(), bs.begin() + shift);
    std::copy(c0.begin(), c0.end(), cs.begin() + shift);
    if (bias != nullptr) std::copy(bias->begin(), bias->end(), biases.begin() + shift);
    detail::gemm_at<T>(level, s.ta, s.tb, s.m, s.n, s.k, as.data() + shift, lda, bs.data() + shift, ldb,
                       cs.data() + shift, ldc, s.accumulate, bias != nullptr ? biases.data() + shift : nullptr);
    return {cs.begin() + shift, cs.begin() + shift + static_cast<int64_t>(c0.size())};
  }
};

std::vector<KernelLevel> available_levels() {
  std::vector<KernelLevel> out;
  for (KernelLevel l : {KernelLevel::baseline, KernelLevel::avx2, KernelLevel::avx512})
    if (detail::kernel_level_supported(l)) out.push_back(l);
  return out;
}

std::vector<Shape> shapes(std::mt19937& rng) {
  // The small and thin shapes the dispatcher routes to its loop, edge tiles on every side, several
  // depth blocks (k > 256) and column blocks (n > 1024), operands far-strided enough to be packed
  // whole (lda, ldb >= 1 KiB, 4 KiB), and random ones.
  std::vector<Shape> out = {
      {false, false, 1, 5, 7, false},    {false, true, 9, 1, 4, true},        {true, false, 3, 4, 5, false},
      {true, true, 7, 9, 6, true},       {false, false, 2, 2, 300, false},    {false, true, 13, 33, 1, false},
      {false, false, 12, 32, 8, true},   {true, true, 25, 47, 513, false},    {false, true, 128, 128, 64, false},
      {true, false, 129, 65, 257, true}, {false, false, 37, 1100, 19, false}, {true, false, 300, 40, 70, true}};
  std::uniform_int_distribution<int64_t> dim(1, 140);
  for (int i = 0; i < 24; ++i) out.push_back({(i & 1) != 0, (i & 2) != 0, dim(rng), dim(rng), dim(rng), (i & 4) != 0});
  return out;
}

// |c - ref| <= (k + 2) u (sum_p |a b| + |c0|) per element (u: the unit roundoff; each term passes
// through at most k + 1 roundings, an FMA's one or a product's and a sum's), the reference in long double.
template <typename T>
void check_close(const Problem<T>& pr, const std::vector<T>& c) {
  const Shape& s = pr.s;
  const double tol = static_cast<double>(s.k + 2) * std::numeric_limits<T>::epsilon() / 2;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      long double ref = s.accumulate ? pr.c0[i * pr.ldc + j] : 0.0L;
      long double mag = s.accumulate ? std::fabs(static_cast<long double>(pr.c0[i * pr.ldc + j])) : 0.0L;
      for (int64_t p = 0; p < s.k; ++p) {
        ref += static_cast<long double>(pr.av(i, p)) * pr.bv(p, j);
        mag += std::fabs(static_cast<long double>(pr.av(i, p)) * pr.bv(p, j));
      }
      const double err = static_cast<double>(std::fabs(c[i * pr.ldc + j] - ref));
      if (err > tol * static_cast<double>(mag) + 1e-300) {
        FAIL_CHECK("(" << i << ", " << j << ") of " << s.m << "x" << s.n << "x" << s.k << " ta " << s.ta << " tb "
                       << s.tb << ": " << c[i * pr.ldc + j] << " vs " << static_cast<double>(ref));
        return;
      }
    }
    // Padding past each row's n columns is never written.
    for (int64_t j = s.n; j < pr.ldc; ++j) REQUIRE(c[i * pr.ldc + j] == pr.c0[i * pr.ldc + j]);
  }
}

template <typename T>
void check_levels() {
  std::mt19937 rng(7);
  for (const Shape& s : shapes(rng)) {
    const Problem<T> pr(s, rng);
    const std::vector<T> base = pr.run(KernelLevel::baseline, 0);
    check_close(pr, base);
    std::vector<T> first_simd;
    for (KernelLevel level : available_levels()) {
      CAPTURE(detail::kernel_level_name(level));
      const std::vector<T> c = pr.run(level, 0);
      check_close(pr, c);
      // The same bits again, and with every buffer at another address.
      CHECK(pr.run(level, 0) == c);
      for (int shift : {1, 3, 8, 15}) CHECK(pr.run(level, shift) == c);
      if (level == KernelLevel::baseline) continue;
      if (first_simd.empty()) first_simd = c;
      CHECK(c == first_simd);  // avx2 and avx512 sum each element in the same order
    }
  }
}

// With a bias, every level gives the bits of the product followed by a separate pass adding the bias.
template <typename T>
void check_bias() {
  std::mt19937 rng(8);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<Shape> all = shapes(rng);
  all.push_back({false, true, 5, 7, 0, false});  // no depth: C = bias
  all.push_back({true, false, 6, 9, 0, true});   // C += bias
  for (const Shape& s : all) {
    const Problem<T> pr(s, rng);
    std::vector<T> bias(static_cast<size_t>(s.n));
    for (T& x : bias) x = static_cast<T>(u(rng));
    for (KernelLevel level : available_levels()) {
      CAPTURE(detail::kernel_level_name(level));
      CAPTURE(s.m);
      CAPTURE(s.n);
      std::vector<T> want = pr.run(level, 0);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) want[i * pr.ldc + j] += bias[j];
      CHECK(pr.run(level, 0, &bias) == want);
      CHECK(pr.run(level, 5, &bias) == want);
    }
  }
}

}  // namespace

TEST_CASE("every kernel level's GEMM is close to the reference and repeats itself at any address") {
  check_levels<float>();
  check_levels<double>();
}

TEST_CASE("a GEMM's bias gives the bits of a separate pass at every level") {
  check_bias<float>();
  check_bias<double>();
}

TEST_CASE("the process's level is one this CPU has, and the best is taken by default") {
  if (std::getenv("PD2BW_CPU_KERNELS") == nullptr) CHECK(detail::kernel_level() == detail::best_kernel_level());
  CHECK(detail::kernel_level_supported(detail::kernel_level()));
  CHECK(detail::kernel_level_supported(KernelLevel::baseline));
}

TEST_CASE("the SIMD tanh GELU is within a few ulps of the formula in double and position-independent") {
  if (!detail::kernel_level_supported(KernelLevel::avx2)) return;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-9.0f, 9.0f);
  const int64_t n = 1003;  // not a multiple of the vector width: the tail runs through the scratch lanes
  std::vector<float> x(n + 1), dy(n + 1), y(n + 1), dx(n + 1);
  for (int64_t i = 0; i <= n; ++i) x[i] = u(rng), dy[i] = u(rng);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-20f, x[3] = -60.0f, x[4] = 60.0f;
  std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), yd(n + 1), dxd(n + 1);
  gelu_forward<double>(xd.data(), yd.data(), n);
  gelu_backward<double>(dyd.data(), xd.data(), dxd.data(), n);
  detail::gelu_tanh_forward_avx2(x.data(), y.data(), n);
  detail::gelu_tanh_backward_avx2(dy.data(), x.data(), dx.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(x[i]);
    // Relative 2e-6 of the value plus 2e-7 of |x| (the rounding of u = 0.8 (x + 0.045 x^3) in float).
    CHECK(std::fabs(y[i] - yd[i]) <= 2e-6 * std::fabs(yd[i]) + 2e-7 * std::fabs(xd[i]) + 1e-30);
    CHECK(std::fabs(dx[i] - dxd[i]) <= 4e-6 * std::fabs(dyd[i]) * (1.0 + std::fabs(xd[i])));
  }
  // Shifted by one element (other lanes, other addresses, another tail): the same bits.
  std::vector<float> y1(n), dx1(n);
  detail::gelu_tanh_forward_avx2(x.data() + 1, y1.data(), n - 1);
  detail::gelu_tanh_backward_avx2(dy.data() + 1, x.data() + 1, dx1.data(), n - 1);
  for (int64_t i = 1; i < n; ++i) {
    REQUIRE(y1[i - 1] == y[i]);
    REQUIRE(dx1[i - 1] == dx[i]);
  }
  // The avx512 level's 16 lanes (tails masked) give the avx2 bits, at every length up to 40 and offset.
  if (detail::kernel_level_supported(KernelLevel::avx512)) {
    std::vector<float> y16(n), dx16(n);
    detail::gelu_tanh_forward_avx512(x.data(), y16.data(), n);
    detail::gelu_tanh_backward_avx512(dy.data(), x.data(), dx16.data(), n);
    CHECK(y16 == std::vector<float>(y.begin(), y.begin() + n));
    CHECK(dx16 == std::vector<float>(dx.begin(), dx.begin() + n));
    for (int64_t len = 0; len <= 40; ++len) {
      std::vector<float> a(static_cast<size_t>(len) + 1, -1.0f), b(static_cast<size_t>(len) + 1, -1.0f);
      detail::gelu_tanh_forward_avx512(x.data() + len, a.data(), len);
      detail::gelu_tanh_backward_avx512(dy.data() + len, x.data() + len, b.data(), len);
      REQUIRE(a[static_cast<size_t>(len)] == -1.0f);  // nothing written past n
      REQUIRE(b[static_cast<size_t>(len)] == -1.0f);
      for (int64_t i = 0; i < len; ++i) {
        REQUIRE(a[static_cast<size_t>(i)] == y[static_cast<size_t>(len + i)]);
        REQUIRE(b[static_cast<size_t>(i)] == dx[static_cast<size_t>(len + i)]);
      }
    }
  }
  // Non-finite inputs stay non-finite.
  const float odd[3] = {NAN, INFINITY, -INFINITY};
  float out[3];
  detail::gelu_tanh_forward_avx2(odd, out, 3);
  CHECK(std::isnan(out[0]));
  CHECK(out[1] == INFINITY);
}
