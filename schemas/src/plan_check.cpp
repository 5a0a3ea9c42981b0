// The plan's cross-field rules: the chunks per rank suit the schedule, stages (one per model chunk) tile
// the layers, the rank grid matches width x depth and the placement, the rank table agrees with the
// stages, the chunks of one position agree (ranks, recompute, memory), and the batch arithmetic adds up.
// A plan that passes can be executed without further checks by `pd2bw train`.
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "doc_io.hpp"

namespace pd2bw::schemas::detail {
namespace {

const char* const kRegenerate = "the plan is internally inconsistent; regenerate it with `pd2bw plan`";

std::string stage_ptr(std::size_t s, std::string_view key) {
  return child_pointer(child_pointer("/stages", s), key);
}
std::string rank_ptr(std::size_t k, std::string_view key) {
  return child_pointer(child_pointer("/ranks", k), key);
}

// a * b, or -1 when it does not fit in int64 (both operands are positive here).
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? -1 : out;
}

// a + b, or INT64_MAX when it does not fit (both operands are non-negative here).
int64_t saturating_sum(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? std::numeric_limits<int64_t>::max() : out;
}

const char* const kChunksHint =
    "interleaved holds v >= 2 model chunks per rank, zb-v exactly 2 (a V), every other schedule 1 (write no "
    "chunks_per_rank); regenerate the plan with `pd2bw plan`";

// What schedule `s` needs of chunks_per_rank, for messages.
std::string chunks_rule(Schedule s) {
  if (s == Schedule::interleaved) return "chunks_per_rank >= 2";
  return s == Schedule::zb_v ? "chunks_per_rank = 2" : "chunks_per_rank = 1";
}

// chunks_per_rank `v` at `pointer`: allowed by schedule `s`, and at most `layers` (each chunk holds a
// layer), so no product or table sized by it can outgrow the file.
void check_chunk_count(Schedule s, int64_t v, int64_t layers, const std::string& pointer) {
  if (!chunks_allowed(s, v)) {
    fail(pointer, fmt::format("{} needs {}, got {}", to_string(s), chunks_rule(s), v), kChunksHint);
  }
  if (v > layers) {
    fail(pointer, fmt::format("must be <= /num_layers ({}): every chunk holds at least one layer, got {}", layers, v),
         kRegenerate);
  }
}

void check_chunks(const Plan& p) {
  check_chunk_count(p.schedule, p.chunks_per_rank, p.num_layers, "/chunks_per_rank");
  for (std::size_t k = 0; k < p.alternatives.size(); ++k) {
    const Alternative& a = p.alternatives[k];
    check_chunk_count(a.schedule, a.chunks_per_rank, p.num_layers,
                      child_pointer(child_pointer("/alternatives", k), "chunks_per_rank"));
  }
}

void check_sha(const std::string& sha) {
  bool ok = sha.size() == 64;
  for (char c : sha) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!ok) {
    fail("/profile_sha256", "must be 64 lower-case hexadecimal characters",
         "write the SHA-256 of the profile file, e.g. from `sha256sum profile.json`");
  }
}

void check_batch(const Plan& p) {
  const int64_t grid = checked_mul(p.width, p.depth);
  if (grid < 0 || grid > p.cluster.total_devices()) {
    fail("/width", fmt::format("width x depth = {} x {} needs more devices than the cluster's {}", p.width, p.depth,
                               p.cluster.total_devices()),
         kRegenerate);
  }
  const int64_t batch = checked_mul(checked_mul(p.microbatch_size, p.microbatches_per_step), p.width);
  if (batch != p.global_batch) {
    fail("/global_batch",
         fmt::format("must equal microbatch_size x microbatches_per_step x width = {} x {} x {} = {}, got {}",
                     p.microbatch_size, p.microbatches_per_step, p.width, batch, p.global_batch),
         kRegenerate);
  }
  const bool loop = p.schedule == Schedule::interleaved;
  const char* const megatron =
      "Megatron's rule: interleaved 1F1B sends the microbatches round the ranks in groups of depth, so m must be "
      "a multiple of depth (and at least depth); change m or the depth";
  if (p.microbatches_per_step < min_microbatches(p.schedule, p.depth)) {
    fail("/microbatches_per_step",
         fmt::format("{} needs microbatches_per_step >= depth ({} < {})", to_string(p.schedule),
                     p.microbatches_per_step, p.depth),
         loop ? megatron
              : "with fewer microbatches than stages 2BW would need more than two weight versions; raise m or use "
                "flush");
  }
  const int64_t multiple = microbatch_multiple(p.schedule, p.depth);
  if (p.microbatches_per_step % multiple != 0) {
    fail("/microbatches_per_step",
         fmt::format("{} needs microbatches_per_step to be a multiple of depth ({} % {} = {})", to_string(p.schedule),
                     p.microbatches_per_step, multiple, p.microbatches_per_step % multiple),
         megatron);
  }
}

