// What the MPI parts of the executor share (private; with peer_watch.hpp, the only headers that include
// mpi.h): error checks, waiting without spinning the CPU, and the factories of the MPI comm and process
// group.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "pd2bw/executor/comm.hpp"
#include "pd2bw/executor/process_group.hpp"
#include "plugin/loader.hpp"

namespace pd2bw::executor::mpi {

// Throws Error("<what> failed: <MPI's message>") when rc is not MPI_SUCCESS. The communicators pd2bw
// makes return errors (MPI_ERRORS_RETURN) instead of aborting, so that they surface as pd2bw errors.
void check(int rc, const char* what);

// A duplicate of `parent` that returns errors instead of aborting, with this process's rank and the
// communicator's size in it.
struct Duplicate {
  MPI_Comm comm = MPI_COMM_NULL;
  int64_t rank = 0, size = 0;
};
Duplicate duplicate(MPI_Comm parent);

// Polls with a growing pause: spins for the first 20 us (low latency), yields until 200 us, then
// sleeps 40 us between tests, so a process waiting for a slow peer leaves the core to processes that
// share it.
class Backoff {
 public:
  void pause();

 private:
  int64_t polls_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// Waits for `request` (polling with Backoff).
void wait(MPI_Request& request);

// Point-to-point host messages over a communicator of its own (a duplicate of `parent`, so its traffic
// meets no one else's), any tag in [0, kMaxTag]. send copies the message and returns at once (the copy
// is freed when MPI is done with it); recv waits (polling with Backoff) and checks the size. Messages of
// one (source, tag) arrive in order, and so do those of one source received with recv_any.
class Port {
 public:
  // Messages above `piece_bytes` travel as several (MPI counts are ints); tests make it small.
  static constexpr size_t kPieceBytes = size_t{1} << 30;
  explicit Port(MPI_Comm parent, size_t piece_bytes = kPieceBytes);
  ~Port();  // waits (bounded) for its sends to complete
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;
  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  void send(int64_t dst, int64_t tag, const void* data, size_t bytes);
  // Throws Error when the message from src has another size than `bytes`.
  void recv(int64_t src, int64_t tag, void* data, size_t bytes);
  // Receives the next message from src, whatever its tag, into `data` (exactly `bytes`); returns its tag.
  int64_t recv_any(int64_t src, void* data, size_t bytes);

 private:
  struct Pending {
    std::vector<std::byte> copy;
    std::vector<MPI_Request> requests;
  };
  void reap();
  // Waits for the next message from src with `tag` (MPI_ANY_TAG: any); returns its size and tag.
  std::pair<int, int> probe(int64_t src, int tag);
  void receive_pieces(int64_t src, int tag, void* data, size_t bytes);
  int piece(size_t total, size_t offset) const;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int64_t rank_ = 0, size_ = 0;
  size_t piece_bytes_;
  std::deque<Pending> pending_;
};

// A Comm over `world` (duplicated: its traffic cannot meet anyone else's). Host memory only.
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm world);

// A Comm of a device transport ("nccl") over `world`, on CUDA device `device`, from the transport
// registry (which loads the transport's plugin); throws UsageError when this build lacks the transport
// or its plugin cannot be loaded.
inline std::unique_ptr<Comm> make_device_comm(std::string_view transport, MPI_Comm world, int64_t device) {
  return executor::make_device_comm(transport, &world, device);
}

// Initialises MPI and returns this process's group (mpi_process_group.cpp).
std::unique_ptr<ProcessGroup> join();

}  // namespace pd2bw::executor::mpi
