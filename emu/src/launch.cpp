// Kernel launch on the emulated device: the launch checks, then on the stream's worker every block in
// turn, each GPU thread of a block a fiber that runs until it reaches __syncthreads(), a warp rendezvous
// or its end. A fiber is a stack of its own, switched in a few instructions (pd2bw_emu_fiber_switch;
// swapcontext would cost two system calls a switch). Threads that never block run one after another on
// one fiber, so a kernel without barriers costs one switch per block.
#include <sys/mman.h>

#include <cstdint>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "block.hpp"
#include "pd2bw_emu/checks.hpp"
#include "pd2bw_emu/stream.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PD2BW_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PD2BW_EMU_ASAN 1
#endif
#ifdef PD2BW_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace pd2bw_emu {

thread_local GpuThread* tls_current_thread = nullptr;
thread_local Block* tls_block = nullptr;

void outside_kernel(const char* what) {
  std::fprintf(stderr, "pd2bw-emu: %s used outside a kernel\n", what);
  std::abort();
}

// fiber_switch(from, to): saves the callee-saved registers on the current stack, stores the stack
// pointer in *from, loads `to` and resumes what was saved there (System V x86-64: rbx, rbp, r12-r15).
#if !defined(__x86_64__)
#error "the emulated device's fiber switch is written for x86-64"
#endif
extern "C" void pd2bw_emu_fiber_switch(void** from, void* to);
asm(R"(
  .text
  .globl pd2bw_emu_fiber_switch
  .type pd2bw_emu_fiber_switch, @function
pd2bw_emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size pd2bw_emu_fiber_switch, .-pd2bw_emu_fiber_switch
)");

struct Fiber {
  void* sp = nullptr;  // saved stack pointer while the fiber is not running
  char* stack = nullptr;
  size_t stack_bytes = 0;
  ThreadRecord* thread = nullptr;  // the thread it runs, null when it is free
  bool finished = false;           // ran out of threads to start: free for the next block
  void* fake_stack = nullptr;      // AddressSanitizer's bookkeeping of the switch
};

namespace {

constexpr size_t kStackBytes = size_t{256} << 10;
constexpr size_t kStaticSharedLimit = size_t{48} << 10;

// The scheduler's context and fibers of this host thread (a stream's worker), reused from block to block.
struct Scheduler {
  void* sp = nullptr;  // the worker's stack pointer while a fiber runs
  const void* stack_bottom = nullptr;
  size_t stack_bytes = 0;
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::vector<Fiber*> free;
  Fiber* starting = nullptr;
  ~Scheduler() {
    for (auto& f : fibers) munmap(f->stack, f->stack_bytes);
  }
};
thread_local Scheduler tls_scheduler;

void enter_fiber(Fiber* f) {
  Scheduler& s = tls_scheduler;
#ifdef PD2BW_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack, f->stack_bytes);
  pd2bw_emu_fiber_switch(&s.sp, f->sp);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  pd2bw_emu_fiber_switch(&s.sp, f->sp);
#endif
}

// From a fiber back to its scheduler; `done`: the fiber will not be resumed where it stands.
void leave_fiber(Fiber* f, bool done) {
  Scheduler& s = tls_scheduler;
#ifdef PD2BW_EMU_ASAN
  __sanitizer_start_switch_fiber(done ? nullptr : &f->fake_stack, s.stack_bottom, s.stack_bytes);
  pd2bw_emu_fiber_switch(&f->sp, s.sp);
  __sanitizer_finish_switch_fiber(f->fake_stack, &s.stack_bottom, &s.stack_bytes);
#else
  (void)done;
  pd2bw_emu_fiber_switch(&f->sp, s.sp);
#endif
}

// A fiber starts threads of the block in order until one of them blocks (the fiber then stays with it)
// or none is left.
void fiber_main() {
  Fiber* self = tls_scheduler.starting;
#ifdef PD2BW_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &tls_scheduler.stack_bottom, &tls_scheduler.stack_bytes);
#endif
  for (;;) {
    Block& b = *tls_block;
    ThreadRecord* t = b.take_unstarted();
    if (t == nullptr) break;
    self->thread = t;
    t->fiber = self;
    t->state = ThreadState::running;
    tls_current_thread = &t->pub;
    (*b.body)();
    t->state = ThreadState::done;
    t->fiber = nullptr;
    tls_current_thread = nullptr;
  }
  self->thread = nullptr;
  self->finished = true;
  leave_fiber(self, true);
  std::abort();  // a finished fiber is never resumed, only made anew
}

Fiber* fresh_fiber() {
  Scheduler& s = tls_scheduler;
  Fiber* f = nullptr;
  if (!s.free.empty()) {
    f = s.free.back();
    s.free.pop_back();
  } else {
    auto owned = std::make_unique<Fiber>();
    void* stack = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stack == MAP_FAILED) {
      std::fprintf(stderr, "pd2bw-emu: no memory for a GPU thread's stack\n");
      std::abort();
    }
    owned->stack = static_cast<char*>(stack);
    owned->stack_bytes = kStackBytes;
    f = owned.get();
    s.fibers.push_back(std::move(owned));
  }
  // A new fiber's stack as pd2bw_emu_fiber_switch leaves one: six saved registers (zero), then the
  // address it returns to, fiber_main, 16-byte aligned so that fiber_main starts as if called.
  auto* top = reinterpret_cast<uintptr_t*>(f->stack + f->stack_bytes);
  top -= 2;  // fiber_main's own (never used) return address, and alignment
  top[0] = reinterpret_cast<uintptr_t>(&fiber_main);
  top[1] = 0;
  top -= 6;
  for (int i = 0; i < 6; ++i) top[i] = 0;
  f->sp = top;
  f->finished = false;
  f->thread = nullptr;
  return f;
}

