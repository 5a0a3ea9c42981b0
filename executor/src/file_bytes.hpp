// Private helpers of pd2bw_executor: binary-safe whole-file reading and crash-safe whole-file writing,
// shared by the training-data loader, the safetensors reader/writer and the checkpoint manifest.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pd2bw/schemas/files.hpp"

namespace pd2bw::executor::detail {

// All bytes of the file at `path` (may be empty), by schemas::read_input_file: a regular file of at most
// `max_bytes`. `what` says what the file is for ("training data", "checkpoint") in messages. Throws
// UsageError naming the path when it is missing, not a regular file, too large or unreadable.
std::string read_file_bytes(const std::string& path, std::string_view what,
                            int64_t max_bytes = schemas::kMaxDataBytes);

// Replaces `path` with `bytes` through schemas::write_file_atomic (temporary sibling, fsync, rename,
// directory fsync), so a crash or a full disk never leaves a half-written file under the final name.
// Throws Error (UsageError when the directory is missing or read-only) naming the path; the temporary is
// removed on failure.
void write_file_replacing(const std::string& path, std::string_view bytes);
// The same for a file made of several pieces written back to back (no concatenated copy is made).
void write_file_replacing(const std::string& path, const std::vector<std::string_view>& pieces);

}  // namespace pd2bw::executor::detail
