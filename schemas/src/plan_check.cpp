// The plan's cross-field rules: stages tile the layers, the rank grid matches width x depth and the
// placement, the rank table agrees with the stages, and the batch arithmetic adds up. A plan that
// passes can be executed without further checks by `pd2bw train`.
#include <limits>
#include <map>
#include <utility>

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
  if (p.microbatches_per_step < min_microbatches(p.schedule, p.depth)) {
    fail("/microbatches_per_step",
         fmt::format("{} needs microbatches_per_step >= depth ({} < {})", to_string(p.schedule),
                     p.microbatches_per_step, p.depth),
         "with fewer microbatches than stages 2BW would need more than two weight versions; raise m or use flush");
  }
}

void check_stages(const Plan& p) {
  if (static_cast<int64_t>(p.stages.size()) != p.depth) {
    fail("/stages", fmt::format("has {} stages but /depth is {}", p.stages.size(), p.depth), kRegenerate);
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
  if (p.predictions.bottleneck_stage >= p.depth) {
    fail("/predictions/bottleneck_stage",
         fmt::format("must name a stage below /depth ({}), got {}", p.depth, p.predictions.bottleneck_stage),
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

// The stages' rank lists follow the placement rule and agree with the rank table.
void check_stage_ranks(const Plan& p) {
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    for (std::size_t r = 0; r < p.stages[s].ranks.size(); ++r) {
      const int64_t rank = p.stages[s].ranks[r];
      const std::string ptr = child_pointer(stage_ptr(s, "ranks"), r);
      const auto si = static_cast<int64_t>(s);
      const auto ri = static_cast<int64_t>(r);
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

}  // namespace

void check_plan_consistency(const Plan& plan) {
  check_sha(plan.profile_sha256);
  check_stages(plan);
  check_batch(plan);
  check_rank_table(plan);
  check_stage_ranks(plan);
}

}  // namespace pd2bw::schemas::detail
