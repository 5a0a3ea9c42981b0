// `pd2bw export`: what other engines read, made from a plan. Two targets:
//
// --to torch writes two files beside each other, OUT.csv and OUT.json (OUT given without an extension;
// a trailing ".csv" or ".json" is dropped):
//   OUT.csv  PyTorch's pipeline schedule in the "compute_only" format that
//            torch.distributed.pipelining's _PipelineScheduleRuntime._load_csv (and torchtitan's
//            pipeline_parallel_schedule_csv) reads: row r is pipeline rank r (the position in one replica's
//            pipeline; every replica runs the same rows), column t is time slot t; a cell is
//            "<stage>F<mb>" (forward), "<stage>B<mb>" (full backward), "<stage>I<mb>" (the input-gradient
//            half of a split backward) or "<stage>W<mb>" (its weight-gradient half), where <stage> is the
//            GLOBAL model chunk (torch's stage index, 0 .. d v - 1) and <mb> the microbatch of one
//            optimizer step (0 .. m - 1); an empty cell is an idle slot. Each rank's ops are in the order
//            pd2bw's schedule generator (pipeline::stage_ops) gives for one step; they are placed in unit
//            time slots as early as their dependencies allow (F of a chunk after F of the chunk before it;
//            B or I after B or I of the chunk after it and after its own F; W after its own I), so a
//            column holds what runs at once and the table reads like PyTorch's own. Rows end at their last
//            op (no trailing empty cells). The CSV carries no recomputation or update: those are the
//            runtime's (OUT.json says which stages recompute).
//   OUT.json the split ("pd2bw.torch-export" 1.0.0): see torch_split_json.
// --to megatron writes the Megatron-LM arguments, one flag (and its value) per line: see megatron_args.
//
// Internal to the pd2bw tool (not a library header).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::cli {

// What every exporter reads: the plan (already turned into its flush plan when --as-flush asked for it)
// and, optionally, the profile it came from.
struct ExportInput {
  schemas::Plan plan;
  std::string plan_path;
  std::string plan_schema_version;        // as written in the plan file
  schemas::Schedule planned_schedule{};   // the schedule the file names (differs from plan.schedule
                                          // when exported as flush)
  bool as_flush = false;                  // true when plan.schedule was changed to flush by --as-flush
  const schemas::Profile* profile = nullptr;  // layer names and kinds when given; its layer count equals
                                              // plan.num_layers (checked by the caller)
};

// One compute action of the torch table.
struct TorchAction {
  char kind = 'F';       // 'F', 'B', 'I' or 'W'
  int64_t stage = 0;     // global chunk
  int64_t microbatch = 0;
};

// The table: rows[r][t] is rank r's action at slot t (nullopt: idle). Throws Error (internal) if the
// generator's lists could not be placed (a deadlock, which would be a generator bug).
std::vector<std::vector<std::optional<TorchAction>>> torch_schedule_table(const schemas::Plan& plan);
// The table as CSV text (see the file comment), "\n" line ends.
std::string torch_schedule_csv(const std::vector<std::vector<std::optional<TorchAction>>>& table);
// PyTorch's built-in schedule class for `s` (flush: Schedule1F1B, gpipe: ScheduleGPipe, interleaved:
// ScheduleInterleaved1F1B, zb-h1: ScheduleInterleavedZeroBubble (its ZB1P with one stage per rank),
// zb-v: ScheduleZBVZeroBubble); empty when torch has none (zb-h2, 2bw).
std::string torch_schedule_class(schemas::Schedule s);
// The split file's text (deterministic, 2-space JSON): format, schema_version, source plan (path,
// schema_version, profile_sha256, planned_schedule), schedule, exported_as_flush, torch_schedule_class
// (null where torch has none), schedule_csv (file name), pipeline_depth d, chunks_per_rank v, num_stages
// d v, stage_to_rank ("loop" or "v"), microbatch_size, num_microbatches (per replica per step),
// global_batch, data_parallel_width, world_size, placement, model, num_layers, stages (per global chunk:
// stage, pipeline_rank, layer_begin, layer_end ([first, last) indices into the profile's layers),
// layer_names (only with a profile), recompute, global_ranks per replica) and pipeline_ranks (per rank:
// its stages in model order).
std::string torch_split_json(const ExportInput& in, const std::string& csv_name);

// Megatron-LM's arguments for the plan, one "--flag value" per line (no shell quoting needed: values hold
// no space or glob character). Mapping: pd2bw's layers are embedding, blocks, head; Megatron's
// --num-layers counts the blocks, and it puts the embedding on the first stage and the loss head on the
// last, which is where pd2bw's split has them. Per model chunk the block count decides the flags: all
// equal -> Megatron's even split (plus --num-virtual-stages-per-pipeline-rank v when interleaved); equal
// within each rank and across the middle ranks, first and last ranks non-empty ->
// --decoder-first/last-pipeline-num-layers; otherwise --pipeline-model-parallel-layout ("E", "t" per
// block, "L", stages split by "|", chunk order). Recompute on every stage -> full recompute, method
// uniform, one unit per chunk. Replicas-inner placement is Megatron's default rank order (tp-cp-ep-dp-pp);
// stages-inner adds --use-tp-pp-dp-mapping. Throws UsageError naming what Megatron cannot express: a
// schedule other than flush or interleaved, recompute on some stages only, layers that are not
// embedding, blocks, head, interleaving on one pipeline rank.
std::vector<std::string> megatron_args(const ExportInput& in);

}  // namespace pd2bw::cli
