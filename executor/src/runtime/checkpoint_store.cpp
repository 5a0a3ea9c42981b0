// The checkpoint directory's layout, lock, pre-flight checks, commit and pruning (checkpoint_store.hpp).
#include "checkpoint_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "fault.hpp"
#include "pd2bw/checked.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::executor {

namespace fs = std::filesystem;

namespace {

struct Found {
  int64_t step = 0;
  std::string path;
  bool complete = false;  // has its manifest
};

// The step of a "step-000120" directory name, or -1 for any other name.
int64_t step_of_name(const std::string& name) {
  constexpr std::string_view prefix = "step-";
  if (name.size() < prefix.size() + 6 || name.size() > prefix.size() + 18 || name.compare(0, prefix.size(), prefix) != 0)
    return -1;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// The step directories of `dir`, oldest first.
std::vector<Found> list_steps(const std::string& dir) {
  std::vector<Found> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t step = step_of_name(e.path().filename().string());
    std::error_code ec2;
    if (step >= 0 && e.is_symlink(ec2))  // a save would write through it, into wherever it points
      throw UsageError(fmt::format("the checkpoint directory {} has a symbolic link named like a checkpoint: {}", dir,
                                   e.path().string()),
                       "remove it: pd2bw makes its step directories itself and never writes through links");
    if (step < 0 || !e.is_directory(ec2)) continue;
    out.push_back({step, e.path().string(), fs::exists(e.path() / std::string(kManifestFileName), ec2)});
  }
  if (ec) throw UsageError(fmt::format("cannot list the checkpoint directory {}: {}", dir, ec.message()));
  std::sort(out.begin(), out.end(), [](const Found& a, const Found& b) { return a.step < b.step; });
  return out;
}

// Creates `dir` (and its parents); a regular file on the way is named.
void make_directory(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw UsageError(fmt::format("--checkpoint-dir {} is not a directory", dir), "give a directory path");
  fs::create_directories(dir, ec);
  if (!ec) return;
  for (fs::path p = fs::path(dir).parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
    std::error_code ec2;
    if (fs::exists(p, ec2) && !fs::is_directory(p, ec2))
      throw UsageError(fmt::format("--checkpoint-dir {} is under \"{}\", which is a file, not a directory", dir,
                                   p.string()),
                       "give a directory path");
  }
  throw UsageError(fmt::format("cannot create the checkpoint directory {}: {}", dir, ec.message()),
                   "check that the parent directory exists and is writable");
}

// Opens and flocks `dir`/.lock; returns the descriptor. Another trainer holding it is named by its pid.
int take_lock(const std::string& dir) {
  const std::string path = (fs::path(dir) / std::string(kLockFileName)).string();
  // Never through a link: pd2bw often runs as root, and a .lock linked to another file would have that
  // file truncated to a process id.
  const schemas::WriteFd opened = schemas::open_for_writing(path, schemas::WriteOpen::create_or_open, 0644, true);
  if (opened.fd < 0) {
    const bool planted = opened.err == ELOOP || opened.err == EMLINK || opened.err == EINVAL;
    throw UsageError(fmt::format("cannot lock the checkpoint directory {}: its lock {}: {}", dir, path, opened.why),
                     planted ? "remove it (pd2bw makes the lock a regular file of its own)"
                             : "the directory must be writable: give a writable --checkpoint-dir");
  }
  const int fd = opened.fd;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[64] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    const std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string("unknown");
    if (err == EWOULDBLOCK)
      throw UsageError(fmt::format("another pd2bw train is using the checkpoint directory {} (its lock {} is held "
                                   "by pid {})",
                                   dir, path, who.substr(0, who.find('\n'))),
                       "wait for that run to finish, or give another --checkpoint-dir");
    throw UsageError(fmt::format("cannot lock the checkpoint directory {}: {}", dir, std::strerror(err)));
  }
  const std::string pid = fmt::format("{}\n", static_cast<long>(::getpid()));
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    throw UsageError(fmt::format("cannot write the lock of the checkpoint directory {}: {}", dir, std::strerror(err)),
                     "check the free space and that the directory is writable");
  }
  return fd;
}

void check_free_space(const std::string& dir, int64_t need) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return;  // unknown: the save itself will say
  const auto avail = static_cast<long double>(st.f_bavail) * static_cast<long double>(st.f_frsize);
  if (avail >= static_cast<long double>(need)) return;
  throw UsageError(fmt::format("the checkpoint directory {} has {} free, but one checkpoint of this run takes about {}",
                               dir, schemas::format_bytes(static_cast<int64_t>(avail)), schemas::format_bytes(need)),
                   "free space on that file system, or give another --checkpoint-dir");
}

// Removes a step directory: its manifest first (so it is never seen half-removed as complete).
void remove_step(const Found& f) {
  std::error_code ec;
  if (f.complete) {
    fs::remove(fs::path(f.path) / std::string(kManifestFileName), ec);
    if (ec) throw Error(fmt::format("cannot remove the old checkpoint {}: {}", f.path, ec.message()));
    schemas::sync_directory(f.path);
  }
  fs::remove_all(f.path, ec);
  if (ec) throw Error(fmt::format("cannot remove the old checkpoint {}: {}", f.path, ec.message()));
}

// Temporaries of an interrupted `latest` swap.
void remove_temporaries(const std::string& dir) {
  std::error_code ec;
  const std::string prefix = std::string(kLatestFileName) + ".tmp.";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove(e.path(), ec);
  }
}

