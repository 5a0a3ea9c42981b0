// The fuzz targets' bodies (targets.hpp).
#include "targets.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pd2bw/error.hpp"
#include "pd2bw/planner/search.hpp"
#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::fuzz {
namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz property broken: %s\n", what);
  std::abort();
}

// Reads with `parse`, then checks that what `dump` writes reads back to the same text.
template <typename Parse, typename Dump>
void round_trip(const uint8_t* data, size_t size, Parse parse, Dump dump) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string once;
  try {
    once = dump(parse(text));
  } catch (const pd2bw::Error&) {
    return;  // rejected with a message: what a reader should do with bad input
  }
  try {
    if (dump(parse(once)) != once) broken("a written file does not read back to the same text");
  } catch (const pd2bw::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    broken("a written file is rejected by its own reader");
  }
}

// Sizes and times the planner target explores: beyond these the planner's own checked arithmetic
// answers (with a clear error), which is not what this target searches for.
bool realistic(const schemas::Profile& p) {
  if (p.layers.size() > 64 || p.microbatch_sizes.size() > 4) return false;
  constexpr int64_t kBytes = int64_t{1} << 40;
  constexpr double kMs = 1e6;
  for (const auto& l : p.layers) {
    if (l.param_bytes > kBytes || l.optimizer_bytes > kBytes || l.update_ms > kMs) return false;
    for (const auto& t : l.per_microbatch)
      if (t.input_bytes > kBytes || t.output_bytes > kBytes || t.stash_bytes > kBytes || t.fwd_ms > kMs ||
          t.bwd_ms > kMs || t.recompute_ms > kMs || t.stash_bytes_computed > kBytes)
        return false;
  }
  for (const int64_t b : p.microbatch_sizes)
    if (b > 1024) return false;
  return true;
}

schemas::ClusterLevel level(const char* name, int64_t size, double gbps, double latency_ms) {
  schemas::ClusterLevel l;
  l.name = name;
  l.size = size;
  l.p2p_gbps = gbps;
  l.p2p_latency_ms = latency_ms;
  l.allreduce_busbw_gbps = 0.8 * gbps;
  return l;
}

schemas::Cluster small_cluster() {
  schemas::Cluster c;
  c.device = {"fuzz", int64_t{16} << 30};
  c.levels = {level("node", 4, 100.0, 0.005), level("cluster", 2, 10.0, 0.01)};
  return c;
}

}  // namespace

void profile_reader(const uint8_t* data, size_t size) {
  round_trip(data, size, schemas::parse_profile, schemas::dump_profile);
}

void cluster_reader(const uint8_t* data, size_t size) {
  round_trip(data, size, schemas::parse_cluster, schemas::dump_cluster);
}

void plan_reader(const uint8_t* data, size_t size) {
  round_trip(data, size, schemas::parse_plan, schemas::dump_plan);
}

void plan_search(const uint8_t* data, size_t size) {
  schemas::Profile profile;
  try {
    profile = schemas::parse_profile(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const pd2bw::Error&) {
    return;
  }
  if (!realistic(profile)) return;
  schemas::Plan plan;
  try {
    planner::Constraints k;
    k.global_batch = 16;
    k.reserve_bytes = 0;
    const planner::CostModel model(profile, small_cluster(), k);
    planner::SearchOptions so;
    so.top_k = 2;
    so.threads = 1;
    planner::SearchResult result = planner::search(model, so);
    if (!result.feasible()) return;
    planner::rank_by_simulation(model, result, 1);
    plan = planner::build_plan(model, result, std::string(64, 'a'), {"fuzz", "0", "unknown", "", ""});
  } catch (const pd2bw::Error&) {
    return;  // an infeasible or unplannable profile, said with a message
  }
  if (!std::isfinite(plan.predictions.step_ms) || plan.predictions.step_ms <= 0) broken("a plan's step time is not > 0");
  try {
    (void)schemas::parse_plan(schemas::dump_plan(plan));
  } catch (const pd2bw::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    broken("the plan reader rejects a plan the planner wrote");
  }
}

Target target_named(std::string_view name) {
  if (name == "profile_reader") return profile_reader;
  if (name == "cluster_reader") return cluster_reader;
  if (name == "plan_reader") return plan_reader;
  if (name == "plan_search") return plan_search;
  return nullptr;
}

}  // namespace pd2bw::fuzz
