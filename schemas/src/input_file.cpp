// Input files: whole-file reads of regular files only, with a size cap, named in every error.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "fd_io.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::schemas {
namespace {

[[noreturn]] void too_large(std::string_view what, const std::string& path, int64_t max_bytes) {
  throw UsageError(fmt::format("cannot read {} \"{}\": it is larger than the {} a {} may have", what, path,
                               format_bytes(max_bytes), what),
                   "check that this is the right file");
}

// Reads `fd` to its end, refusing more than max_bytes. `expected` sizes the first allocation.
std::string read_all(int fd, std::string_view what, const std::string& path, int64_t max_bytes, int64_t expected) {
  std::string out;
  out.reserve(static_cast<std::size_t>(expected));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw UsageError(fmt::format("error while reading {} \"{}\": {}", what, path, std::strerror(err)),
                       "check the file and the disk");
    }
    if (n == 0) return out;
    if (static_cast<int64_t>(out.size()) + n > max_bytes) too_large(what, path, max_bytes);
    out.append(chunk, static_cast<std::size_t>(n));
  }
}

}  // namespace

std::string read_input_file(const std::string& path, std::string_view what, int64_t max_bytes) {
  if (path == "-") return read_all(STDIN_FILENO, what, "standard input", max_bytes, 0);
  if (path.empty()) throw UsageError(fmt::format("no path given for the {}", what), "give the path of a file");
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever; it is refused below anyway.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    throw UsageError(fmt::format("cannot read {} \"{}\": {}", what, path, std::strerror(err)),
                     "check that the path exists and is readable");
  }
  detail::FdGuard guard(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    throw UsageError(fmt::format("cannot read {} \"{}\": {}", what, path, std::strerror(err)), "check the file");
  }
  if (!S_ISREG(st.st_mode))
    throw UsageError(fmt::format("cannot read {} \"{}\": it is {}, not a regular file", what, path,
                                 detail::file_kind(st.st_mode)),
                     S_ISDIR(st.st_mode) ? "give the path of a file" : "copy the input into a regular file first");
  if (st.st_size > max_bytes) too_large(what, path, max_bytes);
  // Back to blocking reads (regular files ignore the flag, but say what is meant).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return read_all(fd, what, path, max_bytes, static_cast<int64_t>(st.st_size));
}

}  // namespace pd2bw::schemas
