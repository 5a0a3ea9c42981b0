// Checkpoint writing and restoring for the trainer, one rank's shard at a time.
#include "train_checkpoint.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/safetensors.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::executor {

namespace {

// Empty when `path` is (or links to) a regular file; else what it is: "missing", "a directory", "a FIFO",
// "a device", "a socket", or "a symbolic link to T, which is ..." (a message must not call a FIFO missing).
std::string not_a_stage_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status own = fs::symlink_status(path, ec);
  if (ec || !fs::exists(own)) return "missing";
  const fs::file_status target = fs::status(path, ec);
  if (!ec && fs::is_regular_file(target)) return "";
  auto kind = [](const fs::file_status& s) -> std::string {
    if (!fs::exists(s)) return "missing";
    if (fs::is_directory(s)) return "a directory";
    if (fs::is_fifo(s)) return "a FIFO";
    if (fs::is_character_file(s) || fs::is_block_file(s)) return "a device";
    if (fs::is_socket(s)) return "a socket";
    return "not a regular file";
  };
  if (!fs::is_symlink(own)) return kind(own);
  const std::string to = fs::read_symlink(path, ec).string();
  return "a symbolic link to " + to + ", which is " + (ec ? std::string("unreadable") : kind(target));
}

// The stage file records the stage and step it holds (save_stage_shard): both must be the manifest's.
void check_shard_identity(const SafetensorsFile& f, int64_t stage, int64_t step) {
  const auto recorded = [&](const char* key) {
    const auto it = f.metadata.find(key);
    return it == f.metadata.end() ? std::string("nothing") : it->second;
  };
  if (recorded("stage") == std::to_string(stage) && recorded("step") == std::to_string(step)) return;
  throw SchemaError(fmt::format("{}: the stage file says it holds stage {} at step {}, but the manifest puts it at "
                                "stage {}, step {}",
                                f.path, recorded("stage"), recorded("step"), stage, step),
                    "the files of two checkpoints were mixed; resume from a checkpoint directory as pd2bw wrote it");
}

template <typename T>
void add_tensors(std::vector<TensorView>& out, const ParamLayout& layout, const std::string& prefix,
                 std::span<const T> buffer) {
  for (const auto& t : layout)
    out.push_back(make_tensor_view<T>(prefix + t.name, t.shape,
                                      buffer.subspan(static_cast<size_t>(t.offset), static_cast<size_t>(t.numel()))));
}

template <typename T>
std::vector<T> read_tensors(const SafetensorsFile& f, const ParamLayout& layout, const std::string& prefix) {
  std::vector<T> out(static_cast<size_t>(layout_numel(layout)));
  for (const auto& t : layout)
    f.copy_to<T>(prefix + t.name,
                 std::span<T>(out).subspan(static_cast<size_t>(t.offset), static_cast<size_t>(t.numel())));
  return out;
}

void check_identity(const CheckpointManifest& m, const CheckpointIdentity& id, const std::string& dir) {
  auto mismatch = [&](const std::string& what, const std::string& had, const std::string& now) {
    throw UsageError(fmt::format("the checkpoint in {} was written with {} {}, but this run has {}", dir, what, had, now),
                     "resume with the same plan, --dtype, --seed and --data, or start a new --checkpoint-dir");
  };
  if (!m.model.empty() && m.model != id.model)
    throw UsageError(fmt::format("the checkpoint in {} holds a {} model, but this plan's model is {}", dir, m.model, id.model),
                     fmt::format("resume a {} run's checkpoint directory, or start a new --checkpoint-dir", id.model));
  if (m.plan_sha256 != id.plan_sha256) mismatch("plan sha256", m.plan_sha256.substr(0, 12), id.plan_sha256.substr(0, 12));
  if (m.dtype != id.dtype) mismatch("--dtype", m.dtype, id.dtype);
  if (m.seed != id.seed) mismatch("--seed", std::to_string(m.seed), std::to_string(id.seed));
  if (m.data_label != id.data_label) mismatch("data", m.data_label, id.data_label);
  if (m.depth != id.depth || m.width != id.width || m.schedule != id.schedule)
    mismatch("shape", fmt::format("{} d={} w={}", m.schedule, m.depth, m.width),
             fmt::format("{} d={} w={}", id.schedule, id.depth, id.width));
}

