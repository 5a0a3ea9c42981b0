// Sample statistics and the allocator's view of the heap, for the layer and link measurements.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "measure.hpp"
#include "pd2bw/error.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// A sanitizer's allocator replaces malloc, so glibc's statistics no longer see the program's blocks.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PD2BW_PROFILER_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define PD2BW_PROFILER_SANITIZED 1
#endif
#endif

namespace pd2bw::profiler {

bool heap_measurement_available() {
#if defined(__GLIBC__) && !defined(PD2BW_PROFILER_SANITIZED)
  return true;
#else
  return false;
#endif
}

namespace detail {

Spread summarize(std::vector<double> samples) {
  if (samples.empty()) throw Error("profiler: no timing samples to summarise");
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  Spread s;
  s.min = samples.front();
  s.median = n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  // Nearest rank: the smallest sample with at least 90% of the samples at or below it.
  const auto rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n)));
  s.p90 = samples[std::max<size_t>(rank, 1) - 1];
  return s;
}

int64_t heap_in_use_bytes() {
#if defined(__GLIBC__) && !defined(PD2BW_PROFILER_SANITIZED)
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
#else
  return -1;
#endif
}

namespace {
// glibc's defaults: the per-thread cache keeps up to 7 blocks of each size class up to 1032 bytes, in
// steps of 16. Taking twice that many leaves every class empty even if a tunable raised the count a bit.
constexpr size_t kLargestCachedBytes = 1032;
constexpr size_t kSizeStep = 16;
constexpr int kBlocksPerClass = 16;
}  // namespace

SmallBlockDrain::SmallBlockDrain() {
  if (!heap_measurement_available()) return;
  held_.reserve((kLargestCachedBytes / kSizeStep + 1) * kBlocksPerClass);
  for (size_t bytes = 8; bytes <= kLargestCachedBytes; bytes += kSizeStep)
    for (int i = 0; i < kBlocksPerClass; ++i) held_.push_back(std::malloc(bytes));
}

SmallBlockDrain::~SmallBlockDrain() {
  for (void* p : held_) std::free(p);
}

}  // namespace detail
}  // namespace pd2bw::profiler
