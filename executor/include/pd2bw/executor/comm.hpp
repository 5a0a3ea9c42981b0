// Messages between the ranks of one training job. A Comm is one rank's endpoint: point-to-point sends
// and receives matched by (source, tag), plus a group sum built on them whose reduction order is fixed,
// so every member gets bit-identical results and a pipelined run can equal a sequential one exactly.
// Transports: `threads` (ranks are threads of one process) here; `mpi` and `nccl` implement the same
// interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pd2bw::executor {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  // Sends `bytes` to rank `dst` (!= rank()) under `tag`; returns once `bytes` may be reused. Messages
  // from one source with one tag arrive in the order sent. Throws Error when the job was aborted.
  virtual void send(int64_t dst, uint64_t tag, std::span<const std::byte> bytes) = 0;
  // Blocks until a message from `src` with `tag` arrives and copies it into `bytes`, which must have
  // exactly the message's size. Throws Error on a size mismatch or when the job was aborted.
  virtual void recv(int64_t src, uint64_t tag, std::span<std::byte> bytes) = 0;
  // Makes every blocked or later call on any rank of the job throw Error(`why`): a rank that failed
  // calls it so that its peers stop instead of waiting forever.
  virtual void abort(const std::string& why) = 0;
};

// Element-wise sum over the ranks in `group` (this rank included; the same list on every member). The
// first member adds the others' buffers to its own in group order, ((g0 + g1) + g2) + ..., and sends
// the result back, so all members end with the same bits. `tag` must be unused by other traffic
// between these ranks. T = float or double.
template <typename T>
void group_sum(Comm& comm, std::span<const int64_t> group, uint64_t tag, std::span<T> values);

// `size` endpoints of an in-process job whose ranks are threads (each endpoint used by one thread).
// Throws UsageError for size < 1.
std::vector<std::unique_ptr<Comm>> make_threads_comms(int64_t size);

}  // namespace pd2bw::executor
