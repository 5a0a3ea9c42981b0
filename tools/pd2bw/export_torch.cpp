// `pd2bw export --to torch`: PyTorch's compute-only pipeline schedule CSV, laid out in time slots from
// pd2bw's own schedule generator, and the JSON of the split (formats in export.hpp).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "export.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/pipeline/schedule.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::cli {

namespace {

using Table = std::vector<std::vector<std::optional<TorchAction>>>;

// One step's compute ops of each pipeline rank, in the generator's order.
std::vector<std::vector<TorchAction>> rank_actions(const schemas::Plan& plan) {
  pipeline::ScheduleSpec spec;
  spec.kind = plan.schedule;
  spec.depth = plan.depth;
  spec.microbatches = plan.microbatches_per_step;
  spec.steps = 1;
  spec.width = 1;  // the replicas' allreduce is no compute action
  spec.chunks = plan.chunks_per_rank;
  std::vector<std::vector<TorchAction>> out(static_cast<size_t>(plan.depth));
  for (int64_t r = 0; r < plan.depth; ++r) {
    for (const pipeline::Op& op : pipeline::stage_ops(spec, r, false)) {
      char kind = 0;
      switch (op.kind) {
        case pipeline::OpKind::forward: kind = 'F'; break;
        case pipeline::OpKind::backward: kind = 'B'; break;
        case pipeline::OpKind::backward_input: kind = 'I'; break;
        case pipeline::OpKind::backward_weight: kind = 'W'; break;
        default: continue;  // communication, recompute, allreduce, update: the runtime's own
      }
      out[static_cast<size_t>(r)].push_back({kind, op.chunk, op.microbatch});
    }
  }
  return out;
}

// Slots at which each (chunk, microbatch) ran its F, its B or I, and its W; -1 until placed.
struct Placed {
  int64_t m = 0;
  std::vector<int64_t> f, b, w;
  Placed(int64_t stages, int64_t microbatches)
      : m(microbatches), f(static_cast<size_t>(stages * microbatches), -1), b(f), w(f) {}
  int64_t& at(std::vector<int64_t>& v, int64_t stage, int64_t mb) { return v[static_cast<size_t>(stage * m + mb)]; }
};

// Whether every action `a` depends on finished before slot `t`.
bool ready(Placed& p, const TorchAction& a, int64_t t, int64_t stages) {
  auto before = [t](int64_t slot) { return slot >= 0 && slot < t; };
  switch (a.kind) {
    case 'F': return a.stage == 0 || before(p.at(p.f, a.stage - 1, a.microbatch));
    case 'B':
    case 'I':
      return before(p.at(p.f, a.stage, a.microbatch)) &&
             (a.stage == stages - 1 || before(p.at(p.b, a.stage + 1, a.microbatch)));
    default: return before(p.at(p.b, a.stage, a.microbatch));  // 'W' after its own I
  }
}

}  // namespace

Table torch_schedule_table(const schemas::Plan& plan) {
  const auto lists = rank_actions(plan);
  const int64_t stages = plan.depth * plan.chunks_per_rank;
  Placed placed(stages, plan.microbatches_per_step);
  Table table(lists.size());
  std::vector<size_t> next(lists.size(), 0);
  size_t left = 0;
  for (const auto& l : lists) left += l.size();
  // Unit time slots, each rank in its own order, each op as early as its dependencies allow: a list
  // schedule that respects the generator's per-rank order exactly.
  for (int64_t t = 0; left > 0; ++t) {
    bool moved = false;
    for (size_t r = 0; r < lists.size(); ++r) {
      if (next[r] == lists[r].size() || !ready(placed, lists[r][next[r]], t, stages)) continue;
      const TorchAction& a = lists[r][next[r]++];
      auto& slots = a.kind == 'F' ? placed.f : a.kind == 'W' ? placed.w : placed.b;
      placed.at(slots, a.stage, a.microbatch) = t;
      table[r].resize(static_cast<size_t>(t) + 1);
      table[r][static_cast<size_t>(t)] = a;
      --left;
      moved = true;
    }
    if (!moved)
      throw Error(fmt::format("internal error: the {} schedule's op lists cannot be laid out in time (stuck at slot {})",
                              schemas::to_string(plan.schedule), t),
                  "please report this with the plan file");
  }
  return table;
}

