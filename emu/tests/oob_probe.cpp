// A planted out-of-bounds access in device code, which AddressSanitizer must stop: `global` writes one
// float past the end of a cudaMalloc allocation, `shared` reads one float past a __shared__ array. The
// ctest entries pass only when the sanitizers stop it: ASan's heap-buffer-overflow (every device
// allocation and every shared array is a heap block of exactly its size), or for the shared array,
// UBSan's bounds check of the typed array, which comes first.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "pd2bw_emu/device_code.hpp"

namespace {

void past_the_end_kernel(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i <= n) x[i] = 1.0f;  // the planted bug: <= instead of <
}

void shared_past_the_end_kernel(float* out) {
  static const char site = 0;
  float(&s)[32] = *static_cast<float(*)[32]>(pd2bw_emu::shared_array(&site, sizeof(float[32]), 4));
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x + 1];  // the planted bug: lane 31 reads s[32]
}

}  // namespace

int main(int argc, char** argv) {
  const bool shared = argc > 1 && std::strcmp(argv[1], "shared") == 0;
  float* x = nullptr;
  if (cudaMalloc(&x, 100 * sizeof(float)) != cudaSuccess) return 2;
  if (shared)
    (void)pd2bw_emu::launch<shared_past_the_end_kernel>(1, 32, 0, nullptr, x);
  else
    (void)pd2bw_emu::launch<past_the_end_kernel>(1, 128, 0, nullptr, x, 100);
  (void)cudaDeviceSynchronize();
  std::printf("the out-of-bounds access went unnoticed\n");
  return 0;
}
