// The `mpi` transport: one process per rank. A send copies the message and hands the copy to
// MPI_Isend, so it returns at once and the transfer overlaps whatever the rank does next; the copies
// are freed as their sends complete. A receive probes (polling, see Backoff) for the message, checks
// its size and receives it. Messages above 1 GiB travel as several pieces, since MPI counts are ints;
// MPI keeps messages of one (source, tag) in order, which is all Comm promises.
#include <fmt/format.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "mpi_internal.hpp"
#include "pd2bw/error.hpp"
#include "peer_watch.hpp"

namespace pd2bw::executor::mpi {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(fmt::format("{} failed: {}", what, std::string(text, static_cast<size_t>(std::max(length, 0)))));
}

// Spinning answers a message that is about to arrive within microseconds; a long wait (a neighbour
// still computing) costs at most the sleep's length in latency and almost no CPU.
void Backoff::pause() {
  using namespace std::chrono;
  const auto now = steady_clock::now();
  if (polls_++ == 0) start_ = now;
  const auto waited = now - start_;
  if (waited < microseconds(20)) return;
  if (waited < microseconds(200)) {
    sched_yield();
    return;
  }
  std::this_thread::sleep_for(microseconds(40));
}

void wait(MPI_Request& request) {
  Backoff backoff;
  for (;;) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    backoff.pause();
  }
}

// Bytes of the piece of a `total`-byte message that starts at `offset` (a 0-byte message is one piece).
int Port::piece(size_t total, size_t offset) const { return static_cast<int>(std::min(piece_bytes_, total - offset)); }

Duplicate duplicate(MPI_Comm parent) {
  Duplicate d;
  check(MPI_Comm_dup(parent, &d.comm), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(d.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  int rank = 0, size = 0;
  check(MPI_Comm_rank(d.comm, &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(d.comm, &size), "MPI_Comm_size");
  d.rank = rank;
  d.size = size;
  return d;
}

Port::Port(MPI_Comm parent, size_t piece_bytes) : piece_bytes_(std::clamp<size_t>(piece_bytes, 1, kPieceBytes)) {
  const Duplicate d = duplicate(parent);
  comm_ = d.comm;
  rank_ = d.rank;
  size_ = d.size;
}

Port::~Port() {
  // Every send of a finished job has been received; still, never wait forever on a broken one.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!pending_.empty() && std::chrono::steady_clock::now() < deadline) {
    try {
      reap();
    } catch (...) {
      break;
    }
    if (!pending_.empty()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (pending_.empty()) MPI_Comm_free(&comm_);
}

void Port::send(int64_t dst, int64_t tag, const void* data, size_t bytes) {
  reap();
  Pending& p = pending_.emplace_back();
  const auto* from = static_cast<const std::byte*>(data);
  p.copy.assign(from, from + bytes);
  size_t offset = 0;
  do {
    const int n = piece(bytes, offset);
    MPI_Request& request = p.requests.emplace_back();
    check(MPI_Isend(p.copy.data() + offset, n, MPI_BYTE, static_cast<int>(dst), static_cast<int>(tag), comm_, &request),
          "MPI_Isend");
    offset += static_cast<size_t>(n);
  } while (offset < bytes);
}

void Port::recv(int64_t src, int64_t tag, void* data, size_t bytes) { receive_pieces(src, static_cast<int>(tag), data, bytes); }

int64_t Port::recv_any(int64_t src, void* data, size_t bytes) {
  const int tag = probe(src, MPI_ANY_TAG).second;
  receive_pieces(src, tag, data, bytes);
  return tag;
}

void Port::receive_pieces(int64_t src, int tag, void* data, size_t bytes) {
  auto* to = static_cast<std::byte*>(data);
  size_t offset = 0;
  do {
    const int want = piece(bytes, offset);
    const int got = probe(src, tag).first;
    if (got != want)
      throw Error(fmt::format("rank {}: message from rank {} (tag {}) has {} bytes, expected {}", rank_, src, tag, got, want));
    check(MPI_Recv(to + offset, want, MPI_BYTE, static_cast<int>(src), tag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
    offset += static_cast<size_t>(want);
  } while (offset < bytes);
}

// Frees the copies of sends that have completed (and lets MPI progress the others).
void Port::reap() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    int done = 0;
    check(MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &done, MPI_STATUSES_IGNORE),
          "MPI_Testall");
    it = done ? pending_.erase(it) : std::next(it);
  }
}

std::pair<int, int> Port::probe(int64_t src, int tag) {
  Backoff backoff;
  for (;;) {
    int found = 0;
    MPI_Status status;
    check(MPI_Iprobe(static_cast<int>(src), tag, comm_, &found, &status), "MPI_Iprobe");
    if (found) {
      int count = 0;
      check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
      return {count, status.MPI_TAG};
    }
    reap();
    backoff.pause();
  }
}

namespace {

class MpiComm final : public Comm {
 public:
  explicit MpiComm(MPI_Comm world) : port_(world), watch_(world) {}
  int64_t rank() const override { return port_.rank(); }
  int64_t size() const override { return port_.size(); }

  void watch_peers(double timeout_s, std::vector<int64_t> peers, std::vector<std::string> names) override {
    watch_.start(timeout_s, std::move(peers), std::move(names));
  }
  void set_stop_note(const std::string& note) override { watch_.set_note(note); }
  std::string stop_note() const override { return watch_.note(); }

  // A peer that cannot be told to stop is stopped with the whole job.
  void abort(const std::string& why) override {
    std::fprintf(stderr, "pd2bw: error: rank %lld ends the job: %s\n", static_cast<long long>(rank()), why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 protected:
  void do_send(int64_t dst, int64_t tag, ConstMessageBuffer data, Stream) override {
    host_only(data.memory);
    port_.send(dst, tag, data.data, data.bytes);
  }
  void do_recv(int64_t src, int64_t tag, MessageBuffer data, Stream) override {
    host_only(data.memory);
    port_.recv(src, tag, data.data, data.bytes);
  }

 private:
  static void host_only(MemoryKind memory) {
    if (memory != MemoryKind::host) throw UsageError("the mpi transport moves host memory only; device buffers need nccl");
  }
  Port port_;
  PeerWatch watch_;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm world) { return std::make_unique<MpiComm>(world); }

}  // namespace pd2bw::executor::mpi