// Runs `f` until it blocks or finishes; a finished fiber goes back to the free list.
void run_fiber(Fiber* f) {
  if (f->thread != nullptr) tls_current_thread = &f->thread->pub;
  tls_scheduler.starting = f;
  enter_fiber(f);
  tls_current_thread = nullptr;
  if (f->finished) tls_scheduler.free.push_back(f);
}

// PD2BW_EMU_ORDER: forward (default), reverse, shuffle (seed 1) or shuffle:SEED.
struct OrderPolicy {
  enum Kind { forward, reverse, shuffle } kind = forward;
  uint64_t seed = 1;
};
OrderPolicy order_policy() {
  OrderPolicy p;
  const char* env = std::getenv("PD2BW_EMU_ORDER");
  if (env == nullptr || std::strcmp(env, "forward") == 0) return p;
  if (std::strcmp(env, "reverse") == 0) {
    p.kind = OrderPolicy::reverse;
  } else if (std::strncmp(env, "shuffle", 7) == 0) {
    p.kind = OrderPolicy::shuffle;
    if (env[7] == ':') p.seed = std::strtoull(env + 8, nullptr, 10);
  } else {
    std::fprintf(stderr, "pd2bw-emu: PD2BW_EMU_ORDER=%s: use forward, reverse, shuffle or shuffle:SEED\n", env);
    std::exit(2);
  }
  return p;
}

