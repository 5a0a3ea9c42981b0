// The `threads` transport: ranks are threads of one process sharing mailboxes keyed by
// (source, destination, tag); a send copies into the mailbox, a receive waits on a condition variable.
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
  std::map<std::tuple<int64_t, int64_t, uint64_t>, std::deque<std::vector<std::byte>>> boxes;
  bool aborted = false;
  std::string why;
};

class ThreadsComm final : public Comm {
 public:
  ThreadsComm(std::shared_ptr<World> world, int64_t rank, int64_t size)
      : world_(std::move(world)), rank_(rank), size_(size) {}
  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }

  void send(int64_t dst, uint64_t tag, std::span<const std::byte> bytes) override {
    check_peer(dst);
    std::vector<std::byte> copy(bytes.begin(), bytes.end());
    {
      std::lock_guard<std::mutex> lock(world_->mutex);
      if (world_->aborted) throw Error(world_->why);
      world_->boxes[{rank_, dst, tag}].push_back(std::move(copy));
    }
    world_->arrived.notify_all();
  }

  void recv(int64_t src, uint64_t tag, std::span<std::byte> bytes) override {
    check_peer(src);
    std::unique_lock<std::mutex> lock(world_->mutex);
    auto& box = world_->boxes[{src, rank_, tag}];
    world_->arrived.wait(lock, [&] { return world_->aborted || !box.empty(); });
    if (world_->aborted) throw Error(world_->why);
    std::vector<std::byte> msg = std::move(box.front());
    box.pop_front();
    if (box.empty()) world_->boxes.erase({src, rank_, tag});
    lock.unlock();
    if (msg.size() != bytes.size())
      throw Error(fmt::format("rank {}: message from rank {} (tag {:#x}) has {} bytes, expected {}", rank_, src,
                              tag, msg.size(), bytes.size()));
    if (!msg.empty()) std::memcpy(bytes.data(), msg.data(), msg.size());
  }

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

 private:
  void check_peer(int64_t peer) const {
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw Error(fmt::format("rank {}: bad peer rank {} (job of {} ranks)", rank_, peer, size_));
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

template <typename T>
void group_sum(Comm& comm, std::span<const int64_t> group, uint64_t tag, std::span<T> values) {
  if (group.size() <= 1) return;
  const auto bytes = std::as_writable_bytes(values);
  if (comm.rank() != group[0]) {
    comm.send(group[0], tag, std::as_bytes(values));
    comm.recv(group[0], tag, bytes);
    return;
  }
  std::vector<T> other(values.size());
  for (size_t g = 1; g < group.size(); ++g) {
    comm.recv(group[g], tag, std::as_writable_bytes(std::span<T>(other)));
    for (size_t i = 0; i < values.size(); ++i) values[i] += other[i];
  }
  for (size_t g = 1; g < group.size(); ++g) comm.send(group[g], tag, std::as_bytes(values));
}

template void group_sum<float>(Comm&, std::span<const int64_t>, uint64_t, std::span<float>);
template void group_sum<double>(Comm&, std::span<const int64_t>, uint64_t, std::span<double>);

}  // namespace pd2bw::executor
