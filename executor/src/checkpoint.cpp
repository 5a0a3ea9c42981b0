// The checkpoint manifest: strict JSON reading and deterministic writing, and the directory helpers
// that write it last (atomically) and check each stage file's SHA-256 on load.
#include "pd2bw/executor/checkpoint.hpp"

#include <filesystem>
#include <initializer_list>

#include <fmt/format.h>

#include "file_bytes.hpp"
#include "json_strict.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/safetensors.hpp"

namespace pd2bw::executor {
namespace {

using detail::Json;
using detail::JsonObject;
using detail::OrderedJson;

bool is_sha256(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A file name that cannot escape the checkpoint directory.
bool is_plain_file_name(std::string_view s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string_view::npos &&
         s.find('\\') == std::string_view::npos && s.find('\0') == std::string_view::npos;
}

bool one_of(std::string_view s, std::initializer_list<std::string_view> words) {
  for (std::string_view w : words) {
    if (s == w) return true;
  }
  return false;
}

// The major of a "MAJOR.MINOR.PATCH" version, or -1 when it has another shape.
int semver_major(std::string_view v) {
  int parts = 0;
  int major = 0;
  std::size_t digits = 0;
  for (char c : v) {
    if (c == '.') {
      if (digits == 0) return -1;
      ++parts;
      digits = 0;
    } else if (c >= '0' && c <= '9' && digits < 6) {
      if (parts == 0) major = major * 10 + (c - '0');
      ++digits;
    } else {
      return -1;
    }
  }
  return (parts == 2 && digits > 0) ? major : -1;
}

void check_header(const JsonObject& root, const std::string& label) {
  const std::string schema = root.string("schema");
  if (schema != kCheckpointSchema) {
    detail::json_fail(label, "/schema", fmt::format("expected \"{}\", got \"{}\"", kCheckpointSchema, schema),
                      "give the manifest.json of a directory written by `pd2bw train --checkpoint-dir`");
  }
  const std::string version = root.string("schema_version");
  if (semver_major(version) != 1) {
    detail::json_fail(label, "/schema_version",
                      fmt::format("unsupported version \"{}\"; this pd2bw reads {} major 1", version, kCheckpointSchema),
                      "resume with the pd2bw release that wrote the checkpoint");
  }
}

schemas::Provenance read_provenance(const JsonObject& root, const std::string& label) {
  const JsonObject r(root.get("provenance"), label, root.at("provenance"),
                     {"tool", "version", "git_sha", "command_line", "notes"});
  return schemas::Provenance{r.string("tool"), r.string("version"), r.string("git_sha"), r.string("command_line"),
                             r.string("notes")};
}

std::vector<CheckpointStage> read_stages(const JsonObject& root, const std::string& label) {
  const Json& arr = root.array("stages");
  std::vector<CheckpointStage> out;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const JsonObject r(arr[i], label, detail::json_child("/stages", i), {"stage", "file", "sha256"});
    out.push_back(CheckpointStage{r.integer("stage", 0), r.string("file"), r.string("sha256")});
  }
  return out;
}

// The cross-field rules, shared by the reader and the writer; `fail(pointer, what)` throws.
template <class Fail>
void check_rules(const CheckpointManifest& m, Fail fail) {
  if (!is_sha256(m.plan_sha256)) fail("/plan_sha256", "must be 64 lower-case hexadecimal characters");
  if (!is_sha256(m.profile_sha256)) fail("/profile_sha256", "must be 64 lower-case hexadecimal characters");
  if (!one_of(m.schedule, {"2bw", "flush", "gpipe", "zb-h1", "interleaved", "zb-h2", "zb-v"}))
    fail("/schedule", "must be \"2bw\", \"flush\", \"gpipe\", \"zb-h1\", \"interleaved\", \"zb-h2\" or \"zb-v\"");
  if (!one_of(m.dtype, {"float", "double", "bf16"})) fail("/dtype", "must be \"float\", \"double\" or \"bf16\"");
  if (m.depth < 1) fail("/depth", "must be >= 1");
  if (m.width < 1) fail("/width", "must be >= 1");
  if (m.step < 0) fail("/step", "must be >= 0");
  if (static_cast<int64_t>(m.stages.size()) != m.depth) {
    fail("/stages", fmt::format("has {} entries, expected one per stage ({})", m.stages.size(), m.depth));
  }
  for (std::size_t i = 0; i < m.stages.size(); ++i) {
    const std::string at = detail::json_child("/stages", i);
    const CheckpointStage& s = m.stages[i];
    if (s.stage != static_cast<int64_t>(i)) fail(at + "/stage", fmt::format("must be {} (stages in order)", i));
    if (!is_plain_file_name(s.file)) fail(at + "/file", "must be a file name inside the checkpoint directory");
    if (!is_sha256(s.sha256)) fail(at + "/sha256", "must be 64 lower-case hexadecimal characters");
  }
}

OrderedJson manifest_json(const CheckpointManifest& m) {
  OrderedJson out = OrderedJson::object();
  out["schema"] = kCheckpointSchema;
  out["schema_version"] = kCheckpointSchemaVersion;
  out["plan_sha256"] = m.plan_sha256;
  out["profile_sha256"] = m.profile_sha256;
  out["schedule"] = m.schedule;
  out["dtype"] = m.dtype;
  out["depth"] = m.depth;
  out["width"] = m.width;
  out["step"] = m.step;
  out["seed"] = m.seed;
  out["data_label"] = m.data_label;
  if (!m.model.empty()) out["model"] = m.model;
  OrderedJson stages = OrderedJson::array();
  for (const CheckpointStage& s : m.stages) {
    OrderedJson e = OrderedJson::object();
    e["stage"] = s.stage;
    e["file"] = s.file;
    e["sha256"] = s.sha256;
    stages.push_back(std::move(e));
  }
  out["stages"] = std::move(stages);
  const schemas::Provenance& p = m.provenance;
  out["provenance"] = {{"tool", p.tool}, {"version", p.version}, {"git_sha", p.git_sha},
                       {"command_line", p.command_line}, {"notes", p.notes}};
  return out;
}

std::string manifest_path(const std::string& dir) {
  return (std::filesystem::path(dir) / kManifestFileName).string();
}

}  // namespace

std::string stage_file_name(int64_t stage) {
  return fmt::format("stage-{:03}.safetensors", stage);
}

std::string dump_manifest(const CheckpointManifest& manifest) {
  check_rules(manifest, [](const std::string& pointer, const std::string& what) {
    detail::json_fail("checkpoint manifest", pointer, what);
  });
  return manifest_json(manifest).dump(2, ' ', false, OrderedJson::error_handler_t::replace) + "\n";
}

CheckpointManifest parse_manifest(std::string_view json, const std::string& label) {
  const Json doc = detail::parse_json_strict(json, label);
  const JsonObject root(doc, label, "",
                        {"schema", "schema_version", "plan_sha256", "profile_sha256", "schedule", "dtype", "depth",
                         "width", "step", "seed", "data_label", "model", "stages", "provenance"});
  check_header(root, label);
  CheckpointManifest m;
  m.plan_sha256 = root.string("plan_sha256");
  m.profile_sha256 = root.string("profile_sha256");
  m.schedule = root.string("schedule");
  m.dtype = root.string("dtype");
  m.depth = root.integer("depth", 1);
  m.width = root.integer("width", 1);
  m.step = root.integer("step", 0);
  m.seed = root.uint64("seed");
  m.data_label = root.string("data_label");
  if (root.has("model")) m.model = root.string("model");
  m.stages = read_stages(root, label);
  m.provenance = read_provenance(root, label);
  check_rules(m, [&label](const std::string& pointer, const std::string& what) {
    detail::json_fail(label, pointer, what, "the manifest was edited or is corrupt; restore it from the writer");
  });
  return m;
}

void write_manifest(const std::string& dir, const CheckpointManifest& manifest) {
  const std::string text = dump_manifest(manifest);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw Error(fmt::format("cannot create checkpoint directory \"{}\": {}", dir, ec.message()),
                "check that the parent directory exists and is writable");
  }
  detail::write_file_replacing(manifest_path(dir), text);
}

