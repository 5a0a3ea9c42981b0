// The caching arena behind a backend's buffers: blocks are kept by size when released and handed out
// again for the next request of that size, so a pipeline stage that allocates the same shapes every
// microbatch (stash slots, activations, scratch) stops asking the system for memory after its first
// step. Thread-safe. Private to the executor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "pd2bw/executor/backend.hpp"

namespace pd2bw::executor {

class CachingArena final : public BufferOwner {
 public:
  // `get` obtains a block of the given byte size from the system (throws Error when it cannot), `put`
  // gives one back. When `get` throws, the cached free blocks are given back and it is asked once more.
  CachingArena(std::function<void*(int64_t)> get, std::function<void(void*)> put)
      : get_(std::move(get)), put_(std::move(put)) {}
  ~CachingArena();
  CachingArena(const CachingArena&) = delete;
  CachingArena& operator=(const CachingArena&) = delete;

  Buffer alloc(DType dtype, int64_t numel);
  void release(void* data, int64_t bytes) noexcept override;
  MemoryStats stats() const;
  void reset_peak();

 private:
  static int64_t block_size(int64_t bytes) { return (bytes + 63) / 64 * 64; }
  void* fresh_block(int64_t size);
  std::function<void*(int64_t)> get_;
  std::function<void(void*)> put_;
  mutable std::mutex mutex_;
  std::map<int64_t, std::vector<void*>> free_;  // block size -> free blocks
  MemoryStats stats_;
};

}  // namespace pd2bw::executor
