// CPU elementwise helpers for residual connections and gradient sums.
#include "pd2bw/executor/ops.hpp"

namespace pd2bw::executor::cpu {

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void accumulate(T* acc, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

#define PD2BW_INSTANTIATE(T)                             \
  template void add<T>(const T*, const T*, T*, int64_t); \
  template void accumulate<T>(T*, const T*, int64_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cpu
