// Private helpers of pd2bw_schemas for raw file descriptors: a closing guard, complete writes and reads
// that retry short and interrupted calls, and names for the kinds of file a path can be.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>
#include <vector>

namespace pd2bw::schemas::detail {

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

// Writes every piece to `fd`, retrying short writes and EINTR. Returns 0 or the errno of the failure.
inline int write_pieces(int fd, const std::vector<std::string_view>& pieces) {
  for (std::string_view bytes : pieces) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd, bytes.data(), bytes.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      if (n == 0) return EIO;  // a device that accepts nothing would loop forever
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  return 0;
}

// "a directory", "a FIFO", "a character device", ... for the st_mode of a path (messages).
inline std::string_view file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// Syncs the directory `dir` so a rename or create inside it is durable. File systems that cannot sync
// a directory answer EINVAL; there is nothing more to do on those. Throws Error naming `path` (the file
// the sync is for).
void sync_directory_of(const std::string& dir, const std::string& path);

// The path a write to `path` lands on: symbolic links followed (at most 40), the final component need
// not exist. Relative link targets are taken relative to the link's directory.
std::string follow_links(const std::string& path);

// Replaces `path` through a temporary sibling, fsynced and renamed, then fsyncs the directory. The
// temporary gets `mode` (before the umask), or exactly `mode` when keep_mode (an existing file's bits).
void write_atomic(const std::string& path, const std::vector<std::string_view>& pieces, mode_t mode, bool keep_mode);

}  // namespace pd2bw::schemas::detail
