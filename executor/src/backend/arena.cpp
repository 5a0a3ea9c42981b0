// The caching arena: exact-size reuse of released blocks, with current/peak/reserved byte counts.
#include "backend/arena.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "pd2bw/error.hpp"

namespace pd2bw::executor {

CachingArena::~CachingArena() {
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) put_(p);
}

// A block from the system (outside the lock: the allocator may be slow). When the system has none left,
// the cached free blocks of other sizes go back to it and the request is tried once more.
void* CachingArena::fresh_block(int64_t size) {
  try {
    return get_(size);
  } catch (const Error&) {
    std::vector<void*> cached;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [block, blocks] : free_) {
        for (void* p : blocks) cached.push_back(p);
        stats_.reserved_bytes -= block * static_cast<int64_t>(blocks.size());
      }
      free_.clear();
    }
    if (cached.empty()) throw;
    for (void* p : cached) put_(p);
    return get_(size);
  }
}

Buffer CachingArena::alloc(DType dtype, int64_t numel) {
  if (numel < 0) throw UsageError(fmt::format("cannot allocate {} elements", numel));
  if (numel == 0) return {};
  const int64_t bytes = numel * dtype_bytes(dtype);
  const int64_t size = block_size(bytes);
  void* data = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      data = it->second.back();
      it->second.pop_back();
    }
  }
  if (data == nullptr) {
    data = fresh_block(size);
    const std::lock_guard<std::mutex> lock(mutex_);
    stats_.reserved_bytes += size;
    ++stats_.fresh_allocations;
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  stats_.current_bytes += bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  return {this, data, dtype, numel};
}

void CachingArena::release(void* data, int64_t bytes) noexcept {
  if (data == nullptr) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  stats_.current_bytes -= bytes;
  free_[block_size(bytes)].push_back(data);
}

MemoryStats CachingArena::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingArena::reset_peak() {
  const std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
}

bool operator==(const Buffer& a, const Buffer& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel()) return false;
  return a.bytes() == 0 || std::memcmp(a.data<char>(), b.data<char>(), static_cast<size_t>(a.bytes())) == 0;
}

}  // namespace pd2bw::executor
