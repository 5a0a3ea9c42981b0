// The one way pd2bw replaces a file: write a temporary sibling, fsync it, close it, rename it onto the
// target, then fsync the directory. Without the two fsyncs a power cut after the rename can leave an empty
// or partial file under the final name (the rename reaches the disk before the data), or lose the rename.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "fd_io.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::schemas {
namespace detail {

void sync_directory_of(const std::string& dir, const std::string& path) {
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

std::string follow_links(const std::string& path) {
  std::filesystem::path p(path);
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!std::filesystem::is_symlink(std::filesystem::symlink_status(p, ec))) return p.string();
    const std::filesystem::path target = std::filesystem::read_symlink(p, ec);
    if (ec) return p.string();
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  throw UsageError(fmt::format("cannot write \"{}\": too many levels of symbolic links", path),
                   "fix the link chain or give another path");
}

// Writes `path` through a temporary sibling created with `mode` (before the umask).
void write_atomic(const std::string& path, const std::vector<std::string_view>& pieces, mode_t mode,
                  bool keep_mode) {
  // The pid keeps two processes that write the same path from sharing a temporary.
  // A leftover of an earlier process with this pid is removed (a link is removed, never followed), and
  // the temporary is then created new: whatever appears there meanwhile is refused, not written through.
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  ::unlink(tmp.c_str());
  const WriteFd opened = open_for_writing(tmp, WriteOpen::create_new, keep_mode ? 0600 : mode);
  if (opened.fd < 0)
    throw UsageError(fmt::format("cannot write \"{}\": its temporary \"{}\": {}", path, tmp, opened.why),
                     "check that the directory exists and is writable");
  const int fd = opened.fd;
  const auto discard_tmp = [&tmp] {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
  };
  int err = 0;
  {
    FdGuard guard(fd);
    if (keep_mode && ::fchmod(fd, mode) != 0) err = errno;
    if (!err) err = write_pieces(fd, pieces);
    if (!err && ::fsync(fd) != 0) err = errno;
    if (!err && ::close(guard.release()) != 0) err = errno;
  }
  if (err) {
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
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  sync_directory_of(parent.empty() ? std::string(".") : parent.string(), path);
}

}  // namespace detail

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  detail::write_atomic(path, pieces, 0666, false);
}

void sync_directory(const std::string& dir) {
  detail::sync_directory_of(dir.empty() ? std::string(".") : dir, dir);
}

}  // namespace pd2bw::schemas