void make_order(std::vector<int>& order, size_t n, const OrderPolicy& p, std::mt19937_64& rng) {
  order.resize(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int>(i);
  if (p.kind == OrderPolicy::reverse) std::reverse(order.begin(), order.end());
  if (p.kind == OrderPolicy::shuffle) std::shuffle(order.begin(), order.end(), rng);
}

// Describes who waits where when no thread can go on: the first thread at a warp call, and a lane its
// mask names that cannot come (exited, or waiting at __syncthreads()).
std::string deadlock_text(const Block& b) {
  int at_barrier = 0, at_warp = 0;
  const ThreadRecord* first = nullptr;
  for (const ThreadRecord& t : b.threads) {
    at_barrier += t.state == ThreadState::at_barrier;
    if (t.state == ThreadState::at_warp && at_warp++ == 0) first = &t;
  }
  std::string text = "threads wait forever: " + std::to_string(at_barrier) + " at __syncthreads(), " +
                     std::to_string(at_warp) + " at a warp shuffle or vote";
  if (first == nullptr) return text;
  const int base = first->linear - first->linear % 32;
  for (int lane = 0; lane < 32; ++lane) {
    if ((first->warp.mask >> lane & 1u) == 0) continue;
    const auto i = static_cast<size_t>(base + lane);
    const ThreadState s = i < b.threads.size() ? b.threads[i].state : ThreadState::done;
    if (s == ThreadState::at_warp) continue;
    return text + "; " + b.thread_name(first->linear) + " waits for lane " + std::to_string(lane) + ", which " +
           (s == ThreadState::done ? "has exited" : "waits at __syncthreads()");
  }
  return text;
}

// Runs the block's threads to their end (or to the first finding that stops them).
void run_block(Block& b, const OrderPolicy& policy) {
  make_order(b.order, b.threads.size(), policy, *b.rng);
  for (;;) {
    while (b.next_start < b.order.size() && b.fault.empty()) run_fiber(fresh_fiber());
    bool resumed = false;
    for (int i : b.order) {
      ThreadRecord& t = b.threads[static_cast<size_t>(i)];
      if (t.state != ThreadState::ready || !b.fault.empty()) continue;
      t.state = ThreadState::running;
      run_fiber(t.fiber);
      resumed = true;
    }
    if (!b.fault.empty()) return;
    if (resumed) continue;
    size_t done = 0, waiting = 0;
    for (const ThreadRecord& t : b.threads) {
      done += t.state == ThreadState::done;
      waiting += t.state == ThreadState::at_barrier;
    }
    if (done == b.threads.size()) return;
    if (done + waiting < b.threads.size() || waiting == 0) return b.add_finding(deadlock_text(b));
    ++b.epoch;  // every live thread reached the barrier
    make_order(b.order, b.threads.size(), policy, *b.rng);
    for (ThreadRecord& t : b.threads)
      if (t.state == ThreadState::at_barrier) t.state = ThreadState::ready;
  }
}

// Fibers a fault left blocked are abandoned; their stacks are made anew for the next block.
void reclaim_fibers() {
  Scheduler& s = tls_scheduler;
  s.free.clear();
  for (auto& f : s.fibers) s.free.push_back(f.get());
}

void init_threads(Block& b, uint3 block_idx) {
  const dim3 bd = b.config->block;
  b.threads.resize(static_cast<size_t>(bd.x) * bd.y * bd.z);
  for (size_t i = 0; i < b.threads.size(); ++i) {
    ThreadRecord& t = b.threads[i];
    const auto u = static_cast<unsigned>(i);
    t = ThreadRecord{};
    t.linear = static_cast<int>(i);
    t.pub.thread_idx = {u % bd.x, u / bd.x % bd.y, u / (bd.x * bd.y)};
    t.pub.block_idx = block_idx;
    t.pub.block_dim = bd;
    t.pub.grid_dim = b.config->grid;
  }
}

cudaError_t run_kernel(const LaunchConfig& config, const std::function<void()>& body, uint64_t launch_number) {
  const OrderPolicy policy = order_policy();
  std::mt19937_64 rng(policy.seed * 0x9e3779b97f4a7c15ULL + launch_number);
  const dim3 g = config.grid;
  const size_t blocks = static_cast<size_t>(g.x) * g.y * g.z;
  std::vector<int> block_order;
  make_order(block_order, blocks, policy, rng);
  Block b;
  b.config = &config;
  b.body = &body;
  b.rng = &rng;
  tls_block = &b;
  std::string fault;
  for (int k : block_order) {
    const auto u = static_cast<unsigned>(k);
    init_threads(b, {u % g.x, u / g.x % g.y, u / (g.x * g.y)});
    b.next_start = 0;
    b.epoch = 1;
    b.static_shared_bytes = 0;
    if (config.shared_bytes > 0) (void)dynamic_shared();
    run_block(b, policy);
    free_shared(b);
    if (!b.fault.empty()) {
      fault = b.fault;
      break;
    }
  }
  tls_block = nullptr;
  if (fault.empty()) return cudaSuccess;
  reclaim_fibers();
  if (!fail_on_findings()) return cudaSuccess;
  fail(cudaErrorLaunchFailure, fault);
  return cudaErrorLaunchFailure;
}

cudaError_t check_config(const LaunchConfig& c) {
  const dim3 b = c.block, g = c.grid;
  const uint64_t threads = uint64_t{b.x} * b.y * b.z;
  if (threads == 0 || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64) return cudaErrorInvalidConfiguration;
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
    return cudaErrorInvalidConfiguration;
  if (c.shared_bytes > kStaticSharedLimit) return cudaErrorInvalidValue;  // beyond the default without opt-in
  return cudaSuccess;
}

}  // namespace

