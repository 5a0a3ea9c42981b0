// How pd2bw reads its input files and writes its output files. Inputs must be regular files of bounded
// size, so a FIFO, a device or a huge file never hangs a reader or exhausts memory. Outputs replace a
// regular file atomically and durably, and are written in place (never replaced) when the path is a
// device or a pipe; symbolic links are followed, so the link itself stays. Every file pd2bw creates or
// truncates is opened by open_for_writing, which never follows a link: a link or a hard link planted where
// pd2bw writes (a checkpoint lock, a temporary) is refused instead of overwriting what it points at.
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

// How open_for_writing treats what is already at its path.
enum class WriteOpen {
  create_new,      // create; anything already there (a file, a link, a FIFO) is an error (O_EXCL)
  create_or_open,  // create, or open the existing regular file as it is
  truncate,        // create, or open the existing regular file and empty it
  existing,        // open the existing regular file as it is; never create
};

// What open_for_writing returns: a descriptor, or why there is none.
struct WriteFd {
  int fd = -1;      // >= 0 on success: close-on-exec, blocking; the caller closes it
  int err = 0;      // on failure: the errno (ELOOP: a symbolic link, EMLINK: more than one hard link,
                    // EEXIST: create_new found something, EINVAL: not a regular file)
  std::string why;  // on failure: the reason in words, for a message ("it is a symbolic link; ...")
};

// The one way pd2bw opens a file it creates or truncates. Never follows a symbolic link in the last
// component (O_NOFOLLOW; O_EXCL for create_new), never blocks on a FIFO, and refuses what is not a regular
// file or has other hard links before anything is truncated or written. `mode` is the new file's
// permission bits (before the umask); `read_too` opens it read-write. Never throws.
WriteFd open_for_writing(const std::string& path, WriteOpen how, unsigned mode, bool read_too = false);

// The file a write to the output `path` that the user named lands on: symbolic links followed
// explicitly (at most 40; the last need not exist; relative targets from the link's directory), so the
// file itself can then be opened by open_for_writing. Throws UsageError for a loop of links.
std::string output_target(const std::string& path);

// Checks, before any work is done, that write_output_file(path) can create or replace the file: not a
// directory, its directory exists and accepts a new file (probed with a temporary that is removed), or
// it is a device or pipe open for writing. `what` names the flag or file ("--trace", "the plan").
// "-" passes. Throws UsageError naming `what` and the path.
void check_output_path(const std::string& path, std::string_view what);

// fsyncs the directory `dir` so that files created, renamed or removed in it are durable. Throws Error
// when it cannot be opened or synced (EINVAL from file systems that cannot sync directories is ignored).
void sync_directory(const std::string& dir);

}  // namespace pd2bw::schemas
