// CPU token + position embedding lookup, the token-type (segment) embedding, and their scatter-add backwards.
#include <fmt/format.h>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/ops.hpp"

namespace pd2bw::executor::cpu {

template <typename T>
void embedding_forward(const int32_t* tokens, const T* wte, const T* wpe, T* out, int64_t b, int64_t t,
                       int64_t c, int64_t v) {
  for (int64_t i = 0; i < b * t; ++i) {
    const int32_t tok = tokens[i];
    if (tok < 0 || tok >= v) {
      throw Error(fmt::format("embedding: token {} at (batch {}, position {}) is outside [0, {})", tok, i / t,
                              i % t, v),
                  "check that the data set was tokenised with the model's vocabulary");
    }
    const T* te = wte + tok * c;
    const T* pe = wpe + (i % t) * c;
    T* o = out + i * c;
    for (int64_t j = 0; j < c; ++j) o[j] = te[j] + pe[j];
  }
}

template <typename T>
void embedding_backward(const int32_t* tokens, const T* dout, T* dwte, T* dwpe, int64_t b, int64_t t,
                        int64_t c) {
  // Sequential over (batch, position): a repeated token accumulates in a fixed order.
  for (int64_t i = 0; i < b * t; ++i) {
    const T* d = dout + i * c;
    T* te = dwte + static_cast<int64_t>(tokens[i]) * c;
    T* pe = dwpe + (i % t) * c;
    for (int64_t j = 0; j < c; ++j) {
      te[j] += d[j];
      pe[j] += d[j];
    }
  }
}

template <typename T>
void type_embedding_forward(const int32_t* types, const T* table, T* out, int64_t n, int64_t c, int64_t r) {
  for (int64_t i = 0; i < n; ++i) {
    const int32_t ty = types[i];
    if (ty < 0 || ty >= r)
      throw Error(fmt::format("embedding: token type {} at position {} is outside [0, {})", ty, i, r),
                  "token types are segment ids: 0 for the first segment, 1 for the second");
    const T* te = table + ty * c;
    T* o = out + i * c;
    for (int64_t j = 0; j < c; ++j) o[j] += te[j];
  }
}

template <typename T>
void type_embedding_backward(const int32_t* types, const T* dout, T* dtable, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const T* d = dout + i * c;
    T* te = dtable + static_cast<int64_t>(types[i]) * c;
    for (int64_t j = 0; j < c; ++j) te[j] += d[j];
  }
}

#define PD2BW_INSTANTIATE(T)                                                                            \
  template void embedding_forward<T>(const int32_t*, const T*, const T*, T*, int64_t, int64_t, int64_t, \
                                     int64_t);                                                          \
  template void embedding_backward<T>(const int32_t*, const T*, T*, T*, int64_t, int64_t, int64_t);           \
  template void type_embedding_forward<T>(const int32_t*, const T*, T*, int64_t, int64_t, int64_t);            \
  template void type_embedding_backward<T>(const int32_t*, const T*, T*, int64_t, int64_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cpu
