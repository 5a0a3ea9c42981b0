// The `threads` transport: ranks are threads of one process sharing mailboxes keyed by
// (source, destination, tag); a send copies into the mailbox (so it never waits for the receiver), a
// receive waits on a condition variable.
#include <fmt/format.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/comm.hpp"

namespace pd2bw::executor {

namespace {

struct World {
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::deque<std::vector<std::byte>>> boxes;
  bool aborted = false;
  std::string why;
};

class ThreadsComm final : public Comm {
 public:
  ThreadsComm(std::shared_ptr<World> world, int64_t rank, int64_t size)
      : world_(std::move(world)), rank_(rank), size_(size) {}
  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }

  void abort(const std::string& why) override {
    {
      std::lock_guard<std::mutex> lock(world_->mutex);
      if (!world_->aborted) {
        world_->aborted = true;
        world_->why = why;
      }
    }
    world_->arrived.notify_all();
  }

 protected:
  void do_send(int64_t dst, int64_t tag, ConstMessageBuffer data, Stream) override {
    host_only(data.memory);
    const auto* p = static_cast<const std::byte*>(data.data);
    std::vector<std::byte> copy(p, p + data.bytes);
    {
      std::lock_guard<std::mutex> lock(world_->mutex);
      if (world_->aborted) throw Error(world_->why);
      world_->boxes[{rank_, dst, tag}].push_back(std::move(copy));
    }
    world_->arrived.notify_all();
  }

  void do_recv(int64_t src, int64_t tag, MessageBuffer data, Stream) override {
    host_only(data.memory);
    std::unique_lock<std::mutex> lock(world_->mutex);
    auto& box = world_->boxes[{src, rank_, tag}];
    world_->arrived.wait(lock, [&] { return world_->aborted || !box.empty(); });
    if (world_->aborted) throw Error(world_->why);
    std::vector<std::byte> msg = std::move(box.front());
    box.pop_front();
    if (box.empty()) world_->boxes.erase({src, rank_, tag});
    lock.unlock();
    if (msg.size() != data.bytes)
      throw Error(fmt::format("rank {}: message from rank {} (tag {}) has {} bytes, expected {}", rank_, src, tag,
                              msg.size(), data.bytes));
    if (!msg.empty()) std::memcpy(data.data, msg.data(), msg.size());
  }

 private:
  static void host_only(MemoryKind memory) {
    if (memory != MemoryKind::host) throw UsageError("the threads transport moves host memory only");
  }

  std::shared_ptr<World> world_;
  int64_t rank_, size_;
};

}  // namespace

std::vector<std::unique_ptr<Comm>> make_threads_comms(int64_t size) {
  if (size < 1) throw UsageError(fmt::format("a job needs at least one rank, got {}", size));
  auto world = std::make_shared<World>();
  std::vector<std::unique_ptr<Comm>> out;
  for (int64_t r = 0; r < size; ++r) out.push_back(std::make_unique<ThreadsComm>(world, r, size));
  return out;
}

}  // namespace pd2bw::executor
