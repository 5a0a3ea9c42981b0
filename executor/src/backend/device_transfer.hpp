// Device-memory moves for the in-process (`threads`) transport, so that stages on one GPU pass their
// activations and gradients with device-to-device copies ordered on their streams. A device backend
// provides the implementation; the registry (the only code that knows which backends were built) hands
// it out. No CUDA type appears here: streams are the opaque handles of Backend::native_stream().
// Private to the executor.
#pragma once

#include <cstddef>
#include <memory>

namespace pd2bw::executor {

// A message copied into device memory of its own when it was sent, kept in the receiver's mailbox.
// Destroying it returns its memory for reuse once every copy that reads it has finished.
class StagedMessage {
 public:
  virtual ~StagedMessage() = default;
};

class DeviceTransfer {
 public:
  virtual ~DeviceTransfer() = default;
  // Copies `bytes` of device memory at `src` into a block of the message's own, after the work queued
  // so far on `stream` (null: the copy is complete on return). The caller may reuse `src` for work
  // queued later on `stream`. Throws Error.
  virtual std::unique_ptr<StagedMessage> stage(const void* src, size_t bytes, void* stream) = 0;
  // Copies a staged message into device memory at `dst` (of the message's size), ordered after its
  // staging copy and before the work queued later on `stream` (null: complete on return). Throws Error.
  virtual void deliver(StagedMessage& message, void* dst, void* stream) = 0;
  // Copies a staged message into host memory; complete on return. Throws Error.
  virtual void deliver_to_host(StagedMessage& message, void* host) = 0;
  // Host <-> device copies ordered on `stream` (may be null) and complete on return. Throws Error.
  virtual void to_host(const void* src, void* host, size_t bytes, void* stream) = 0;
  virtual void from_host(const void* host, void* dst, size_t bytes, void* stream) = 0;
};

// The process's device transfer, or null when this build has no device backend. Defined in the
// registry.
DeviceTransfer* device_transfer();

}  // namespace pd2bw::executor
