// Liveness of a rank's peers in a multi-process job (private to the mpi and nccl transports). A
// watchdog thread sends a small heartbeat to each watched peer every period and takes in theirs, over a
// communicator of its own; when a watched peer has sent nothing for the timeout (its process is gone,
// stopped, or its host unreachable), the watchdog prints which rank, with the job's stop note (where
// the last checkpoint is), and ends the whole job with MPI_Abort: a rank blocked in MPI or on a GPU
// stream waiting for NCCL cannot be woken any other way. A busy rank keeps beating (the thread runs
// beside its work), so only silence counts, not slowness. A rank whose training ended says goodbye and
// is watched no more.
//
// Rank 0 also prints the stop note when the launcher ends the job with SIGTERM (mpirun and srun do
// when any process dies, before they kill the rest), so the user learns where to resume from even when
// the launcher, not pd2bw, noticed the loss.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pd2bw::executor::mpi {

class PeerWatch {
 public:
  // Duplicates `parent` (collective over it, like every communicator made); watches nothing yet.
  explicit PeerWatch(MPI_Comm parent);
  // Says goodbye to the watched peers and stops the thread (waits at most about a second for the
  // goodbyes to leave; a communicator with sends still pending to a silent peer is left to MPI_Finalize).
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Watches `peers` (ranks of `parent`, not this one; the relation must be symmetric: every peer
  // watches this rank too, or it would sit silent) with `timeout_s` seconds of silence allowed (> 0;
  // 0 turns the watch off). names[r] is how messages name rank r. Once per PeerWatch; needs
  // MPI_THREAD_MULTIPLE (without it a warning is printed once and nothing is watched).
  void start(double timeout_s, std::vector<int64_t> peers, std::vector<std::string> names);
  // The sentence that ends the messages (where to resume from); replaced at every checkpoint.
  void set_note(const std::string& note);
  std::string note() const;

 private:
  void run();
  void drain(std::vector<double>& last_s, std::vector<char>& watched);
  void report(const std::vector<int64_t>& silent);
  double now_s() const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int64_t rank_ = 0, size_ = 0;
  double timeout_s_ = 0;
  std::vector<int64_t> peers_;
  std::vector<std::string> names_;
  mutable std::mutex mutex_;  // note_, stop_
  std::condition_variable wake_;
  std::string note_;
  bool stop_ = false;
  bool comm_free_ = true;  // false when goodbyes to a silent peer were still pending at the end
  std::thread thread_;
};

}  // namespace pd2bw::executor::mpi
