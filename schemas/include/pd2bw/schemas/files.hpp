// How pd2bw reads its input files and writes its output files. Inputs must be regular files of bounded
// size, so a FIFO, a device or a huge file never hangs a reader or exhausts memory. Outputs replace a
// regular file atomically and durably, and are written in place (never replaced) when the path is a
// device or a pipe; symbolic links are followed, so the link itself stays.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pd2bw::schemas {

// Caps on what a reader takes, named in the error when a file is larger.
inline constexpr int64_t kMaxDocumentBytes = int64_t{256} << 20;  // profile, cluster, plan, manifest JSON
inline constexpr int64_t kMaxDataBytes = int64_t{16} << 30;       // training data, checkpoint shards

// All bytes of the input `path` ("-": standard input, read up to the cap). `what` says what the file is
// for ("profile", "training data") and appears in every message. Throws UsageError naming the path when
// it is missing or unreadable, when it is not a regular file (a directory, FIFO, device or socket is
// refused without opening it for a blocking read), or when it is larger than `max_bytes`.
std::string read_input_file(const std::string& path, std::string_view what, int64_t max_bytes);

// Writes the concatenation of `pieces` to the output `path`:
// - a regular file or a path that does not exist yet: through write_file_atomic (temporary sibling,
//   fsync, rename, directory fsync), keeping an existing file's permission bits;
// - a symbolic link: followed (to its final target, which may not exist yet); the link stays a link;
// - a character or block device, a FIFO or a socket: opened for writing and written in place, never
//   replaced (so /dev/null stays a device), with every write and the close checked.
// "-" means standard output. Throws UsageError when the path is a directory or its directory is missing
// or read-only, Error when a write, sync or close fails (a full disk, /dev/full).
void write_output_file(const std::string& path, const std::vector<std::string_view>& pieces);

// Checks, before any work is done, that write_output_file(path) can create or replace the file: not a
// directory, its directory exists and accepts a new file (probed with a temporary that is removed), or
// it is a device or pipe open for writing. `what` names the flag or file ("--trace", "the plan").
// "-" passes. Throws UsageError naming `what` and the path.
void check_output_path(const std::string& path, std::string_view what);

// fsyncs the directory `dir` so that files created, renamed or removed in it are durable. Throws Error
// when it cannot be opened or synced (EINVAL from file systems that cannot sync directories is ignored).
void sync_directory(const std::string& dir);

}  // namespace pd2bw::schemas