template <typename T>
bool all_finite(std::span<const T> values) {
  for (const T v : values)
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

// Every chunk of the worker's rank, in model order.
template <typename T>
std::string nonfinite_state(StageWorker<T>& w, const PipelineConfig& config, int64_t step) {
  for (const int64_t c : w.chunks()) {
    if (!all_finite<T>(w.weights(step, c))) return "weights are";
    if (config.schedule == schemas::Schedule::two_bw && step > 0 && !all_finite<T>(w.weights(step - 1, c)))
      return "older weight version is";
    if (!all_finite<T>(w.moment1(c)) || !all_finite<T>(w.moment2(c))) return "optimizer state is";
  }
  return {};
}

// One file per rank (pipeline position) holds all of its chunks: their tensors' names are their layers'
// and so never meet (the head's copy of a tied table is in the head's chunk only).
template <typename T>
CheckpointStage save_stage_shard(StageWorker<T>& w, const PipelineConfig& config, const std::string& dir,
                                 int64_t step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("cannot create the checkpoint directory {}: {}", dir, ec.message()));
  std::vector<TensorView> views;
  for (const int64_t c : w.chunks()) {
    const ParamLayout& layout = w.layout(c);
    add_tensors<T>(views, layout, "", w.weights(step, c));
    if (config.schedule == schemas::Schedule::two_bw && step > 0) add_tensors<T>(views, layout, "prev/", w.weights(step - 1, c));
    add_tensors<T>(views, layout, "optimizer.m/", w.moment1(c));
    if (!w.moment2(c).empty()) add_tensors<T>(views, layout, "optimizer.v/", w.moment2(c));
  }
  CheckpointStage st{w.stage(), stage_file_name(w.stage()), ""};
  const std::string path = stage_file_path(dir, st);
  // write_safetensors syncs the file and the step directory before it returns: the shard is durable.
  write_safetensors(path, views, {{"stage", std::to_string(w.stage())}, {"step", std::to_string(step)}});
  st.sha256 = sha256_file(path);
  return st;
}

void write_checkpoint_manifest(const CheckpointIdentity& id, const std::string& dir, int64_t step,
                               std::vector<CheckpointStage> stages) {
  CheckpointManifest m;
  m.plan_sha256 = id.plan_sha256;
  m.profile_sha256 = id.profile_sha256;
  m.schedule = id.schedule;
  m.dtype = id.dtype;
  m.depth = id.depth;
  m.width = id.width;
  m.step = step;
  m.seed = id.seed;
  m.data_label = id.data_label;
  m.model = id.model;
  m.provenance = {"pd2bw", std::string(schemas::pd2bw_version()), std::string(schemas::pd2bw_git_sha()), "", ""};
  m.stages = std::move(stages);
  write_manifest(dir, m);
}

int64_t check_checkpoint(const CheckpointIdentity& id, const std::string& dir) {
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  check_identity(m, id, dir);
  for (const CheckpointStage& st : m.stages) {
    const std::string what = not_a_stage_file(stage_file_path(dir, st));
    if (what.empty()) continue;
    const std::string damage = what == "missing" ? fmt::format("lacks the file of stage {} ({})", st.stage, st.file)
                                                 : fmt::format("has as the file of stage {} ({}) {}, not a regular file",
                                                               st.stage, st.file, what);
    throw UsageError(fmt::format("the checkpoint in {} {}", dir, damage),
                     "the checkpoint was damaged after it was written; remove that directory to resume from an "
                     "older checkpoint");
  }
  return m.step;
}

template <typename T>
void load_stage_shard(StageWorker<T>& w, const PipelineConfig& config, const std::string& dir) {
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  const auto& st = m.stages.at(static_cast<size_t>(w.stage()));
  verify_stage_file(dir, st);
  const SafetensorsFile f = read_safetensors(stage_file_path(dir, st));
  check_shard_identity(f, w.stage(), m.step);
  struct Chunk {
    std::vector<T> prev, cur, m1, m2;
  };
  std::vector<Chunk> read;  // all of them before the worker changes
  for (const int64_t c : w.chunks()) {
    const auto& layout = w.layout(c);
    Chunk& r = read.emplace_back();
    r.cur = read_tensors<T>(f, layout, "");
    if (config.schedule == schemas::Schedule::two_bw && m.step > 0) r.prev = read_tensors<T>(f, layout, "prev/");
    r.m1 = read_tensors<T>(f, layout, "optimizer.m/");
    if (config.optimizer.kind == schemas::Optimizer::adamw) r.m2 = read_tensors<T>(f, layout, "optimizer.v/");
  }
  for (size_t i = 0; i < read.size(); ++i)
    w.restore(m.step, read[i].prev, read[i].cur, read[i].m1, read[i].m2, w.chunks()[i]);
}

template CheckpointStage save_stage_shard<float>(StageWorker<float>&, const PipelineConfig&, const std::string&, int64_t);
template CheckpointStage save_stage_shard<double>(StageWorker<double>&, const PipelineConfig&, const std::string&, int64_t);
template std::string nonfinite_state<float>(StageWorker<float>&, const PipelineConfig&, int64_t);
template std::string nonfinite_state<double>(StageWorker<double>&, const PipelineConfig&, int64_t);
template void load_stage_shard<float>(StageWorker<float>&, const PipelineConfig&, const std::string&);
template void load_stage_shard<double>(StageWorker<double>&, const PipelineConfig&, const std::string&);

}  // namespace pd2bw::executor