ThreadRecord* Block::take_unstarted() {
  while (next_start < order.size()) {
    ThreadRecord& t = threads[static_cast<size_t>(order[next_start++])];
    if (t.state == ThreadState::unstarted) return &t;
  }
  return nullptr;
}

std::string Block::thread_name(int linear) const {
  const GpuThread& p = threads[static_cast<size_t>(linear)].pub;
  return "thread (" + std::to_string(p.thread_idx.x) + "," + std::to_string(p.thread_idx.y) + "," +
         std::to_string(p.thread_idx.z) + ") of block (" + std::to_string(p.block_idx.x) + "," +
         std::to_string(p.block_idx.y) + "," + std::to_string(p.block_idx.z) + ")";
}

cudaError_t launch_erased(const LaunchConfig& config, std::function<void()> body) {
  if (const cudaError_t rc = check_config(config); rc != cudaSuccess) return set_last_error(rc);
  static std::atomic<uint64_t> launches{0};
  const uint64_t number = launches++;
  return enqueue(config.stream, [config, body = std::move(body), number] { return run_kernel(config, body, number); });
}

// ---- what kernels call --------------------------------------------------------------------------------
namespace {
Block& running_block(const char* what) {
  if (tls_block == nullptr || tls_current_thread == nullptr) outside_kernel(what);
  return *tls_block;
}
// The record of the running thread (its GpuThread is the record's first member).
ThreadRecord& running_thread() {
  static_assert(offsetof(ThreadRecord, pub) == 0);
  return *reinterpret_cast<ThreadRecord*>(tls_current_thread);
}

void* allocate_shared(Block& b, const void* site, size_t bytes, size_t align) {
  SharedArray a;
  a.site = site;
  a.bytes = bytes;
  void* p = nullptr;
  if (posix_memalign(&p, std::max<size_t>(align, 16), std::max<size_t>(bytes, 1)) != 0) std::abort();
  std::memset(p, 0xff, bytes);  // not zero: shared memory starts with whatever was there (0xff.. is a NaN)
  a.data = static_cast<char*>(p);
  a.record.resize(bytes);
  b.shared.push_back(std::move(a));
  return p;
}
}  // namespace

void syncthreads() {
  running_block("__syncthreads()");
  ThreadRecord& t = running_thread();
  t.state = ThreadState::at_barrier;
  suspend(t);
}

void suspend(ThreadRecord& t) { leave_fiber(t.fiber, false); }

ThreadRecord& running_thread(const char* what) {
  running_block(what);
  return running_thread();
}

void* shared_array(const void* site, size_t bytes, size_t align) {
  Block& b = running_block("__shared__ memory");
  for (SharedArray& a : b.shared)
    if (a.site == site) return a.data;
  b.static_shared_bytes += bytes;
  if (b.static_shared_bytes > kStaticSharedLimit)
    b.add_finding("more than 48 KiB of static __shared__ memory in one block (ptxas refuses such a kernel)");
  return allocate_shared(b, site, bytes, align);
}

void* dynamic_shared() {
  if (tls_block == nullptr) outside_kernel("extern __shared__ memory");
  Block& b = *tls_block;
  for (SharedArray& a : b.shared)
    if (a.site == nullptr) return a.data;
  return allocate_shared(b, nullptr, b.config->shared_bytes, 16);
}

}  // namespace pd2bw_emu
