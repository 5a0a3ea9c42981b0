// The metrics log: opening (with the resume truncation), checked appends and syncs (metrics_log.hpp).
#include "metrics_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "pd2bw/error.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::executor {

namespace {

// The step of a record line `{"step": N, ...`, or -1 when the line is not one.
int64_t record_step(std::string_view line) {
  constexpr std::string_view prefix = "{\"step\": ";
  if (line.empty() || line.substr(0, prefix.size()) != prefix || line.back() != '}') return -1;
  int64_t step = 0;
  size_t i = prefix.size();
  for (; i < line.size() && line[i] >= '0' && line[i] <= '9' && i < prefix.size() + 18; ++i) step = step * 10 + (line[i] - '0');
  return i > prefix.size() && i < line.size() && line[i] == ',' ? step : -1;
}

// Where a resumed log is cut: after the last complete record of a step <= resume_step that precedes
// every later step. Throws UsageError for a complete line that is not a record.
int64_t resume_cut(const std::string& text, int64_t resume_step, const std::string& path) {
  size_t at = 0;
  for (int64_t line_no = 1; at < text.size(); ++line_no) {
    const size_t end = text.find('\n', at);
    if (end == std::string::npos) return static_cast<int64_t>(at);  // a torn last line
    const int64_t step = record_step(std::string_view(text).substr(at, end - at));
    if (step < 0)
      throw UsageError(fmt::format("the metrics log {} has a line that is not a pd2bw train record (line {})", path,
                                   line_no),
                       "resume with the --log file of the run, or give another --log");
    if (step > resume_step) return static_cast<int64_t>(at);
    at = end + 1;
  }
  return static_cast<int64_t>(at);
}

[[noreturn]] void open_failed(const std::string& path, int err) {
  throw UsageError(fmt::format("cannot write the metrics log {}: {}", path, std::strerror(err)),
                   "check that its directory exists and is writable");
}

}  // namespace

std::string json_number(double value, int digits) {
  if (!std::isfinite(value)) return "null";
  return digits < 0 ? fmt::format("{:.17g}", value) : fmt::format("{:.{}f}", value, digits);
}

MetricsLog::MetricsLog(const std::string& path, bool resume, int64_t resume_step) : path_(path) {
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode))
    throw UsageError(fmt::format("the metrics log {} is a directory", path), "give the path of a file");
  regular_ = !exists || S_ISREG(st.st_mode);
  if (!regular_) {
    // A device or pipe (/dev/stdout): appended to as named, never created or truncated. O_NONBLOCK so a
    // FIFO without a reader fails at once instead of waiting; cleared for the writes.
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd_ < 0) open_failed(path, errno);
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
    return;
  }
  // A file: the links the user named are followed explicitly, the file itself is opened without
  // following one (schemas::open_for_writing).
  const std::string target = schemas::output_target(path);
  int64_t cut = 0;
  if (resume && exists) {
    const std::string text = schemas::read_input_file(path, "metrics log", schemas::kMaxDataBytes);
    cut = resume_cut(text, resume_step, path);
  }
  const auto how = !resume ? schemas::WriteOpen::truncate
                           : exists ? schemas::WriteOpen::existing : schemas::WriteOpen::create_or_open;
  const schemas::WriteFd opened = schemas::open_for_writing(target, how, 0666);
  if (opened.fd < 0)
    throw UsageError(fmt::format("cannot write the metrics log {}: {}", path, opened.why),
                     "check that its directory exists and is writable");
  fd_ = opened.fd;
  if (resume && exists && ::ftruncate(fd_, cut) != 0) open_failed(path, errno);
  if (::lseek(fd_, 0, SEEK_END) < 0) open_failed(path, errno);
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::append(const std::string& line) {
  const std::string text = line + "\n";
  std::string_view rest = text;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      throw Error(fmt::format("cannot write the metrics log {}: {}", path_, std::strerror(err)),
                  "free space on its disk; the checkpoints written so far are intact");
    }
    rest.remove_prefix(static_cast<size_t>(n));
  }
}

void MetricsLog::sync() {
  if (regular_ && ::fsync(fd_) != 0)
    throw Error(fmt::format("cannot sync the metrics log {}: {}", path_, std::strerror(errno)), "check the disk");
}

}  // namespace pd2bw::executor