// The stages: depth x chunks_per_rank of them (check_chunks bounded v), contiguous from layer 0 to
// num_layers, each with one rank per replica.
void check_stages(const Plan& p) {
  const int64_t count = checked_mul(p.depth, p.chunks_per_rank);
  if (static_cast<int64_t>(p.stages.size()) != count) {
    if (p.chunks_per_rank == 1) {
      fail("/stages", fmt::format("has {} stages but /depth is {}", p.stages.size(), p.depth), kRegenerate);
    }
    fail("/stages",
         fmt::format("has {} stages but depth x chunks_per_rank = {} x {} {}", p.stages.size(), p.depth,
                     p.chunks_per_rank, count < 0 ? std::string("overflows") : fmt::format("= {}", count)),
         "a chunked plan has one stage per model chunk, in model order; regenerate it with `pd2bw plan`");
  }
  int64_t next = 0;
  for (std::size_t i = 0; i < p.stages.size(); ++i) {
    const StagePlan& s = p.stages[i];
    if (s.index != static_cast<int64_t>(i)) {
      fail(stage_ptr(i, "index"), fmt::format("expected {} (its position), got {}", i, s.index), kRegenerate);
    }
    if (s.layer_begin != next) {
      fail(stage_ptr(i, "layer_begin"),
           fmt::format("expected {} (stages must be contiguous from layer 0), got {}", next, s.layer_begin),
           kRegenerate);
    }
    if (s.layer_end <= s.layer_begin) {
      fail(stage_ptr(i, "layer_end"), fmt::format("must be > layer_begin ({}), got {}", s.layer_begin, s.layer_end),
           kRegenerate);
    }
    if (static_cast<int64_t>(s.ranks.size()) != p.width) {
      fail(stage_ptr(i, "ranks"), fmt::format("has {} ranks but /width is {}", s.ranks.size(), p.width), kRegenerate);
    }
    next = s.layer_end;
  }
  if (next != p.num_layers) {
    fail(stage_ptr(p.stages.size() - 1, "layer_end"),
         fmt::format("the last stage must end at /num_layers ({}), got {}", p.num_layers, next), kRegenerate);
  }
  if (p.predictions.bottleneck_stage >= count) {  // an index into /stages: a chunk when v > 1
    fail("/predictions/bottleneck_stage",
         p.chunks_per_rank == 1
             ? fmt::format("must name a stage below /depth ({}), got {}", p.depth, p.predictions.bottleneck_stage)
             : fmt::format("must name a chunk below depth x chunks_per_rank ({}), got {}", count,
                           p.predictions.bottleneck_stage),
         kRegenerate);
  }
}

// Every rank entry is in order, inside the grid and on its own device.
void check_rank_table(const Plan& p) {
  const auto n = p.width * p.depth;  // fits: check_batch ran first
  if (static_cast<int64_t>(p.ranks.size()) != n) {
    fail("/ranks", fmt::format("has {} entries but width x depth = {}", p.ranks.size(), n), kRegenerate);
  }
  const int64_t node_size = p.cluster.levels.front().size;
  const int64_t nodes = p.cluster.total_devices() / node_size;
  std::map<std::pair<int64_t, int64_t>, std::size_t> devices;
  for (std::size_t k = 0; k < p.ranks.size(); ++k) {
    const RankEntry& e = p.ranks[k];
    if (e.rank != static_cast<int64_t>(k)) {
      fail(rank_ptr(k, "rank"), fmt::format("expected {} (entries are in rank order), got {}", k, e.rank), kRegenerate);
    }
    if (e.stage >= p.depth) fail(rank_ptr(k, "stage"), fmt::format("must be < /depth ({})", p.depth), kRegenerate);
    if (e.replica >= p.width) fail(rank_ptr(k, "replica"), fmt::format("must be < /width ({})", p.width), kRegenerate);
    if (e.node >= nodes) {
      fail(rank_ptr(k, "node"), fmt::format("must be < the cluster's {} nodes", nodes), kRegenerate);
    }
    if (e.local_device >= node_size) {
      fail(rank_ptr(k, "local_device"), fmt::format("must be < /cluster/levels/0/size ({})", node_size), kRegenerate);
    }
    const auto [it, fresh] = devices.emplace(std::make_pair(e.node, e.local_device), k);
    if (!fresh) {
      fail(child_pointer("/ranks", k),
           fmt::format("shares node {} device {} with /ranks/{}", e.node, e.local_device, it->second), kRegenerate);
    }
  }
}