CheckpointManifest read_checkpoint_manifest(const std::string& dir) {
  const std::string path = manifest_path(dir);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw UsageError(fmt::format("checkpoint directory \"{}\" does not exist", dir),
                     "give a directory written by `pd2bw train --checkpoint-dir`");
  }
  if (!std::filesystem::exists(path, ec)) {
    throw UsageError(fmt::format("\"{}\" has no {}: it is not a complete checkpoint", dir, kManifestFileName),
                     "a save that was interrupted leaves no manifest; resume from an older checkpoint");
  }
  return parse_manifest(detail::read_file_bytes(path, "checkpoint manifest", schemas::kMaxDocumentBytes), path);
}

std::string stage_file_path(const std::string& dir, const CheckpointStage& stage) {
  return (std::filesystem::path(dir) / stage.file).string();
}

void verify_stage_file(const std::string& dir, const CheckpointStage& stage) {
  const std::string path = stage_file_path(dir, stage);
  const std::string actual = sha256_file(path);
  if (actual != stage.sha256) {
    throw SchemaError(fmt::format("{}: corrupt checkpoint: stage {} file has sha256 {}, the manifest records {}", path,
                                  stage.stage, actual, stage.sha256),
                      "the file changed after the checkpoint was written; restore it or use another checkpoint");
  }
}

}  // namespace pd2bw::executor
