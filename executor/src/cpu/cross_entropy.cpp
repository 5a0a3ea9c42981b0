// CPU softmax cross-entropy: mean loss over the counted rows (returned in double) and scaled logit
// gradients; rows whose target is kIgnoreTarget count for nothing.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/data.hpp"
#include "pd2bw/executor/ops.hpp"

namespace pd2bw::executor::cpu {
namespace {
int64_t counted_rows(const int32_t* targets, int64_t n) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) k += targets[i] != kIgnoreTarget ? 1 : 0;
  return k;
}
}  // namespace

template <typename T>
double cross_entropy_forward(const T* logits, const int32_t* targets, T* lse, int64_t n, int64_t v) {
  double total = 0;
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t tgt = targets[i];
    const bool ignored = tgt == kIgnoreTarget;
    if (!ignored && (tgt < 0 || tgt >= v)) {
      throw Error(fmt::format("cross_entropy: target {} in row {} is outside [0, {})", tgt, i, v),
                  "check that the data set was tokenised with the model's vocabulary");
    }
    const T* row = logits + i * v;
    T mx = row[0];
    for (int64_t j = 1; j < v; ++j) mx = std::max(mx, row[j]);
    double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
    lse[i] = static_cast<T>(static_cast<double>(mx) + std::log(sum));
    if (ignored) continue;
    total += static_cast<double>(lse[i]) - static_cast<double>(row[tgt]);
    ++counted;
  }
  return counted == 0 ? 0.0 : total / static_cast<double>(counted);
}

template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, T* dlogits, int64_t n,
                            int64_t v, double loss_scale) {
  const int64_t counted = counted_rows(targets, n);
  const double scale = counted == 0 ? 0.0 : loss_scale / static_cast<double>(counted);
  for (int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * v;
    T* drow = dlogits + i * v;
    if (targets[i] == kIgnoreTarget) {
      for (int64_t j = 0; j < v; ++j) drow[j] = T(0);
      continue;
    }
    const double l = lse[i];
    for (int64_t j = 0; j < v; ++j) {
      const double prob = std::exp(static_cast<double>(row[j]) - l);
      drow[j] = static_cast<T>((prob - (j == targets[i] ? 1.0 : 0.0)) * scale);
    }
  }
}

#define PD2BW_INSTANTIATE(T)                                                                \
  template double cross_entropy_forward<T>(const T*, const int32_t*, T*, int64_t, int64_t); \
  template void cross_entropy_backward<T>(const T*, const int32_t*, const T*, T*, int64_t, int64_t, double);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cpu
