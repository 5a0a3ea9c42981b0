// Checkpoint directories: one safetensors file per pipeline stage plus `manifest.json`, which says
// which plan, schedule, dtype and step the weights belong to and holds each stage file's SHA-256. The
// manifest is written last, through a temporary name and a rename, so a directory that has a manifest
// always has complete stage files; a crash mid-save leaves the previous manifest (or none).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pd2bw/schemas/common.hpp"

namespace pd2bw::executor {

inline constexpr std::string_view kCheckpointSchema = "pd2bw.checkpoint";
inline constexpr std::string_view kCheckpointSchemaVersion = "1.0.0";
inline constexpr std::string_view kManifestFileName = "manifest.json";

// One stage's weights (and optimizer state) file: one per pipeline position, holding all the model chunks
// of that position's rank when the schedule puts several on a rank (their tensor names never meet).
struct CheckpointStage {
  int64_t stage = 0;   // 0-based pipeline stage; the manifest lists stages 0 .. depth-1 in order
  std::string file;    // a plain file name inside the checkpoint directory, e.g. "stage-000.safetensors"
  std::string sha256;  // lower-case hex SHA-256 of that file's bytes
};

struct CheckpointManifest {
  std::string plan_sha256;     // sha256 of the plan file's bytes (64 lower-case hex)
  std::string profile_sha256;  // the plan's profile hash (64 lower-case hex)
  std::string schedule;        // "2bw" | "flush" | "gpipe" | "zb-h1" | "interleaved" | "zb-h2" | "zb-v"
  std::string dtype;           // "float" | "double" | "bf16" (the compute dtype)
  int64_t depth = 0;           // pipeline stages (>= 1): positions, d, also when a rank holds several chunks
  int64_t width = 0;           // data-parallel replicas per stage (>= 1)
  int64_t step = 0;            // optimizer steps completed; the sampler is stateless, so also the data position
  uint64_t seed = 0;           // the run's seed (initialisation and data order)
  std::string data_label;      // which data was used (TokenData::label())
  std::string model;           // the model family, "gpt" | "bert" (optional in files; absent: not recorded)
  std::vector<CheckpointStage> stages;  // exactly `depth` entries, stage i at index i
  schemas::Provenance provenance;
};

// "stage-000.safetensors" for stage 0, and so on (three digits minimum).
std::string stage_file_name(int64_t stage);

// Deterministic JSON (2-space indent, trailing newline) with "schema": "pd2bw.checkpoint" and
// "schema_version": "1.0.0". Throws SchemaError if the manifest breaks a rule parse_manifest checks.
std::string dump_manifest(const CheckpointManifest& manifest);

// Strict parse: invalid JSON, a duplicate, unknown or missing key, a wrong type, an unsupported schema
// major, a bad enum word, a malformed sha256, a stage list that is not 0 .. depth-1, or a stage file
// name that is not a plain name -> SchemaError "<label>: <JSON pointer>: <what>".
CheckpointManifest parse_manifest(std::string_view json, const std::string& label);

// Writes `dir`/manifest.json (via a temporary and a rename), creating `dir` if needed. Call after every
// stage file is complete. Throws Error on I/O failure, SchemaError on an invalid manifest.
void write_manifest(const std::string& dir, const CheckpointManifest& manifest);

// Reads and parses `dir`/manifest.json. Throws UsageError when the directory or the manifest is absent
// or unreadable, SchemaError when it is corrupt. Does not open the stage files (see verify_stage_file).
CheckpointManifest read_checkpoint_manifest(const std::string& dir);

// The path of a stage's file: `dir`/`stage.file`.
std::string stage_file_path(const std::string& dir, const CheckpointStage& stage);

// Checks that `dir`/`stage.file` exists and its SHA-256 equals stage.sha256. Throws UsageError if it is
// missing or unreadable, SchemaError "corrupt checkpoint" on a mismatch.
void verify_stage_file(const std::string& dir, const CheckpointStage& stage);

}  // namespace pd2bw::executor
