// PD2BW_FAULT: one named point where one rank fails on purpose; and the watch of lost or stalled peers
// (fault.hpp).
#include "fault.hpp"

#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>
#include <unistd.h>

#include "pd2bw/error.hpp"

namespace pd2bw::executor {

namespace {

enum class FaultAction { throw_error, exit_now, kill_self, stop_self };

struct Fault {
  std::string point;
  int64_t rank = -1, step = 0;
  FaultAction action = FaultAction::throw_error;
};

bool parse_int(const std::string& text, int64_t& out) {
  if (text.empty()) return false;
  size_t used = 0;
  try {
    out = std::stoll(text, &used);
  } catch (...) {
    return false;
  }
  return used == text.size();
}

std::optional<Fault> parse(const std::string& spec) {
  std::vector<std::string> parts;
  size_t from = 0;
  for (size_t at; (at = spec.find(':', from)) != std::string::npos; from = at + 1) parts.push_back(spec.substr(from, at - from));
  parts.push_back(spec.substr(from));
  if (parts.size() < 3 || parts.size() > 4 || parts[0].empty()) return std::nullopt;
  Fault f;
  f.point = parts[0];
  if (!parse_int(parts[1], f.rank) || !parse_int(parts[2], f.step)) return std::nullopt;
  if (parts.size() == 4) {
    if (parts[3] == "throw") f.action = FaultAction::throw_error;
    else if (parts[3] == "exit") f.action = FaultAction::exit_now;
    else if (parts[3] == "kill") f.action = FaultAction::kill_self;
    else if (parts[3] == "stop") f.action = FaultAction::stop_self;
    else return std::nullopt;
  }
  return f;
}

const std::optional<Fault>& configured() {
  static const std::optional<Fault> fault = [] {
    const char* env = std::getenv("PD2BW_FAULT");
    if (env == nullptr || *env == '\0') return std::optional<Fault>{};
    auto f = parse(env);
    if (!f) std::fprintf(stderr, "pd2bw: warning: ignoring PD2BW_FAULT='%s' (want POINT:RANK:STEP[:throw|exit|kill|stop])\n", env);
    return f;
  }();
  return fault;
}

}  // namespace

void fault_point(std::string_view point, int64_t rank, int64_t step) {
  const auto& f = configured();
  if (!f || f->point != point || f->step != step || (f->rank >= 0 && f->rank != rank)) return;
  // Once per process: a point may be passed more than once for the same step (a stage's ops of two
  // steps interleave), and a stopped run must not stop again when continued.
  static std::atomic<bool> fired{false};
  if (fired.exchange(true)) return;
  switch (f->action) {
    case FaultAction::throw_error:
      throw Error(fmt::format("injected fault (PD2BW_FAULT={}:{}:{})", point, rank, step));
    case FaultAction::exit_now:
      std::fflush(nullptr);
      std::_Exit(1);
    case FaultAction::kill_self:
      std::fflush(nullptr);
      ::kill(::getpid(), SIGKILL);
      std::_Exit(137);  // not reached
    case FaultAction::stop_self:
      std::fflush(nullptr);
      ::kill(::getpid(), SIGSTOP);  // continues where it stopped on SIGCONT
      return;
  }
}

void watch_job_peers(Comm& comm, const PipelineConfig& c, const TrainOptions& o) {
  const int64_t n = comm.size(), me = comm.rank();
  std::vector<std::pair<int64_t, int64_t>> place = c.places();  // {position, replica} of each rank
  place.resize(static_cast<size_t>(n), {-1, -1});                // {-1, -1}: not in the rank table
  std::vector<std::string> names(static_cast<size_t>(n));
  std::vector<int64_t> peers;
  const auto [position, replica] = place[static_cast<size_t>(me)];
  for (int64_t r = 0; r < n; ++r) {
    const auto [p, k] = place[static_cast<size_t>(r)];
    names[static_cast<size_t>(r)] = fmt::format("rank {} (stage {}, replica {})", r, p, k);
    if (r != me && (me == 0 || r == 0 || p == position || k == replica)) peers.push_back(r);
  }
  comm.watch_peers(o.peer_timeout_s, std::move(peers), std::move(names));
  comm.set_stop_note(stop_note(o, -1));
}

std::string stop_note(const TrainOptions& o, int64_t step) {
  if (o.checkpoint_dir.empty()) return "no checkpoint was kept (no --checkpoint-dir), so a rerun starts over";
  if (step < 0 && o.resume)
    return fmt::format("the checkpoints in {} are intact; resume with --resume", o.checkpoint_dir);
  if (step < 0) return fmt::format("no checkpoint of this run is complete yet in {}, so a rerun starts over", o.checkpoint_dir);
  return fmt::format("the last complete checkpoint is step {} in {}; resume with --resume", step, o.checkpoint_dir);
}

}  // namespace pd2bw::executor
