// The simulator's inputs for chunked schedules from a cost model and from a plan: make_sim_input prices
// each chunk (local turns, the reserve once, communication off the rank) and plan_model reads a chunked
// plan's v, chunk bounds and flags, on random instances whose profiles time the backward in halves. The
// simulator itself on chunked schedules is tested in test_simulator_chunks.cpp.
#include <doctest/doctest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/pipeline/stash.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "random_instances.hpp"

using namespace pd2bw::planner;
using pd2bw::schemas::Schedule;
namespace pipeline = pd2bw::pipeline;

namespace {

// A random instance whose profile times the backward in halves and has at least `layers` layers.
pd2bw::testing::RandomInstance split_instance(uint64_t seed, int64_t layers) {
  pd2bw::testing::RandomInstanceOptions opt;
  opt.min_layers = layers;
  opt.max_layers = layers + 4;
  opt.split_backward_p = 1.0;
  return pd2bw::testing::make_random_instance(seed, opt);
}

// The candidate's chunks split as evenly as the layers allow.
std::vector<int64_t> even_bounds(int64_t layers, int64_t chunks) {
  std::vector<int64_t> out;
  for (int64_t k = 0; k <= chunks; ++k) out.push_back(k * layers / chunks);
  return out;
}

}  // namespace

TEST_CASE("make_sim_input prices chunks from the cost model: local turns, the reserve once, comm off the rank") {
  int64_t checked = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const auto inst = split_instance(seed, 8);
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    int64_t devices = 1;
    for (const auto& lv : inst.cluster.levels) devices *= lv.size;
    for (const auto& [kind, v] : std::vector<std::pair<Schedule, int64_t>>{
             {Schedule::interleaved, 2}, {Schedule::zb_v, 2}, {Schedule::zb_h2, 1}, {Schedule::interleaved, 4}}) {
      const int64_t d = 2, w = devices >= 4 ? 2 : 1;
      if (devices < d * w) continue;
      const Candidate c{kind, 0, inst.profile.microbatch_sizes[0], w, d, 2 * d, pd2bw::schemas::Placement::replicas_inner, v};
      const auto bounds = even_bounds(model.num_layers(), d * v);
      std::vector<bool> recompute(static_cast<size_t>(d * v), false);
      for (int64_t k = 0; k < d * v; ++k)
        recompute[static_cast<size_t>(k)] = pd2bw::schemas::chunk_position(kind, d, k) == static_cast<int64_t>(seed % 2);
      CAPTURE(inst.describe());
      const SimInput in = make_sim_input(model, c, bounds, recompute, 3);
      REQUIRE(in.stages.size() == static_cast<size_t>(d * v));
      CHECK(in.spec.chunks == v);
      const auto& sf = model.static_factors(kind);
      std::vector<int64_t> statics(static_cast<size_t>(d), model.constraints().reserve_bytes);
      std::vector<std::vector<pipeline::ChunkStashBytes>> bytes(static_cast<size_t>(d));
      for (int64_t k = 0; k < d * v; ++k) {
        const auto b = static_cast<size_t>(bounds[static_cast<size_t>(k)]), e = static_cast<size_t>(bounds[static_cast<size_t>(k) + 1]);
        const auto pos = static_cast<size_t>(pd2bw::schemas::chunk_position(kind, d, k));
        const bool left = k > 0 && pd2bw::schemas::chunk_position(kind, d, k - 1) != static_cast<int64_t>(pos);
        const bool right = k + 1 < d * v && pd2bw::schemas::chunk_position(kind, d, k + 1) != static_cast<int64_t>(pos);
        const int64_t in_b = model.input_bytes(0)[b], out_b = model.output_bytes(0)[e - 1];
        statics[pos] += sf.total(model.param_prefix()[e] - model.param_prefix()[b]) + (left ? 2 * in_b : 0) + (right ? 2 * out_b : 0);
        const int64_t stash = model.stash_prefix(0)[e] - model.stash_prefix(0)[b];
        const bool redo = recompute[static_cast<size_t>(k)];
        const bool split_w = pd2bw::schemas::splits_backward(kind);
        bytes[pos].push_back({redo ? in_b : stash, redo ? stash : 0,
                              split_w ? model.weight_stash_prefix(0)[e] - model.weight_stash_prefix(0)[b] : 0});
        if (k + 1 < d * v)
          for (int64_t r = 0; r < w; ++r) {
            const double got = in.boundary_ms[static_cast<size_t>(r)][static_cast<size_t>(k)];
            if (!right) CHECK(got == 0.0);
            else CHECK(got == model.p2p_ms(out_b, model.level_between(CostModel::rank_of(c, static_cast<int64_t>(pos), r),
                                                                  CostModel::rank_of(c, pd2bw::schemas::chunk_position(kind, d, k + 1), r))));
          }
        const bool split = pd2bw::schemas::splits_backward(kind);
        CHECK(in.stages[static_cast<size_t>(k)].weight_ms == (split ? model.weight_prefix(0)[e] - model.weight_prefix(0)[b] : 0.0));
      }
      const SimResult r = simulate(in);
      for (int64_t i = 0; i < d; ++i) {
        const auto walk = pipeline::stash_walk(in.spec, i, recompute[static_cast<size_t>(i)]);
        CHECK(r.stages[static_cast<size_t>(i)].peak_bytes ==
              statics[static_cast<size_t>(i)] + pipeline::stash_peak(walk, bytes[static_cast<size_t>(i)]));
      }
      ++checked;
    }
  }
  CHECK(checked > 40);
}

