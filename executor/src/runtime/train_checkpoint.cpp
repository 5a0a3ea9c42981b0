// Checkpoint writing and restoring for the trainer.
#include "train_checkpoint.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/safetensors.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::executor {

namespace {

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
  if (m.plan_sha256 != id.plan_sha256) mismatch("plan sha256", m.plan_sha256.substr(0, 12), id.plan_sha256.substr(0, 12));
  if (m.dtype != id.dtype) mismatch("--dtype", m.dtype, id.dtype);
  if (m.seed != id.seed) mismatch("--seed", std::to_string(m.seed), std::to_string(id.seed));
  if (m.data_label != id.data_label) mismatch("data", m.data_label, id.data_label);
  if (m.depth != id.depth || m.width != id.width || m.schedule != id.schedule)
    mismatch("shape", fmt::format("{} d={} w={}", m.schedule, m.depth, m.width),
             fmt::format("{} d={} w={}", id.schedule, id.depth, id.width));
}

}  // namespace

template <typename T>
void save_checkpoint(ThreadsJob<T>& job, const PipelineConfig& config, const CheckpointIdentity& id,
                     const std::string& dir, int64_t step) {
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
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("cannot create the checkpoint directory {}: {}", dir, ec.message()));
  m.provenance = {"pd2bw", std::string(schemas::pd2bw_version()), std::string(schemas::pd2bw_git_sha()), "", ""};
  for (int64_t i = 0; i < config.depth; ++i) {
    auto& w = job.worker(config.ranks[static_cast<size_t>(i)][0]);
    std::vector<TensorView> views;
    add_tensors<T>(views, w.layout(), "", w.weights(step));
    if (config.schedule == schemas::Schedule::two_bw && step > 0) add_tensors<T>(views, w.layout(), "prev/", w.weights(step - 1));
    add_tensors<T>(views, w.layout(), "optimizer.m/", w.moment1());
    if (!w.moment2().empty()) add_tensors<T>(views, w.layout(), "optimizer.v/", w.moment2());
    const CheckpointStage st{i, stage_file_name(i), ""};
    const std::string path = stage_file_path(dir, st);
    write_safetensors(path, views, {{"stage", std::to_string(i)}, {"step", std::to_string(step)}});
    m.stages.push_back({i, st.file, sha256_file(path)});
  }
  write_manifest(dir, m);
}

template <typename T>
int64_t load_checkpoint(ThreadsJob<T>& job, const PipelineConfig& config, const CheckpointIdentity& id,
                        const std::string& dir) {
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  check_identity(m, id, dir);
  struct State {
    std::vector<T> prev, cur, m1, m2;
  };
  std::vector<State> states;
  for (int64_t i = 0; i < config.depth; ++i) {
    const auto& st = m.stages[static_cast<size_t>(i)];
    verify_stage_file(dir, st);
    const SafetensorsFile f = read_safetensors(stage_file_path(dir, st));
    const auto& layout = job.worker(config.ranks[static_cast<size_t>(i)][0]).layout();
    State s;
    s.cur = read_tensors<T>(f, layout, "");
    if (config.schedule == schemas::Schedule::two_bw && m.step > 0) s.prev = read_tensors<T>(f, layout, "prev/");
    s.m1 = read_tensors<T>(f, layout, "optimizer.m/");
    if (config.optimizer.kind == schemas::Optimizer::adamw) s.m2 = read_tensors<T>(f, layout, "optimizer.v/");
    states.push_back(std::move(s));
  }
  for (int64_t i = 0; i < config.depth; ++i)
    for (int64_t rank : config.ranks[static_cast<size_t>(i)]) {
      const State& s = states[static_cast<size_t>(i)];
      job.worker(rank).restore(m.step, s.prev, s.cur, s.m1, s.m2);
    }
  return m.step;
}

template void save_checkpoint<float>(ThreadsJob<float>&, const PipelineConfig&, const CheckpointIdentity&,
                                     const std::string&, int64_t);
template void save_checkpoint<double>(ThreadsJob<double>&, const PipelineConfig&, const CheckpointIdentity&,
                                      const std::string&, int64_t);
template int64_t load_checkpoint<float>(ThreadsJob<float>&, const PipelineConfig&, const CheckpointIdentity&,
                                        const std::string&);
template int64_t load_checkpoint<double>(ThreadsJob<double>&, const PipelineConfig&, const CheckpointIdentity&,
                                         const std::string&);

}  // namespace pd2bw::executor
