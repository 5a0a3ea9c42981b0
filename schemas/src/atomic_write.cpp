// The one way pd2bw replaces a file: write a temporary sibling, fsync it, close it, rename it onto the
// target, then fsync the directory. Without the two fsyncs a power cut after the rename can leave an empty
// or partial file under the final name (the rename reaches the disk before the data), or lose the rename.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::schemas {
namespace {

// Closes the descriptor on scope exit unless release() took it (so close errors can be checked).
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// Writes all of `bytes`, retrying short writes and interrupted calls. Returns 0 or an errno value.
int write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

// Writes the pieces to `fd`, syncs and closes it (always). Returns 0 or the errno of the first failure.
int write_synced(int fd, const std::vector<std::string_view>& pieces) {
  FdGuard guard(fd);
  for (std::string_view piece : pieces) {
    if (const int err = write_all(fd, piece)) return err;
  }
  if (::fsync(fd) != 0) return errno;
  if (::close(guard.release()) != 0) return errno;
  return 0;
}

// Syncs the directory that holds `path`, so the rename itself is durable. File systems that cannot sync a
// directory answer EINVAL; there is nothing more to do on those.
void sync_parent_directory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw Error(fmt::format("wrote \"{}\" but cannot open its directory to sync it: {}", path, std::strerror(err)),
                "check that the directory is readable");
  }
  FdGuard guard(fd);
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int err = errno;
    throw Error(fmt::format("wrote \"{}\" but cannot sync its directory: {}", path, std::strerror(err)),
                "check the disk");
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  // The pid keeps two processes that write the same path from sharing a temporary.
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    throw UsageError(fmt::format("cannot write \"{}\": {}", path, std::strerror(err)),
                     "check that the directory exists and is writable");
  }
  const auto discard_tmp = [&tmp] {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
  };
  if (const int err = write_synced(fd, pieces)) {
    discard_tmp();
    throw Error(fmt::format("error while writing \"{}\": {}", path, std::strerror(err)),
                "check the free space on the disk");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    discard_tmp();
    throw Error(fmt::format("cannot replace \"{}\": {}", path, ec.message()),
                "check that the path is not a directory and is writable");
  }
  sync_parent_directory(path);
}

}  // namespace pd2bw::schemas
