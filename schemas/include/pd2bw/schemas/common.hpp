// Types and helpers shared by the three file formats: dtypes, provenance, byte-size parsing,
// file reading, SHA-256 and the schema-version rule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pd2bw::schemas {

// The major schema version this build reads and writes; readers reject any other major.
inline constexpr int kSchemaMajor = 1;
inline constexpr const char* kSchemaVersion = "1.0.0";
// The minors: 1.1 added the optional GPU keys of a profile's device; 1.2 the optional split backward of a
// profile's layer timings (bwd_input_ms, bwd_weight_ms, bwd_weight_stash_bytes) and the plan schedule
// "zb-h1"; 1.3 the plan schedules "interleaved", "zb-h2" and "zb-v" and the plan's (and its
// alternatives') "chunks_per_rank"; 1.4 a profile's optional "runtime_calibration"; 1.5 its optional "split"; 1.6 a
// plan alternative's optional "step_bound". A file is stamped
// with the lowest version that has every key (and value) it holds, so files without the newer keys stay
// 1.0.0. Readers take every minor of their major.
inline constexpr const char* kSchemaVersionGpuDevice = "1.1.0";
inline constexpr const char* kSchemaVersionSplitBackward = "1.2.0";
inline constexpr const char* kSchemaVersionChunks = "1.3.0";
inline constexpr const char* kSchemaVersionRuntime = "1.4.0";
inline constexpr const char* kSchemaVersionRuntimeSplit = "1.5.0";
inline constexpr const char* kSchemaVersionStepBound = "1.6.0";

// Element type of compute tensors (weights, activations). Master weights and gradients are fp32.
enum class DType { fp32, bf16, fp16 };
// Bytes per element of `t` (4 or 2).
int64_t dtype_bytes(DType t);
std::string_view to_string(DType t);
// Throws SchemaError naming `pointer` when `s` is not one of fp32, bf16, fp16.
DType parse_dtype(std::string_view s, std::string_view pointer);

// Where a file came from. Written by every pd2bw command; example files say how they were made.
struct Provenance {
  std::string tool;          // "pd2bw" or the script that made the file
  std::string version;       // tool version
  std::string git_sha;       // source revision of the tool, "unknown" when not built from git
  std::string command_line;  // the command that made the file
  std::string notes;         // free text (how the numbers were obtained); may be empty
};

// Parses a size such as "16GiB", "1.5GB", "512MiB", "4096" (bytes). Binary (KiB, MiB, GiB, TiB) and
// decimal (KB, MB, GB, TB) suffixes; case-insensitive; "B" optional. Throws UsageError naming `what`.
int64_t parse_bytes(std::string_view text, std::string_view what);
// Formats bytes for humans: "15.2 GiB", "640 MiB", "12 KiB", "100 B".
std::string format_bytes(int64_t bytes);
// The same for an estimate that may pass int64 (a product of hostile sizes): format_bytes up to
// INT64_MAX, "1.23e+21 bytes" beyond.
std::string format_estimated_bytes(long double bytes);

// Reads a whole JSON document: read_input_file(path, "file", kMaxDocumentBytes) (files.hpp), so only a
// regular file (or "-", standard input) of at most 256 MiB. Throws UsageError naming the path.
std::string read_text_file(const std::string& path);
// Writes `text` to `path` by the output-file rules of write_output_file (files.hpp): a regular file is
// replaced atomically, a device or pipe written in place, a link followed; "-" means stdout. Throws Error.
void write_text_file(const std::string& path, std::string_view text);
// Replaces `path` with the concatenation of `pieces`, durably and atomically: writes `path`.tmp.<pid>,
// fsyncs and closes it, renames it onto `path`, then fsyncs the directory. Readers see the old file or the
// whole new one, even after a crash or power cut. Throws UsageError when the temporary cannot be created
// (missing or read-only directory) and Error on any later failure; the temporary is removed on failure.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);

// Lower-case hex SHA-256 of `data` (FIPS 180-4).
std::string sha256_hex(std::string_view data);

// The pd2bw version and the git sha it was built from.
std::string_view pd2bw_version();
std::string_view pd2bw_git_sha();

}  // namespace pd2bw::schemas
