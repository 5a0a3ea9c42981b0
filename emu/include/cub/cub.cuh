// CUB on the emulated device: the one algorithm pd2bw uses, cub::DeviceRadixSort::SortPairs, with CUB's
// documented contract: the first call with d_temp_storage null only sets temp_storage_bytes; the second
// sorts num_items (key, value) pairs by the key bits [begin_bit, end_bit) in ascending order, stably
// (pairs with equal keys keep their input order), queued on the stream. Inputs and outputs are device
// memory and must not overlap.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "pd2bw_emu/stream.hpp"

namespace cub {

struct DeviceRadixSort {
  template <typename K, typename V>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const K* keys_in, K* keys_out,
                               const V* values_in, V* values_out, int num_items, int begin_bit = 0,
                               int end_bit = static_cast<int>(sizeof(K) * 8), cudaStream_t stream = nullptr) {
    static_assert(std::is_unsigned_v<K>, "the emulated SortPairs takes unsigned keys");
    constexpr size_t kTempBytes = 256;  // the emulation needs none, but asks for some as CUB does
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = kTempBytes;
      return cudaSuccess;
    }
    if (temp_storage_bytes < kTempBytes || num_items < 0 || begin_bit < 0 || end_bit > static_cast<int>(sizeof(K) * 8) ||
        begin_bit > end_bit)
      return pd2bw_emu::set_last_error(cudaErrorInvalidValue);
    const auto n = static_cast<size_t>(num_items);
    if (n == 0) return cudaSuccess;
    if (!pd2bw_emu::device_accessible(keys_in, n * sizeof(K)) || !pd2bw_emu::device_accessible(keys_out, n * sizeof(K)) ||
        !pd2bw_emu::device_accessible(values_in, n * sizeof(V)) ||
        !pd2bw_emu::device_accessible(values_out, n * sizeof(V)) ||
        !pd2bw_emu::device_accessible(d_temp_storage, kTempBytes))
      return pd2bw_emu::set_last_error(cudaErrorInvalidValue);
    return pd2bw_emu::enqueue(stream, [=] {
      const int width = end_bit - begin_bit;
      const K mask = width >= static_cast<int>(sizeof(K) * 8) ? static_cast<K>(~K{0})
                                                               : static_cast<K>((K{1} << width) - 1);
      auto digit = [&](K k) { return static_cast<K>((k >> begin_bit) & mask); };
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), size_t{0});
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return digit(keys_in[a]) < digit(keys_in[b]); });
      for (size_t i = 0; i < n; ++i) {
        keys_out[i] = keys_in[order[i]];
        values_out[i] = values_in[order[i]];
      }
      return cudaSuccess;
    });
  }
};

}  // namespace cub
