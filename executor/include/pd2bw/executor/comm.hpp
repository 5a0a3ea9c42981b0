// Messages between the ranks of one training job. A Comm is one rank's endpoint: point-to-point sends
// and receives matched by (source, tag), groups of ranks made once, and a sum over a group whose
// default reduction order is fixed, so every member gets bit-identical results and a pipelined run can
// equal a sequential one exactly.
// Transports: `threads` (ranks are threads of one process) here; `mpi` and `nccl` implement the same
// interface. Buffers are described by address, size and memory kind, with an optional opaque stream, so
// a device transport can take GPU buffers without this header naming CUDA, NCCL or MPI types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pd2bw::executor {

// Tags fit MPI's guaranteed range [0, 32767]. Callers use [0, kMaxUserTag]; the tags above are the
// Comm's own (collectives: kMaxUserTag + 1 + group id; kMaxTag: making a group).
inline constexpr int64_t kMaxTag = 32767;
inline constexpr int64_t kMaxUserTag = 16383;

enum class MemoryKind : uint8_t { host, device };
enum class ScalarType : uint8_t { f32, f64 };

// A contiguous buffer the caller owns and keeps alive for the call (and, on a stream, until the stream
// reaches the operation). `device` memory is only accepted by device transports.
struct ConstMessageBuffer {
  const void* data = nullptr;
  size_t bytes = 0;
  MemoryKind memory = MemoryKind::host;
};
struct MessageBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  MemoryKind memory = MemoryKind::host;
  operator ConstMessageBuffer() const { return {data, bytes, memory}; }  // NOLINT(google-explicit-constructor)
};

template <typename T>
MessageBuffer host_buffer(std::span<T> values) {
  return {values.data(), values.size_bytes(), MemoryKind::host};
}
template <typename T>
ConstMessageBuffer host_buffer(std::span<const T> values) {
  return {values.data(), values.size_bytes(), MemoryKind::host};
}

// An opaque stream handle (e.g. a cudaStream_t cast to void*) a device transport orders its work on;
// null means "complete before returning". The threads transport ignores it.
struct Stream {
  void* handle = nullptr;
};

// A set of ranks made once by Comm::group and reused for every collective over them. Copyable; a copy
// refers to the same group.
class Group {
 public:
  Group() = default;
  const std::vector<int64_t>& members() const;  // in the order given to Comm::group
  int64_t size() const { return static_cast<int64_t>(members().size()); }
  int64_t position() const;                     // this rank's index in members()
  int64_t id() const;                           // agreed by the members; unique among this rank's groups
  // What the transport attached (e.g. a device communicator); null for the threads transport.
  const std::shared_ptr<void>& native() const;

 private:
  friend class Comm;
  struct State;
  std::shared_ptr<const State> state_;
};

class Comm {
 public:
  Comm();
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  // Distinct for every Comm this process ever made: lets a caller cache per-Comm state (e.g. groups).
  uint64_t serial() const { return serial_; }
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  // Whether send, recv and allreduce_sum take buffers of `kind` (host memory always; device memory only
  // on a device transport). A caller with device buffers and a host-only Comm stages them through host
  // memory.
  virtual bool accepts(MemoryKind kind) const { return kind == MemoryKind::host; }

  // Sends `data` to rank `dst` (!= rank()) under `tag` in [0, kMaxUserTag]; returns once `data` may be
  // reused and never waits for the matching receive (the schedules send before they receive). Messages
  // from one source with one tag arrive in the order sent. Throws UsageError for a bad peer or tag, Error
  // when the job was aborted.
  void send(int64_t dst, int64_t tag, ConstMessageBuffer data, Stream stream = {});
  // Blocks until the oldest message from `src` with `tag` arrives and copies it into `data`, which must
  // have exactly the message's size. Throws UsageError for a bad peer or tag, Error on a size mismatch
  // or when the job was aborted.
  void recv(int64_t src, int64_t tag, MessageBuffer data, Stream stream = {});
  // Host-memory shorthands.
  template <typename T>
  void send(int64_t dst, int64_t tag, std::span<const T> values) { send(dst, tag, host_buffer(values)); }
  template <typename T>
  void recv(int64_t src, int64_t tag, std::span<T> values) { recv(src, tag, host_buffer(values)); }

