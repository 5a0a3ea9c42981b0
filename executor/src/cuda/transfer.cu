// Device-to-device messages of the threads transport (backend/device_transfer.hpp): a send copies the
// buffer into a pooled block on the sender's stream and records an event; the receive makes its own
// stream wait for that event and copies the block out, then records a second event after which the
// block may be reused. Neither side waits on the host, and no block is reused while a copy reads it.
#include <mutex>
#include <vector>

#include "cuda/cuda_api.hpp"
#include "cuda/cuda_factory.hpp"

namespace pd2bw::executor::cuda {

namespace {

// A staging block and its two events: `ready` after the copy in, `done` after the copy out.
struct Block {
  DeviceMemory memory;
  size_t bytes = 0;
  EventHandle ready, done;
};

class Pool {
 public:
  // A block of `bytes` whose last copy out has finished, or a new one.
  std::unique_ptr<Block> take(size_t bytes) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i]->bytes != bytes) continue;
        const cudaError_t state = cudaEventQuery(free_[i]->done.get());
        if (state == cudaErrorNotReady) continue;
        check(state, "cudaEventQuery (staging block)");
        std::unique_ptr<Block> b = std::move(free_[i]);
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        return b;
      }
    }
    auto b = std::make_unique<Block>();
    b->memory = device_alloc(bytes, "cudaMalloc (a message between stages)");
    b->bytes = bytes;
    b->ready = make_event(false);
    b->done = make_event(false);
    return b;
  }
  void give_back(std::unique_ptr<Block> b) {
    const std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(b));
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Block>> free_;
};

class CudaStaged final : public StagedMessage {
 public:
  CudaStaged(Pool& pool, std::unique_ptr<Block> block) : pool_(pool), block_(std::move(block)) {}
  ~CudaStaged() override {
    // Never delivered (an aborted job): the copy in may still be writing; wait for it before reuse.
    if (!delivered_) (void)cudaEventSynchronize(block_->ready.get());
    pool_.give_back(std::move(block_));
  }
  Block& block() { return *block_; }
  void mark_delivered() { delivered_ = true; }

 private:
  Pool& pool_;
  std::unique_ptr<Block> block_;
  bool delivered_ = false;
};

// Null stream: the caller wants the copy complete on return.
void finish(cudaStream_t stream) {
  if (stream == nullptr) check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
}

class CudaTransfer final : public DeviceTransfer {
 public:
  std::unique_ptr<StagedMessage> stage(const void* src, size_t bytes, void* stream) override {
    const auto s = static_cast<cudaStream_t>(stream);
    auto staged = std::make_unique<CudaStaged>(pool_, pool_.take(bytes));
    Block& b = staged->block();
    check(cudaMemcpyAsync(b.memory.get(), src, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync (send)");
    check(cudaEventRecord(b.ready.get(), s), "cudaEventRecord (send)");
    finish(s);
    return staged;
  }

  void deliver(StagedMessage& message, void* dst, void* stream) override {
    const auto s = static_cast<cudaStream_t>(stream);
    auto& staged = static_cast<CudaStaged&>(message);
    Block& b = staged.block();
    check(cudaStreamWaitEvent(s, b.ready.get(), 0), "cudaStreamWaitEvent (receive)");
    check(cudaMemcpyAsync(dst, b.memory.get(), b.bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync (receive)");
    check(cudaEventRecord(b.done.get(), s), "cudaEventRecord (receive)");
    staged.mark_delivered();
    finish(s);
  }

  void deliver_to_host(StagedMessage& message, void* host) override {
    auto& staged = static_cast<CudaStaged&>(message);
    Block& b = staged.block();
    check(cudaEventSynchronize(b.ready.get()), "cudaEventSynchronize (receive)");
    check(cudaMemcpy(host, b.memory.get(), b.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (receive to host)");
    staged.mark_delivered();
  }

  void to_host(const void* src, void* host, size_t bytes, void* stream) override {
    const auto s = static_cast<cudaStream_t>(stream);
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (device to host)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }

  void from_host(const void* host, void* dst, size_t bytes, void* stream) override {
    const auto s = static_cast<cudaStream_t>(stream);
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (host to device)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }

 private:
  Pool pool_;
};

}  // namespace

DeviceTransfer& cuda_device_transfer() {
  static CudaTransfer transfer;
  return transfer;
}

}  // namespace pd2bw::executor::cuda
