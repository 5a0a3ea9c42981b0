// `pd2bw export --to megatron`: the Megatron-LM arguments that express a plan, or an error naming what
// Megatron cannot express (mapping in export.hpp; rules from Megatron-LM's arguments.py,
// transformer_config.py and pipeline_parallel_layer_layout.py).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "export.hpp"
#include "pd2bw/error.hpp"

namespace pd2bw::cli {

namespace {

using schemas::Schedule;

void check_schedule(const ExportInput& in) {
  const Schedule s = in.plan.schedule;
  if (s == Schedule::flush || s == Schedule::interleaved) return;
  const bool one_chunk = in.plan.chunks_per_rank == 1;
  const std::string as_flush = one_chunk ? "pass --as-flush to export the flush (1F1B) plan of the same split, or " : "";
  if (s == Schedule::gpipe)
    throw UsageError(fmt::format("{}: Megatron-LM has no GPipe schedule (its pipelines run 1F1B or interleaved 1F1B)",
                                 in.plan_path),
                     as_flush + "re-plan with `pd2bw plan --schedule flush` or `--schedule interleaved`");
  throw UsageError(fmt::format("{}: Megatron-LM cannot run the {} schedule (it has no zero-bubble schedule with split "
                               "backwards; its pipelines run 1F1B or interleaved 1F1B)",
                               in.plan_path, schemas::to_string(s)),
                   as_flush + "re-plan with `pd2bw plan --schedule flush` or `--schedule interleaved`");
}

// Transformer blocks in each model chunk (model order). The layers must be the embedding, blocks, head.
std::vector<int64_t> blocks_per_chunk(const ExportInput& in) {
  const schemas::Plan& p = in.plan;
  if (in.profile) {
    const auto& layers = in.profile->layers;
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string want = i == 0 ? "embedding" : i + 1 == layers.size() ? "head" : "block";
      if (layers[i].kind != want)
        throw UsageError(fmt::format("layer {} ('{}') of the profile is a '{}', but Megatron-LM places an embedding, "
                                     "transformer layers and a loss head, so layer {} must be a '{}'",
                                     i, layers[i].name, layers[i].kind, i, want),
                         "export this model with --to torch, which runs any list of layers");
    }
  } else if ((p.model.kind != "gpt" && p.model.kind != "bert") || p.num_layers != p.model.blocks + 2) {
    throw UsageError(fmt::format("{}: the plan's model is a '{}' of {} layers; without its profile the export cannot "
                                 "tell which layers are the embedding, the transformer blocks and the head",
                                 in.plan_path, p.model.kind, p.num_layers),
                     "pass the profile the plan was made from with --profile");
  }
  std::vector<int64_t> out;
  for (const auto& s : p.stages)
    out.push_back(std::max<int64_t>(0, std::min(s.layer_end, p.num_layers - 1) - std::max<int64_t>(s.layer_begin, 1)));
  return out;
}

// "E" + "t" per block + "L", stages split by "|", in chunk order (Megatron's flattened layout: entry
// vpp x pp + pp_rank, the looped placement pd2bw's interleaved uses).
std::string layout_string(const std::vector<int64_t>& blocks) {
  std::string s = "E";
  for (size_t c = 0; c < blocks.size(); ++c) {
    if (c > 0) s += '|';
    s.append(static_cast<size_t>(blocks[c]), 't');
  }
  return s + "L";
}

// Per-rank totals when every rank's chunks hold equal block counts (Megatron splits a rank's layers
// evenly over its virtual stages); empty otherwise.
std::vector<int64_t> even_rank_totals(const std::vector<int64_t>& blocks, int64_t d, int64_t v) {
  std::vector<int64_t> totals;
  for (int64_t r = 0; r < d; ++r) {
    int64_t total = 0;
    for (int64_t j = 0; j < v; ++j) {
      if (blocks[static_cast<size_t>(j * d + r)] != blocks[static_cast<size_t>(r)]) return {};
      total += blocks[static_cast<size_t>(j * d + r)];
    }
    totals.push_back(total);
  }
  return totals;
}

// The flags that place the blocks on the stages (see export.hpp for the three cases).
std::vector<std::string> split_args(const std::vector<int64_t>& blocks, int64_t d, int64_t v) {
  std::vector<std::string> out;
  const bool equal = std::all_of(blocks.begin(), blocks.end(), [&](int64_t b) { return b == blocks[0]; });
  if (equal && blocks[0] > 0) {
    if (v > 1) out.push_back(fmt::format("--num-virtual-stages-per-pipeline-rank {}", v));
    return out;
  }
  const auto totals = even_rank_totals(blocks, d, v);
  if (d >= 2 && !totals.empty() && totals.front() > 0 && totals.back() > 0) {
    const bool middle_equal = std::all_of(totals.begin() + 1, totals.end() - 1,
                                          [&](int64_t t) { return t == totals[1] && t > 0; });
    if (middle_equal) {
      out.push_back(fmt::format("--decoder-first-pipeline-num-layers {}", totals.front()));
      out.push_back(fmt::format("--decoder-last-pipeline-num-layers {}", totals.back()));
      if (v > 1) out.push_back(fmt::format("--num-virtual-stages-per-pipeline-rank {}", v));
      return out;
    }
  }
  out.push_back(fmt::format("--pipeline-model-parallel-layout {}", layout_string(blocks)));
  return out;
}

std::vector<std::string> recompute_args(const ExportInput& in, const std::vector<int64_t>& blocks) {
  const auto& st = in.plan.stages;
  std::vector<int64_t> on, off;
  for (const auto& s : st) (s.recompute ? on : off).push_back(s.index);
  if (on.empty()) return {};
  if (!off.empty())
    throw UsageError(fmt::format("{}: the plan recomputes activations on stages {} but not on {}; Megatron-LM's "
                                 "recompute flags apply to every pipeline stage alike",
                                 in.plan_path, fmt::join(on, ", "), fmt::join(off, ", ")),
                     "re-plan with `pd2bw plan --recompute always` (or `--recompute never` if that fits), then export");
  // One unit per chunk: the chunk's input is all that is kept, as pd2bw's recompute does.
  const int64_t most = *std::max_element(blocks.begin(), blocks.end());
  return {"--recompute-granularity full", "--recompute-method uniform",
          fmt::format("--recompute-num-layers {}", std::max<int64_t>(most, 1))};
}

}  // namespace

