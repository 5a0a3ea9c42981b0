// Whole-file I/O for the executor: binary reads of regular files that never reinterpret bytes, and writes
// that go through schemas::write_file_atomic (temporary sibling, fsync, rename, directory fsync) so
// readers see either the old file or the complete new one.
#include "file_bytes.hpp"

#include "pd2bw/schemas/common.hpp"

namespace pd2bw::executor::detail {

std::string read_file_bytes(const std::string& path, std::string_view what, int64_t max_bytes) {
  return schemas::read_input_file(path, what, max_bytes);
}

void write_file_replacing(const std::string& path, std::string_view bytes) {
  write_file_replacing(path, std::vector<std::string_view>{bytes});
}

void write_file_replacing(const std::string& path, const std::vector<std::string_view>& pieces) {
  schemas::write_file_atomic(path, pieces);
}

}  // namespace pd2bw::executor::detail