// The name `latest` holds, or "" when it is absent or malformed.
std::string read_latest(const std::string& dir) {
  const std::string path = (fs::path(dir) / std::string(kLatestFileName)).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  std::string text;
  try {
    text = schemas::read_input_file(path, "checkpoint pointer", 4096);
  } catch (const Error&) {
    return {};
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return step_of_name(text) >= 0 ? text : std::string();
}

std::string name_of(const Found& f) { return fs::path(f.path).filename().string(); }

void write_latest(const std::string& dir, const std::string& name) {
  schemas::write_file_atomic((fs::path(dir) / std::string(kLatestFileName)).string(), {name + "\n"});
}

// The newest complete checkpoint: the newest step directory, or the flat layout when it is newer.
ResumePoint choose_resume(const std::string& dir, const CheckpointIdentity& id, const Found* newest, bool legacy) {
  if (!newest && !legacy)
    throw UsageError(fmt::format("{} holds no complete checkpoint to resume", dir),
                     "a save that was interrupted leaves none; train without --resume to start over");
  const int64_t legacy_step = legacy ? check_checkpoint(id, dir) : -1;
  if (!newest || newest->step < legacy_step)
    return {legacy_step, dir, true,
            fmt::format("resume: {} in {} (step {}, the flat layout of earlier releases; new checkpoints go to "
                        "step directories beside it)",
                        kManifestFileName, dir, legacy_step)};
  ResumePoint p{check_checkpoint(id, newest->path), newest->path, false, ""};
  if (p.step != newest->step)
    throw SchemaError(fmt::format("{}/{} says it holds step {}, not the step {} its directory is named for",
                                  newest->path, kManifestFileName, p.step, newest->step),
                      "the checkpoint was moved or edited; remove that directory to resume from an older one");
  const std::string latest = read_latest(dir), name = name_of(*newest);
  p.note = fmt::format("resume: {} in {} (step {}){}", name, dir, p.step,
                       latest == name ? ""
                                      : fmt::format("; newer than what 'latest' names ({}): its save was interrupted "
                                                    "after the manifest was durable",
                                                    latest.empty() ? "nothing" : latest));
  return p;
}

}  // namespace

std::string step_directory(const std::string& dir, int64_t step) {
  return (fs::path(dir) / fmt::format("step-{:06}", step)).string();
}

int64_t checkpoint_bytes(const PipelineConfig& c, int64_t scalar_bytes) {
  const char* what = "the size of one checkpoint";
  const int64_t versions = c.schedule == schemas::Schedule::two_bw ? 2 : 1;
  const int64_t moments = c.optimizer.kind == schemas::Optimizer::adamw ? 2 : 1;
  int64_t numel = 0;
  for (int64_t l = 0; l < c.model.layer_count(); ++l)
    numel = checked_add(numel, layout_numel(layer_layout(c.model, l)), what);
  if (c.model.tie_embeddings && c.chunks_total() > 1)
    numel = checked_add(numel, checked_mul(c.model.vocab, c.model.d_model, what), what);
  const int64_t data = checked_mul(checked_mul(numel, versions + moments, what), scalar_bytes, what);
  return checked_add(data, checked_mul(c.depth + 1, int64_t{64} << 10, what), what);  // headers, manifest
}

CheckpointStore::CheckpointStore(const std::string& dir, const CheckpointIdentity& id, bool resume, int64_t keep,
                                 int64_t bytes_per_checkpoint)
    : dir_(dir), id_(id), keep_(keep) {
  if (keep < 1) throw UsageError(fmt::format("--keep must be >= 1, got {}", keep));
  make_directory(dir);
  lock_fd_ = take_lock(dir);
  try {
    fault_point("lock", 0, 0);
    const std::vector<Found> steps = list_steps(dir);
    const Found* newest = nullptr;
    for (const Found& f : steps)
      if (f.complete) newest = &f;
    std::error_code ec;
    const bool legacy = fs::exists(fs::path(dir) / std::string(kManifestFileName), ec);
    if (!resume && (newest || legacy))
      throw UsageError(fmt::format("{} already holds a checkpoint ({})", dir,
                                   newest ? name_of(*newest) : std::string(kManifestFileName)),
                       "pass --resume to continue it, or choose another --checkpoint-dir");
    if (resume) resume_ = choose_resume(dir, id_, newest, legacy);
    for (const Found& f : steps)
      if (!f.complete) remove_step(f);
    remove_temporaries(dir);
    // A commit interrupted after its manifest was durable: finish it by pointing `latest` at it.
    if (newest && read_latest(dir) != name_of(*newest)) write_latest(dir, name_of(*newest));
    schemas::sync_directory(dir);
    check_free_space(dir, bytes_per_checkpoint);
  } catch (...) {
    ::close(lock_fd_);
    throw;
  }
}

CheckpointStore::~CheckpointStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void CheckpointStore::commit(int64_t step, std::vector<CheckpointStage> stages) {
  const std::string at = step_directory(dir_, step);
  fault_point("manifest", 0, step);
  write_checkpoint_manifest(id_, at, step, std::move(stages));
  schemas::sync_directory(dir_);
  fault_point("commit", 0, step);
  write_latest(dir_, fs::path(at).filename().string());
  fault_point("latest", 0, step);
  std::vector<Found> steps = list_steps(dir_);
  int64_t kept = 0;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->step > step) continue;  // not ours to judge (cannot exist while we hold the lock)
    if (it->complete && kept < keep_) {
      ++kept;
      continue;
    }
    remove_step(*it);
    fault_point("prune", 0, step);
  }
  schemas::sync_directory(dir_);
}

void CheckpointStore::abandon(int64_t step) noexcept {
  const std::string at = step_directory(dir_, step);
  std::error_code ec;
  if (fs::exists(fs::path(at) / std::string(kManifestFileName), ec)) return;
  fs::remove_all(at, ec);
}

}  // namespace pd2bw::executor
