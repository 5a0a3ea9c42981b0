// open_for_writing (files.hpp): the one helper through which pd2bw opens a file it creates or truncates.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "fd_io.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::schemas {
namespace {

WriteFd failed(int err, std::string why) { return WriteFd{-1, err, std::move(why)}; }

// Why an open of `path` with O_NOFOLLOW failed with `err`: a link is named as such, not as ELOOP's
// "too many levels of symbolic links".
WriteFd open_failed(const std::string& path, int err) {
  struct stat st {};
  if ((err == ELOOP || err == EEXIST) && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    return failed(ELOOP, "it is a symbolic link, and pd2bw does not write through links here (remove it)");
  if (err == EEXIST) return failed(EEXIST, fmt::format("it already exists ({})", detail::file_kind(st.st_mode)));
  return failed(err, std::strerror(err));
}

}  // namespace

WriteFd open_for_writing(const std::string& path, WriteOpen how, unsigned mode, bool read_too) {
  // O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a reader.
  int flags = (read_too ? O_RDWR : O_WRONLY) | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK;
  if (how != WriteOpen::existing) flags |= O_CREAT;
  if (how == WriteOpen::create_new) flags |= O_EXCL;
  // Never O_TRUNC: what is there is checked before a byte of it changes.
  const int fd = ::open(path.c_str(), flags, static_cast<mode_t>(mode));
  if (fd < 0) return open_failed(path, errno);
  detail::FdGuard guard(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return failed(errno, std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return failed(EINVAL, fmt::format("it is {}, not a regular file", detail::file_kind(st.st_mode)));
  if (st.st_nlink > 1)
    return failed(EMLINK, fmt::format("it has {} hard links, and writing it would change the file under its other "
                                      "names too (remove it)",
                                      static_cast<long long>(st.st_nlink)));
  if (how == WriteOpen::truncate && st.st_size > 0 && ::ftruncate(fd, 0) != 0)
    return failed(errno, std::strerror(errno));
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) return failed(errno, std::strerror(errno));
  return WriteFd{guard.release(), 0, {}};
}

std::string output_target(const std::string& path) { return detail::follow_links(path); }

}  // namespace pd2bw::schemas
