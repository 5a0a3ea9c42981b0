// Whole-file I/O for the executor: binary reads that never reinterpret bytes, and writes that go
// through a ".tmp" sibling and a rename so readers see either the old file or the complete new one.
#include "file_bytes.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include <fmt/format.h>

#include "pd2bw/error.hpp"

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
  const std::string tmp = path + ".tmp";
  const auto discard_tmp = [&tmp] {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
  };
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      const int err = errno;
      throw Error(fmt::format("cannot write \"{}\": {}", tmp, std::strerror(err)),
                  "check that the directory exists and is writable");
    }
    for (std::string_view piece : pieces) out.write(piece.data(), static_cast<std::streamsize>(piece.size()));
    out.flush();
    out.close();
    if (!out) {
      discard_tmp();
      throw Error(fmt::format("error while writing \"{}\"", tmp), "check the free space on the disk");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    discard_tmp();
    throw Error(fmt::format("cannot rename \"{}\" onto \"{}\": {}", tmp, path, ec.message()),
                "check that the destination is not a directory and is writable");
  }
}

}  // namespace pd2bw::executor::detail