// The first chunks' rank lists (chunk i < depth runs on position i) follow the placement rule and agree
// with the rank table, whose "stage" is the position; every later chunk lists its position's ranks.
void check_stage_ranks(const Plan& p) {
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const auto si = static_cast<int64_t>(s);
    const int64_t position = chunk_position(p.schedule, p.depth, si);
    for (std::size_t r = 0; r < p.stages[s].ranks.size(); ++r) {
      const int64_t rank = p.stages[s].ranks[r];
      const std::string ptr = child_pointer(stage_ptr(s, "ranks"), r);
      const auto ri = static_cast<int64_t>(r);
      if (si >= p.depth) {  // a later chunk: its position's first chunk, checked below, sets its ranks
        const int64_t expected = p.stages[static_cast<std::size_t>(position)].ranks[r];
        if (rank != expected) {
          fail(ptr,
               fmt::format("chunk {} runs on position {}, whose replica {} is rank {} (/stages/{}/ranks/{}), got {}",
                           s, position, r, expected, position, r, rank),
               "a rank holds every chunk of its position, so those chunks list the same ranks; regenerate the "
               "plan with `pd2bw plan`");
        }
        continue;
      }
      const int64_t expected = placement_rank(p.placement, p.depth, p.width, si, ri);
      if (rank != expected) {
        fail(ptr,
             fmt::format("placement {} puts stage {} replica {} on rank {}, got {}", to_string(p.placement), s, r,
                         expected, rank),
             kRegenerate);
      }
      const RankEntry& e = p.ranks[static_cast<std::size_t>(rank)];  // < n by the placement rule
      if (e.stage != si || e.replica != ri) {
        fail(ptr,
             fmt::format("rank {} is stage {} replica {} here but /ranks/{} says stage {} replica {}", rank, s, r,
                         rank, e.stage, e.replica),
             kRegenerate);
      }
    }
  }
}

// With v > 1, the chunks of one position share one device: one recompute flag (stage_ops takes one per
// rank), one limit, the reserve once (on the first chunk), and their totals must fit that limit together.
void check_positions(const Plan& p) {
  if (p.chunks_per_rank == 1) return;  // one chunk per rank: its total against its limit is plan_audit's
  const char* const one_device =
      "a rank holds every chunk of its position on one device; regenerate the plan with `pd2bw plan`";
  std::vector<int64_t> held(static_cast<std::size_t>(p.depth), 0);  // depth <= stages.size(): check_stages
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const StagePlan& chunk = p.stages[s];
    const auto position = static_cast<std::size_t>(chunk_position(p.schedule, p.depth, static_cast<int64_t>(s)));
    const StagePlan& first = p.stages[position];  // chunk `position` is the position's first
    if (chunk.recompute != first.recompute) {
      fail(stage_ptr(s, "recompute"),
           fmt::format("is {} but chunk {}, on the same position {}, has {}", chunk.recompute, position, position,
                       first.recompute),
           "a rank recomputes all of its chunks or none; regenerate the plan with `pd2bw plan`");
    }
    const std::string mem = stage_ptr(s, "memory");
    if (chunk.memory.limit_bytes != first.memory.limit_bytes) {
      fail(mem + "/limit_bytes",
           fmt::format("is {} but chunk {}, on the same position {}, has {}", chunk.memory.limit_bytes, position,
                       position, first.memory.limit_bytes),
           one_device);
    }
    if (s != position && chunk.memory.reserve_bytes != 0) {
      fail(mem + "/reserve_bytes",
           fmt::format("must be 0, got {}: the reserve is counted once per rank, on its first chunk (/stages/{})",
                       chunk.memory.reserve_bytes, position),
           one_device);
    }
    held[position] = saturating_sum(held[position], chunk.memory.total_bytes);
    if (held[position] > first.memory.limit_bytes) {
      fail(mem + "/total_bytes",
           fmt::format("the chunks of position {} up to this one need {} bytes together, over their device's "
                       "limit_bytes ({})",
                       position, held[position], first.memory.limit_bytes),
           "a rank holds all of its chunks at once, so their total_bytes add up and must fit one device; "
           "regenerate the plan with `pd2bw plan`");
    }
  }
}

}  // namespace

void check_plan_consistency(const Plan& plan) {
  check_sha(plan.profile_sha256);
  check_chunks(plan);
  check_stages(plan);
  check_batch(plan);
  check_rank_table(plan);
  check_stage_ranks(plan);
  check_positions(plan);
}

}  // namespace pd2bw::schemas::detail
