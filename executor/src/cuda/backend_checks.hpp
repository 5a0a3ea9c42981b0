// The argument checks the cuda backend's ops make before their launchers run (kernels.hpp), and the
// helpers that hand Views to the launchers. Private to the cuda backend's sources.
#pragma once

#include <initializer_list>
#include <string>

#include "cuda/cuda_api.hpp"
#include "pd2bw/executor/backend.hpp"

namespace pd2bw::executor::cuda {

// The compute dtype the op's activation arguments share: f32 or bf16.
inline DType compute_of(const char* op, std::initializer_list<DType> dtypes) {
  const DType t = *dtypes.begin();
  for (DType d : dtypes)
    if (d != t)
      throw_usage(op, std::string("arguments of ") + std::string(to_string(t)) + " and " + std::string(to_string(d)));
  if (t != DType::f32 && t != DType::bf16)
    throw_usage(op, std::string("no kernel computes in ") + std::string(to_string(t)) + "; use float or bf16");
  return t;
}

// `v` holds at least `numel` elements of `dtype` (and a pointer when numel > 0).
inline void need(const char* op, const char* what, ConstView v, DType dtype, int64_t numel) {
  if (v.dtype != dtype)
    throw_usage(
        op, std::string(what) + " is " + std::string(to_string(v.dtype)) + ", needs " + std::string(to_string(dtype)));
  if (v.numel < numel || (numel > 0 && v.data == nullptr))
    throw_usage(op,
                std::string(what) + " has " + std::to_string(v.numel) + " elements, needs " + std::to_string(numel));
}

// Calls f(T{}) with the storage type of t (f32 or bf16).
template <typename F>
void dispatch(DType t, F&& f) {
  if (t == DType::f32)
    f(float{});
  else
    f(bf16_t{});
}

template <typename T>
const T* ptr(ConstView v) {
  return v.empty() ? nullptr : static_cast<const T*>(v.data);
}
template <typename T>
T* ptr(View v) {
  return v.empty() ? nullptr : static_cast<T*>(v.data);
}

// Allocates scratch of `numel` elements of t from the backend's arena (empty for 0).
inline Buffer scratch(Backend& be, DType t, int64_t numel) { return numel > 0 ? be.alloc(t, numel) : Buffer{}; }

}  // namespace pd2bw::executor::cuda
