// The caching arena (executor/src/backend/arena.hpp) over a system allocator with a fixed budget: when the
// system has no block left, the arena gives its cached free blocks back and asks once more.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <set>

#include "backend/arena.hpp"
#include "pd2bw/error.hpp"

using namespace pd2bw::executor;

namespace {

// A system with `budget` bytes: get throws Error past it.
struct System {
  int64_t budget = 0, used = 0, gets = 0;
  std::set<void*> live;
  void* get(int64_t bytes) {
    ++gets;
    if (used + bytes > budget) throw pd2bw::Error("out of memory (test system)");
    used += bytes;
    void* p = std::malloc(static_cast<size_t>(bytes));
    sizes[p] = bytes;
    live.insert(p);
    return p;
  }
  void put(void* p) {
    used -= sizes.at(p);
    live.erase(p);
    std::free(p);
  }
  std::map<void*, int64_t> sizes;
};

}  // namespace

TEST_CASE("a request the system cannot meet first returns the arena's cached blocks, then is retried") {
  System sys;
  sys.budget = 4096;
  {
    CachingArena arena([&](int64_t b) { return sys.get(b); }, [&](void* p) { sys.put(p); });
    { Buffer a = arena.alloc(DType::f32, 768); }  // 3072 bytes, cached after release
    CHECK(sys.used == 3072);
    CHECK(arena.stats().reserved_bytes == 3072);
    Buffer b = arena.alloc(DType::f32, 512);  // 2048 bytes: only after the cached block goes back
    CHECK(sys.used == 2048);
    CHECK(arena.stats().reserved_bytes == 2048);
    CHECK_THROWS_AS(arena.alloc(DType::f32, 1024), pd2bw::Error);  // 4096 more: no cache left to give
    CHECK(arena.stats().current_bytes == 2048);
  }
  CHECK(sys.live.empty());
}
