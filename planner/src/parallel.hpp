// Running independent pieces of the search on several threads. Private to the planner.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace pd2bw::planner::detail {

// Threads to use for `requested` (0: one per hardware thread), at least 1 and at most 64.
inline int64_t worker_count(int64_t requested) {
  const auto hardware = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp<int64_t>(requested > 0 ? requested : hardware, 1, 64);
}

// Calls visit(state, 0), visit(state, 1), ... up to n - 1, each index once, from `threads` threads (0: one
// per hardware thread) that take the next index as they finish, each thread with a state of its own made
// by make_state() (a prvalue: it need not be movable), for what is not thread-safe (a memo); visit
// returns false to stop them all. The first exception thrown is rethrown here once every thread has
// stopped.
template <class MakeState, class Visit>
void for_each_in_parallel_with(size_t n, int64_t threads, MakeState&& make_state, Visit&& visit) {
  std::atomic<size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto work = [&] {
    try {
      auto state = make_state();
      for (size_t i = next++; i < n; i = next++)
        if (!visit(state, i)) next = n;
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = n;
    }
  };
  const int64_t workers = std::min<int64_t>(worker_count(threads), static_cast<int64_t>(std::max<size_t>(n, 1)));
  {
    std::vector<std::jthread> pool;
    for (int64_t t = 1; t < workers; ++t) pool.emplace_back(work);
    work();
  }  // joins
  if (failure) std::rethrow_exception(failure);
}

// The same without a state: visit(i).
template <class Visit>
void for_each_in_parallel(size_t n, int64_t threads, Visit&& visit) {
  for_each_in_parallel_with(n, threads, [] { return 0; }, [&](int, size_t i) { return visit(i); });
}

}  // namespace pd2bw::planner::detail