std::vector<std::string> megatron_args(const ExportInput& in) {
  const schemas::Plan& p = in.plan;
  check_schedule(in);
  if (p.chunks_per_rank > 1 && p.depth < 2)
    throw UsageError(fmt::format("{}: the plan interleaves {} chunks on one pipeline rank; Megatron-LM's interleaved "
                                 "schedule needs --pipeline-model-parallel-size > 1",
                                 in.plan_path, p.chunks_per_rank),
                     "re-plan with `pd2bw plan --schedule flush`, or with a depth of 2 or more");
  if (p.global_batch % (p.microbatch_size * p.width) != 0)
    throw UsageError(fmt::format("{}: global batch {} is not a multiple of microbatch {} x data-parallel width {}, "
                                 "as Megatron-LM requires",
                                 in.plan_path, p.global_batch, p.microbatch_size, p.width),
                     "regenerate the plan with `pd2bw plan`");
  const auto blocks = blocks_per_chunk(in);
  std::vector<std::string> out;
  out.push_back(fmt::format("--pipeline-model-parallel-size {}", p.depth));
  out.push_back("--tensor-model-parallel-size 1");
  out.push_back(fmt::format("--num-layers {}", std::accumulate(blocks.begin(), blocks.end(), int64_t{0})));
  for (auto& a : split_args(blocks, p.depth, p.chunks_per_rank)) out.push_back(std::move(a));
  out.push_back(fmt::format("--micro-batch-size {}", p.microbatch_size));
  out.push_back(fmt::format("--global-batch-size {}", p.global_batch));
  for (auto& a : recompute_args(in, blocks)) out.push_back(std::move(a));
  if (p.placement == schemas::Placement::stages_inner && p.width > 1 && p.depth > 1)
    out.push_back("--use-tp-pp-dp-mapping");
  return out;
}

}  // namespace pd2bw::cli