std::string torch_schedule_csv(const Table& table) {
  std::string out;
  for (const auto& row : table) {
    for (size_t t = 0; t < row.size(); ++t) {
      if (t > 0) out += ',';
      if (row[t]) out += fmt::format("{}{}{}", row[t]->stage, row[t]->kind, row[t]->microbatch);
    }
    out += '\n';
  }
  return out;
}

std::string torch_schedule_class(schemas::Schedule s) {
  using S = schemas::Schedule;
  switch (s) {
    case S::flush: return "Schedule1F1B";
    case S::gpipe: return "ScheduleGPipe";
    case S::interleaved: return "ScheduleInterleaved1F1B";
    case S::zb_h1: return "ScheduleInterleavedZeroBubble";
    case S::zb_v: return "ScheduleZBVZeroBubble";
    default: return "";
  }
}

namespace {

nlohmann::ordered_json model_json(const schemas::ModelDesc& m) {
  nlohmann::ordered_json j;
  j["kind"] = m.kind;
  j["name"] = m.name;
  j["blocks"] = m.blocks;
  j["d_model"] = m.d_model;
  j["heads"] = m.heads;
  j["seq_len"] = m.seq_len;
  j["vocab"] = m.vocab;
  j["dtype"] = std::string(schemas::to_string(m.dtype));
  return j;
}

nlohmann::ordered_json stages_json(const ExportInput& in) {
  const schemas::Plan& p = in.plan;
  auto stages = nlohmann::ordered_json::array();
  for (const schemas::StagePlan& s : p.stages) {
    nlohmann::ordered_json j;
    j["stage"] = s.index;
    j["pipeline_rank"] = schemas::chunk_position(p.schedule, p.depth, s.index);
    j["layer_begin"] = s.layer_begin;
    j["layer_end"] = s.layer_end;
    if (in.profile) {
      auto names = nlohmann::ordered_json::array();
      for (int64_t l = s.layer_begin; l < s.layer_end; ++l) names.push_back(in.profile->layers[static_cast<size_t>(l)].name);
      j["layer_names"] = names;
    }
    j["recompute"] = s.recompute;
    j["global_ranks"] = s.ranks;
    stages.push_back(j);
  }
  return stages;
}

}  // namespace

std::string torch_split_json(const ExportInput& in, const std::string& csv_name) {
  const schemas::Plan& p = in.plan;
  nlohmann::ordered_json j;
  j["format"] = "pd2bw.torch-export";
  j["schema_version"] = "1.0.0";
  j["pd2bw_version"] = std::string(schemas::pd2bw_version());
  nlohmann::ordered_json src;
  src["path"] = in.plan_path;
  src["schema_version"] = in.plan_schema_version;
  src["profile_sha256"] = p.profile_sha256;
  src["schedule"] = std::string(schemas::to_string(in.planned_schedule));
  j["plan"] = src;
  j["schedule"] = std::string(schemas::to_string(p.schedule));
  j["exported_as_flush"] = in.as_flush;
  const std::string cls = torch_schedule_class(p.schedule);
  j["torch_schedule_class"] = cls.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(cls);
  j["schedule_csv"] = csv_name;
  j["pipeline_depth"] = p.depth;
  j["chunks_per_rank"] = p.chunks_per_rank;
  j["num_stages"] = p.depth * p.chunks_per_rank;
  j["stage_to_rank"] = p.schedule == schemas::Schedule::zb_v ? "v" : "loop";
  j["microbatch_size"] = p.microbatch_size;
  j["num_microbatches"] = p.microbatches_per_step;
  j["global_batch"] = p.global_batch;
  j["data_parallel_width"] = p.width;
  j["world_size"] = p.width * p.depth;
  j["placement"] = std::string(schemas::to_string(p.placement));
  j["model"] = model_json(p.model);
  j["num_layers"] = p.num_layers;
  j["stages"] = stages_json(in);
  auto ranks = nlohmann::ordered_json::array();
  for (int64_t r = 0; r < p.depth; ++r) {
    nlohmann::ordered_json e;
    e["pipeline_rank"] = r;
    e["stages"] = pipeline::chunks_at(p.schedule, p.depth, p.chunks_per_rank, r);
    ranks.push_back(e);
  }
  j["pipeline_ranks"] = ranks;
  return j.dump(2) + "\n";
}

}  // namespace pd2bw::cli
