// The watchdog of a rank's peers (peer_watch.hpp): heartbeats over a communicator of its own, the
// report that names the silent ranks and ends the job, and rank 0's note on SIGTERM.
#include "peer_watch.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mpi_internal.hpp"

namespace pd2bw::executor::mpi {

namespace {

constexpr int kAliveTag = 1;  // "still here"
constexpr int kByeTag = 2;    // "my training ended: stop watching me"
const int64_t kBeat = 0;      // the payload of both (what counts is that it came)

// What rank 0 prints when the launcher sends SIGTERM. Two slots, so that the handler never reads the
// one being written; `current` is the complete one (-1: none).
struct TermNote {
  char text[2][2048] = {};
  size_t length[2] = {};
  std::atomic<int> current{-1};
};
TermNote g_term;
std::atomic<bool> g_reported{false};  // this process already said why the job ends
struct sigaction g_previous_term = {};
bool g_term_installed = false;

extern "C" void on_term(int sig) {
  const int c = g_term.current.load();
  if (c >= 0 && !g_reported.load()) {
    const ssize_t n = ::write(STDERR_FILENO, g_term.text[c], g_term.length[c]);
    (void)n;
  }
  ::sigaction(SIGTERM, &g_previous_term, nullptr);  // then end as the launcher meant
  ::raise(sig);
}

void set_term_note(const std::string& note) {
  const std::string text = fmt::format(
      "pd2bw: error: rank 0: ended by SIGTERM (mpirun and srun end every rank when one of them dies, or when the job "
      "is cancelled; their message names the rank); {}\n",
      note);
  const int slot = g_term.current.load() == 0 ? 1 : 0;
  const size_t n = std::min(text.size(), sizeof g_term.text[slot] - 1);
  std::memcpy(g_term.text[slot], text.data(), n);
  g_term.length[slot] = n;
  g_term.current.store(slot);
  if (g_term_installed) return;
  struct sigaction action = {};
  action.sa_handler = on_term;
  sigemptyset(&action.sa_mask);
  if (::sigaction(SIGTERM, &action, &g_previous_term) == 0) g_term_installed = true;
}

void clear_term_note() {
  g_term.current.store(-1);
  if (g_term_installed) ::sigaction(SIGTERM, &g_previous_term, nullptr);
  g_term_installed = false;
}

}  // namespace

PeerWatch::PeerWatch(MPI_Comm parent) {
  const Duplicate d = duplicate(parent);
  comm_ = d.comm;
  rank_ = d.rank;
  size_ = d.size;
}

PeerWatch::~PeerWatch() {
  if (thread_.joinable()) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  if (rank_ == 0) clear_term_note();
  if (comm_free_) MPI_Comm_free(&comm_);
}

double PeerWatch::now_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void PeerWatch::start(double timeout_s, std::vector<int64_t> peers, std::vector<std::string> names) {
  if (thread_.joinable() || !(timeout_s > 0) || peers.empty()) return;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      std::fprintf(stderr, "pd2bw: warning: rank %lld: this MPI gives no MPI_THREAD_MULTIPLE, so lost or stalled ranks "
                           "are not watched (--peer-timeout has no effect)\n",
                   static_cast<long long>(rank_));
    return;
  }
  timeout_s_ = timeout_s;
  peers_ = std::move(peers);
  names_ = std::move(names);
  thread_ = std::thread([this] {
    try {
      run();
    } catch (...) {  // nothing here may end the process but a report; a failed watch just stops watching
    }
  });
}

void PeerWatch::set_note(const std::string& note) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    note_ = note;
  }
  if (rank_ == 0) set_term_note(note);
}

std::string PeerWatch::note() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return note_;
}

// Takes in every heartbeat that has arrived; a goodbye ends the watch of its sender.
void PeerWatch::drain(std::vector<double>& last_s, std::vector<char>& watched) {
  for (;;) {
    int found = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &found, &status) != MPI_SUCCESS || !found) return;
    int64_t payload = 0;
    if (MPI_Recv(&payload, 1, MPI_INT64_T, status.MPI_SOURCE, status.MPI_TAG, comm_, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return;
    const auto from = static_cast<size_t>(status.MPI_SOURCE);
    last_s[from] = now_s();
    if (status.MPI_TAG == kByeTag) watched[from] = 0;
  }
}

// Each period: take in the peers' beats, send ours (one in flight per peer at most, so a stopped peer
// does not pile them up), and end the job when a watched peer has been silent for the timeout.
void PeerWatch::run() {
  const auto period = std::chrono::duration<double>(std::clamp(timeout_s_ / 10, 0.05, 1.0));
  const auto n = static_cast<size_t>(size_);
  std::vector<double> last_s(n, now_s());
  std::vector<char> watched(n, 0);
  for (const int64_t p : peers_) watched[static_cast<size_t>(p)] = 1;
  std::vector<MPI_Request> beats(n, MPI_REQUEST_NULL);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    drain(last_s, watched);
    const double now = now_s();
    std::vector<int64_t> silent;
    for (const int64_t p : peers_) {
      const auto i = static_cast<size_t>(p);
      if (!watched[i]) continue;
      int done = 1;
      if (beats[i] != MPI_REQUEST_NULL && MPI_Test(&beats[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        beats[i] = MPI_REQUEST_NULL;  // an error: forget it, the silence test decides
      if (done && MPI_Isend(&kBeat, 1, MPI_INT64_T, static_cast<int>(p), kAliveTag, comm_, &beats[i]) != MPI_SUCCESS)
        beats[i] = MPI_REQUEST_NULL;
      if (now - last_s[i] > timeout_s_) silent.push_back(p);
    }
    if (!silent.empty()) report(silent);
    lock.lock();
    wake_.wait_for(lock, period, [this] { return stop_; });
  }
  lock.unlock();
  std::vector<MPI_Request> pending;
  for (const int64_t p : peers_) {
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Isend(&kBeat, 1, MPI_INT64_T, static_cast<int>(p), kByeTag, comm_, &r) == MPI_SUCCESS) pending.push_back(r);
  }
  for (const MPI_Request r : beats)
    if (r != MPI_REQUEST_NULL) pending.push_back(r);
  const double deadline = now_s() + 1.0;
  int all = pending.empty() ? 1 : 0;
  while (!all && now_s() < deadline) {
    if (MPI_Testall(static_cast<int>(pending.size()), pending.data(), &all, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
    if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  comm_free_ = all != 0;
}

// Names the silent ranks with the job's note and ends every process of the job.
void PeerWatch::report(const std::vector<int64_t>& silent) {
  std::string who;
  for (size_t k = 0; k < silent.size(); ++k) {
    const auto r = static_cast<size_t>(silent[k]);
    const std::string name = r < names_.size() ? names_[r] : fmt::format("rank {}", r);
    who += (k == 0 ? "" : k + 1 == silent.size() ? " and " : ", ") + name;
  }
  std::string note;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    note = note_;
  }
  const std::string text = fmt::format(
      "pd2bw: error: rank {}: {} sent nothing for {:g} s: lost or stalled{}{}\nhint: find out why (its process, its "
      "host, the link to it); --peer-timeout SECONDS sets how long a silent rank is waited for (0: forever)\n",
      rank_, who, timeout_s_, note.empty() ? "" : "; ", note);
  g_reported.store(true);
  std::fputs(text.c_str(), stderr);
  std::fflush(nullptr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // not reached
}

}  // namespace pd2bw::executor::mpi
