// Whole-file I/O for the executor: binary reads that never reinterpret bytes, and writes that go through
// schemas::write_file_atomic (temporary sibling, fsync, rename, directory fsync) so readers see either the
// old file or the complete new one.
#include "file_bytes.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include <fmt/format.h>

#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::executor::detail {

std::string read_file_bytes(const std::string& path, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw UsageError(fmt::format("cannot read {} \"{}\": it is a directory", what, path),
                     "give the path of a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw UsageError(fmt::format("cannot read {} \"{}\": {}", what, path, std::strerror(err)),
                     "check that the path exists and is readable");
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    throw UsageError(fmt::format("error while reading {} \"{}\"", what, path), "check the file and the disk");
  }
  return bytes;
}

void write_file_replacing(const std::string& path, std::string_view bytes) {
  write_file_replacing(path, std::vector<std::string_view>{bytes});
}

void write_file_replacing(const std::string& path, const std::vector<std::string_view>& pieces) {
  schemas::write_file_atomic(path, pieces);
}

}  // namespace pd2bw::executor::detail