  // Makes a group of `members` (distinct ranks, this rank among them); collective over the members, who
  // all call it with the same list and make the groups they share in the same order (as with MPI
  // communicators). Throws UsageError for a bad list or too many groups (16383), Error on abort.
  Group group(std::vector<int64_t> members);

  // Element-wise sum over `group`'s members, in place, on every member (all call it, in the same order
  // as their other collectives on that group). The default sends every buffer to the first member, which
  // adds them in member order, ((g0 + g1) + g2) + ..., and sends the result back: all members get the
  // same bits, and that sum is the reference a native override is compared with. Throws UsageError
  // when this rank is not `group`'s (made by this Comm), Error when the job was aborted.
  void allreduce_sum(const Group& group, ScalarType type, MessageBuffer values, Stream stream = {});
  void allreduce_sum(const Group& group, std::span<float> values) {
    allreduce_sum(group, ScalarType::f32, host_buffer(values));
  }
  void allreduce_sum(const Group& group, std::span<double> values) {
    allreduce_sum(group, ScalarType::f64, host_buffer(values));
  }

  // Makes every blocked or later call on any rank of the job throw Error(`why`): a rank that failed
  // calls it so that its peers stop instead of waiting forever.
  virtual void abort(const std::string& why) = 0;

  // Lost and stalled peers (transports of one process per rank; the threads transport ignores both):
  // from now on this rank and `peers` exchange heartbeats beside their work, and a peer silent for
  // `timeout_s` seconds (0: never checked) ends the whole job with a message that names it (names[r]
  // names rank r) and ends with the stop note. Every rank calls it once, with a symmetric relation
  // (each of its peers lists it too); a rank's goodbye, when its Comm is destroyed, ends its watch.
  virtual void watch_peers(double /*timeout_s*/, std::vector<int64_t> /*peers*/, std::vector<std::string> /*names*/) {}
  // The sentence that ends such a message (where to resume from); replaced at every checkpoint.
  virtual void set_stop_note(const std::string& /*note*/) {}
  // The stop note set last (empty: none, or a transport that keeps none).
  virtual std::string stop_note() const { return {}; }

 protected:
  // The transport's point-to-point; peer, tag (<= kMaxTag) and group checks are done by the callers.
  virtual void do_send(int64_t dst, int64_t tag, ConstMessageBuffer data, Stream stream) = 0;
  virtual void do_recv(int64_t src, int64_t tag, MessageBuffer data, Stream stream) = 0;
  // What a transport attaches to a new group (collective over its members); none by default.
  virtual std::shared_ptr<void> make_native_group(const std::vector<int64_t>& members);
  // The sum; the default is the fixed-order one described at allreduce_sum (host memory only).
  virtual void do_allreduce_sum(const Group& group, ScalarType type, MessageBuffer values, Stream stream);

 private:
  void check_peer(int64_t peer) const;
  int64_t agree_on_group_id(const std::vector<int64_t>& members, int64_t position);
  uint64_t serial_;
  int64_t next_group_id_ = 0;
};

// `size` endpoints of an in-process job whose ranks are threads (each endpoint used by one thread).
// Throws UsageError for size < 1.
std::vector<std::unique_ptr<Comm>> make_threads_comms(int64_t size);

// Runs body(comm) for every endpoint of `comms` on its own thread (comms[0] on the calling one). When a
// rank throws, the job is aborted so that its peers stop waiting, and the first failure is rethrown once
// every thread has finished.
void run_on_threads(std::span<const std::unique_ptr<Comm>> comms, const std::function<void(Comm&)>& body);

}  // namespace pd2bw::executor
