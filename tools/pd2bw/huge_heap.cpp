// The planner's heap on transparent huge pages (cli.hpp: back_heap_with_huge_pages).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "cli.hpp"

#if defined(__linux__) && defined(__GLIBC__)
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace pd2bw::cli {

void back_heap_with_huge_pages(size_t bytes) {
#if defined(__linux__) && defined(__GLIBC__) && defined(MADV_HUGEPAGE)
  // glibc grows its main heap with brk by each request plus M_TOP_PAD, and keeps freed memory there
  // below M_TRIM_THRESHOLD: one request with the pad set grows the heap by `bytes` at once, the new span
  // is advised while untouched (but for the request's header), and the request is freed for the later
  // allocations to reuse. Requests under M_MMAP_THRESHOLD come from this heap.
  constexpr size_t kRequest = size_t{16} << 20;
  if (2 * bytes > static_cast<size_t>(std::numeric_limits<int>::max())) return;  // mallopt takes an int
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(2 * kRequest)) == 0) return;
  if (mallopt(M_TRIM_THRESHOLD, static_cast<int>(2 * bytes)) == 0) return;
  if (mallopt(M_TOP_PAD, static_cast<int>(bytes)) == 0) return;
  const auto before = reinterpret_cast<uintptr_t>(sbrk(0));
  void* p = std::malloc(kRequest);  // larger than what the heap has free this early: it grows
  const auto after = reinterpret_cast<uintptr_t>(sbrk(0));
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (before + page - 1) & ~(page - 1);
  if (p != nullptr && after > begin) madvise(reinterpret_cast<void*>(begin), after - begin, MADV_HUGEPAGE);
  std::free(p);
  mallopt(M_TOP_PAD, 128 << 10);  // later growth as before (glibc's default pad)
#else
  (void)bytes;
#endif
}

}  // namespace pd2bw::cli
