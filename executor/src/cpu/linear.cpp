// CPU linear layer: y = x W^T + bias and its backward (dx overwritten, dW and dbias accumulated; each
// part optional, so a split backward computes them apart with the same arithmetic).
#include "cpu/gemm.hpp"
#include "pd2bw/executor/ops.hpp"

namespace pd2bw::executor::cpu {

template <typename T>
void linear_forward(const T* x, const T* weight, const T* bias, T* y, int64_t n, int64_t in, int64_t out) {
  // The bias is added after the product, as it is stored (the bits of a separate pass).
  detail::gemm(false, true, n, out, in, x, in, weight, in, y, out, false, bias);
}

template <typename T>
void linear_backward(const T* dy, const T* x, const T* weight, T* dx, T* dweight, T* dbias, int64_t n,
                     int64_t in, int64_t out) {
  if (dx != nullptr) detail::gemm(false, false, n, in, out, dy, out, weight, in, dx, in, false);
  if (dweight != nullptr) detail::gemm(true, false, out, in, n, dy, out, x, in, dweight, in, true);
  if (dbias == nullptr) return;
  // Rows are added one after another into dbias: a fixed order whatever the vector width.
  for (int64_t i = 0; i < n; ++i) {
    const T* row = dy + i * out;
    for (int64_t j = 0; j < out; ++j) dbias[j] += row[j];
  }
}

#define PD2BW_INSTANTIATE(T)                                                                    \
  template void linear_forward<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t); \
  template void linear_backward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, int64_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cpu