TEST_CASE("plan_model reads a chunked plan: v, the chunks' bounds and flags; split schedules need the halves") {
  for (const auto& [kind, v] : std::vector<std::pair<Schedule, int64_t>>{
           {Schedule::zb_v, 2}, {Schedule::interleaved, 3}, {Schedule::zb_h2, 1}}) {
    auto inst = split_instance(7, 8);
    pd2bw::schemas::Plan plan;
    plan.model = inst.profile.model;
    plan.num_layers = static_cast<int64_t>(inst.profile.layers.size());
    plan.cluster = inst.cluster;
    plan.schedule = kind;
    plan.microbatch_size = inst.profile.microbatch_sizes[0];
    plan.depth = 2;
    plan.width = 1;
    plan.chunks_per_rank = v;
    plan.microbatches_per_step = 4;
    plan.global_batch = plan.microbatch_size * 4;
    const auto bounds = even_bounds(plan.num_layers, 2 * v);
    for (int64_t k = 0; k < 2 * v; ++k) {
      pd2bw::schemas::StagePlan st;
      st.index = k;
      st.layer_begin = bounds[static_cast<size_t>(k)];
      st.layer_end = bounds[static_cast<size_t>(k + 1)];
      st.recompute = pd2bw::schemas::chunk_position(kind, 2, k) == 1;
      st.ranks = {pd2bw::schemas::chunk_position(kind, 2, k)};
      plan.stages.push_back(st);
    }
    CAPTURE(pd2bw::schemas::to_string(kind));
    const PlanModel pm = plan_model(inst.profile, plan);
    CHECK(pm.candidate.chunks == v);
    CHECK(pm.candidate.schedule == kind);
    CHECK(pm.bounds == bounds);
    REQUIRE(pm.recompute.size() == static_cast<size_t>(2 * v));
    for (size_t k = 0; k < pm.recompute.size(); ++k) CHECK(pm.recompute[k] == plan.stages[k].recompute);
    const SimResult r = simulate_steady(make_sim_input(pm.model, pm.candidate, pm.bounds, pm.recompute, 3));
    CHECK(r.stages.size() == 2);
    CHECK(r.step_ms > 0);
    for (auto& layer : inst.profile.layers)
      for (auto& t : layer.per_microbatch) t.split = false;
    if (pd2bw::schemas::splits_backward(kind))
      CHECK_THROWS_AS(plan_model(inst.profile, plan), pd2bw::UsageError);
    else
      CHECK(plan_model(inst.profile, plan).candidate.chunks == v);
  }
}
