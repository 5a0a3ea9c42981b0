// The `threads` transport: ranks are threads of one process sharing mailboxes keyed by
// (source, destination, tag); a send copies into the mailbox (so it never waits for the receiver), a
// receive waits on a condition variable. Device buffers (stages on one GPU) are copied into device
// memory of the message's own on the sender's stream and out of it on the receiver's, ordered by events
// (the device transfer of backend/device_transfer.hpp); the sum over a group of device buffers is the
// fixed-order host sum of Comm, staged through host memory.
#include <fmt/format.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/device_transfer.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/comm.hpp"

namespace pd2bw::executor {

namespace {

// One message in a mailbox: host bytes, or a copy in device memory.
struct Message {
  std::vector<std::byte> host;
  std::unique_ptr<StagedMessage> device;
  size_t bytes = 0;
};

struct World {
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::deque<Message>> boxes;
  bool aborted = false;
  std::string why;
};

DeviceTransfer& transfer_for_device() {
  DeviceTransfer* t = device_transfer();
  if (t == nullptr) throw UsageError("the threads transport got device memory, but this build has no device backend");
  return *t;
}

class ThreadsComm final : public Comm {
 public:
  ThreadsComm(std::shared_ptr<World> world, int64_t rank, int64_t size)
      : world_(std::move(world)), rank_(rank), size_(size) {}
  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  bool accepts(MemoryKind kind) const override { return kind == MemoryKind::host || device_transfer() != nullptr; }

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
  void do_send(int64_t dst, int64_t tag, ConstMessageBuffer data, Stream stream) override {
    Message msg;
    msg.bytes = data.bytes;
    if (data.memory == MemoryKind::device && data.bytes > 0) {
      msg.device = transfer_for_device().stage(data.data, data.bytes, stream.handle);
    } else if (data.bytes > 0) {
      const auto* p = static_cast<const std::byte*>(data.data);
      msg.host.assign(p, p + data.bytes);
    }
    {
      std::lock_guard<std::mutex> lock(world_->mutex);
      if (world_->aborted) throw Error(world_->why);
      world_->boxes[{rank_, dst, tag}].push_back(std::move(msg));
    }
    world_->arrived.notify_all();
  }

  void do_recv(int64_t src, int64_t tag, MessageBuffer data, Stream stream) override {
    std::unique_lock<std::mutex> lock(world_->mutex);
    auto& box = world_->boxes[{src, rank_, tag}];
    world_->arrived.wait(lock, [&] { return world_->aborted || !box.empty(); });
    if (world_->aborted) throw Error(world_->why);
    Message msg = std::move(box.front());
    box.pop_front();
    if (box.empty()) world_->boxes.erase({src, rank_, tag});
    lock.unlock();
    if (msg.bytes != data.bytes)
      throw Error(fmt::format("rank {}: message from rank {} (tag {}) has {} bytes, expected {}", rank_, src, tag,
                              msg.bytes, data.bytes));
    if (msg.bytes == 0) return;
    const bool to_device = data.memory == MemoryKind::device;
    if (msg.device && to_device)
      transfer_for_device().deliver(*msg.device, data.data, stream.handle);
    else if (msg.device)
      transfer_for_device().deliver_to_host(*msg.device, data.data);
    else if (to_device)
      transfer_for_device().from_host(msg.host.data(), data.data, msg.bytes, stream.handle);
    else
      std::memcpy(data.data, msg.host.data(), msg.bytes);
  }

  void do_allreduce_sum(const Group& group, ScalarType type, MessageBuffer values, Stream stream) override {
    if (values.memory != MemoryKind::device) return Comm::do_allreduce_sum(group, type, values, stream);
    DeviceTransfer& t = transfer_for_device();
    std::vector<std::byte> host(values.bytes);
    t.to_host(values.data, host.data(), values.bytes, stream.handle);
    Comm::do_allreduce_sum(group, type, {host.data(), host.size(), MemoryKind::host}, {});
    t.from_host(host.data(), values.data, values.bytes, stream.handle);
  }

 private:
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
