// Shared helpers of the executor tests: seeded test data and a central-difference gradient checker.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "pd2bw/executor/rng.hpp"

namespace pd2bw::test {

// Uniform values in [-scale, scale), reproducible from the seed.
template <typename T = double>
std::vector<T> random_values(int64_t n, uint64_t seed, double scale = 1.0) {
  executor::NormalRng rng(seed);
  std::vector<T> out(static_cast<size_t>(n));
  for (T& x : out) x = static_cast<T>(scale * (2.0 * rng.uniform_open0() - 1.0));
  return out;
}

// Integer ids in [0, limit), reproducible from the seed.
inline std::vector<int32_t> random_ids(int64_t n, int32_t limit, uint64_t seed) {
  uint64_t state = seed;
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& id : out)
    id = static_cast<int32_t>(executor::splitmix64(state) % static_cast<uint64_t>(limit));
  return out;
}

// Sum of out[i] * weights[i] in double: a scalar loss whose gradient w.r.t. out is `weights`.
template <typename T>
double weighted_sum(const std::vector<T>& out, const std::vector<T>& weights) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * static_cast<double>(weights[i]);
  return s;
}

// Tolerances of every gradient check: an entry passes when
// |analytic - numeric| <= kGradRtol * max(|analytic|, |numeric|) + kGradAtol, with numeric the central
// difference (L(x + h) - L(x - h)) / 2h at h = kGradStep, all in double.
inline constexpr double kGradStep = 1e-5;
inline constexpr double kGradRtol = 1e-6;
inline constexpr double kGradAtol = 1e-9;

struct GradReport {
  int64_t checked = 0;
  int64_t failures = 0;
  int64_t worst_index = -1;
  double worst_excess = 0;  // largest |a - n| / (rtol * max(|a|, |n|) + atol); <= 1 passes
  double worst_analytic = 0;
  double worst_numeric = 0;
  bool ok() const { return checked > 0 && failures == 0; }
};

// Compares analytic[i] with the central difference of loss() in x[i] for every i; x is restored.
// x is any buffer loss() reads (a test vector or a layer's own parameters).
inline GradReport check_gradient(const std::function<double()>& loss, std::span<double> x,
                                 std::span<const double> analytic) {
  GradReport r;
  if (analytic.size() != x.size()) return r;  // checked == 0: not ok
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kGradStep;
    const double up = loss();
    x[i] = saved - kGradStep;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * kGradStep);
    const double a = analytic[i];
    const double excess =
        std::abs(a - numeric) / (kGradRtol * std::max(std::abs(a), std::abs(numeric)) + kGradAtol);
    ++r.checked;
    if (excess > 1) ++r.failures;
    if (excess > r.worst_excess) {
      r.worst_excess = excess;
      r.worst_index = static_cast<int64_t>(i);
      r.worst_analytic = a;
      r.worst_numeric = numeric;
    }
  }
  return r;
}

// Largest |a - b| / max(|a|, |b|, floor) over two equally long arrays (converted to double).
template <typename A, typename B>
double max_rel_diff(const std::vector<A>& a, const std::vector<B>& b, double floor = 1e-3) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]);
    const double y = static_cast<double>(b.at(i));
    worst = std::max(worst, std::abs(x - y) / std::max({std::abs(x), std::abs(y), floor}));
  }
  return worst;
}

}  // namespace pd2bw::test

// Prints the worst entry of a gradient report when a check fails.
#define PD2BW_CHECK_GRAD(report)                                                                            \
  do {                                                                                                      \
    const auto& r_ = (report);                                                                              \
    INFO("checked " << r_.checked << ", failures " << r_.failures << ", worst index " << r_.worst_index     \
                    << ": analytic " << r_.worst_analytic << " numeric " << r_.worst_numeric << " (excess " \
                    << r_.worst_excess << ")");                                                             \
    CHECK(r_.ok());                                                                                         \
  } while (0)
