// Output files: regular files are replaced atomically, devices and pipes are written in place, links
// are followed; and the check that runs before any work that an output path will be writable.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "fd_io.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::schemas {
namespace {

// A device, FIFO or socket: open without creating or truncating, write, check the close. The path is
// opened as given, so /dev/stdout and /dev/fd/N reach what they name (the one open of an output that
// follows links: it creates and truncates nothing, so it cannot damage a file it was not meant for).
void write_in_place(const std::string& path, const std::vector<std::string_view>& pieces) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    throw UsageError(fmt::format("cannot write \"{}\": {}", path, std::strerror(err)), "check the path");
  }
  detail::FdGuard guard(fd);
  int err = detail::write_pieces(fd, pieces);
  if (!err && ::close(guard.release()) != 0) err = errno;
  if (err)
    throw Error(fmt::format("error while writing \"{}\": {}", path, std::strerror(err)),
                "the device or pipe did not take the whole output");
}

std::string parent_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

[[noreturn]] void refuse(std::string_view what, const std::string& path, const std::string& why, std::string hint) {
  throw UsageError(fmt::format("{} \"{}\" cannot be written: {}", what, path, why), std::move(hint));
}

// Creates and removes a temporary in `dir`: the one test that catches every reason a later create
// would fail (missing, not a directory, read-only file system, permissions, quota on inodes).
void probe_directory(const std::string& dir, std::string_view what, const std::string& path) {
  const std::string probe = fmt::format("{}/.pd2bw-probe.{}", dir, static_cast<long>(::getpid()));
  const WriteFd opened = open_for_writing(probe, WriteOpen::create_new, 0600);
  const int fd = opened.fd;
  if (fd < 0) {
    const int err = opened.err;
    if (err == ENOENT) refuse(what, path, fmt::format("directory \"{}\" does not exist", dir), "create it first");
    if (err == ENOTDIR) refuse(what, path, fmt::format("\"{}\" is not a directory", dir), "give a path in a directory");
    refuse(what, path, fmt::format("cannot create a file in \"{}\": {}", dir, opened.why),
           "check that the directory is writable and the file system is not read-only");
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace

void write_output_file(const std::string& path, const std::vector<std::string_view>& pieces) {
  if (path == "-") {
    for (std::string_view p : pieces) std::cout.write(p.data(), static_cast<std::streamsize>(p.size()));
    std::cout.flush();
    if (!std::cout) throw Error("cannot write to standard output");
    return;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      throw UsageError(fmt::format("cannot write \"{}\": it is a directory", path), "give the path of a file");
    if (!S_ISREG(st.st_mode)) return write_in_place(path, pieces);
    // A regular file, maybe behind links: replace the file the links lead to, keeping its permissions.
    return detail::write_atomic(detail::follow_links(path), pieces, st.st_mode & 07777, true);
  }
  // A new file, or a link whose target does not exist yet: create the target.
  detail::write_atomic(detail::follow_links(path), pieces, 0666, false);
}

void check_output_path(const std::string& path, std::string_view what) {
  if (path == "-") return;
  if (path.empty()) refuse(what, path, "the path is empty", "give a file name");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) refuse(what, path, "it is a directory", "give the path of a file");
    if (!S_ISREG(st.st_mode)) {
      if (::access(path.c_str(), W_OK) != 0)
        refuse(what, path, std::strerror(errno), "check the device's permissions");
      return;
    }
  }
  const std::string target = detail::follow_links(path);
  probe_directory(parent_of(target), what, path);
}

}  // namespace pd2bw::schemas
