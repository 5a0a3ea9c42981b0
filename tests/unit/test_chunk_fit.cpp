// The memory-fitted start's rank layouts (planner/src/chunk_fit.cpp: RankLayouts), against a reference
// built on real splits. On a model whose blocks are all alike (the BERT and GPT examples' blocks
// repeated), the windows RankLayouts prices a rank's chunks on hold the same layers as a split that
// gives that rank the same chunk sizes (alike layers: the same sums), so its choice must be exactly the
// one the selection rule makes with each candidate layout's floor on such a split (chunked_rank_floor):
// the chunk of fewest activations in flight (then fewest W's waiting) where it fits without recompute,
// else the least plain floor where that fits, else the same with recompute, and where none fits the
// least floor of the last option tried, under every --recompute policy. And capacity is the most layers
// whose best layout fits, by a linear scan.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "chunk_fit.hpp"
#include "chunk_floor.hpp"
#include "pd2bw/pipeline/stash.hpp"
#include "repeated_profile.hpp"

using namespace pd2bw::planner;
using pd2bw::schemas::Schedule;
namespace detail = pd2bw::planner::detail;

namespace {

// The local chunk of rank p with the fewest activations in flight at its floor's moments, on ties the
// fewest W's waiting, then the first.
size_t fewest_chunk(const Candidate& c, int64_t p) {
  const int64_t m = pd2bw::pipeline::walk_microbatches(c.schedule, c.depth, c.microbatches);
  std::vector<int64_t> acts(static_cast<size_t>(c.chunks), 0), ws(static_cast<size_t>(c.chunks), 0);
  for (const auto& moment : detail::floor_moments(c.schedule, c.depth, c.chunks, m, p))
    for (size_t j = 0; j < moment.size(); ++j) {
      acts[j] = std::max(acts[j], moment[j].activations);
      ws[j] = std::max(ws[j], moment[j].weight_stashes);
    }
  size_t out = 0;
  for (size_t j = 1; j < acts.size(); ++j)
    if (acts[j] < acts[out] || (acts[j] == acts[out] && ws[j] < ws[out])) out = j;
  return out;
}

// The floor of rank p holding n layers with `heavy` its big chunk, on a real split: every other rank
// holds v layers but rank q = p + 1 (mod d), which takes the rest in its first chunk.
detail::RankFloor floor_on_split(const CostModel& model, const Candidate& c, int64_t p, int64_t n, size_t heavy) {
  const int64_t L = model.num_layers(), v = c.chunks;
  std::vector<int64_t> counts(static_cast<size_t>(c.depth), v);
  counts[static_cast<size_t>(p)] = n;
  counts[static_cast<size_t>((p + 1) % c.depth)] += L - n - (c.depth - 1) * v;
  std::vector<size_t> heavies(static_cast<size_t>(c.depth), 0);
  heavies[static_cast<size_t>(p)] = heavy;
  return detail::chunked_rank_floor(model, c, detail::laid_out(c, counts, heavies), p);
}

// The selection rule, on the floors of every layout of rank p holding n layers.
detail::RankLayout reference_best(const CostModel& model, const Candidate& c, int64_t p, int64_t n) {
  const int64_t limit = model.memory_limit_bytes();
  const auto policy = model.constraints().recompute;
  std::vector<detail::RankFloor> f;
  for (size_t j = 0; j < static_cast<size_t>(c.chunks); ++j) f.push_back(floor_on_split(model, c, p, n, j));
  const size_t fewest = fewest_chunk(c, p);
  for (const bool plain : {true, false}) {
    if (plain ? policy == RecomputePolicy::always : policy == RecomputePolicy::never) continue;
    const auto at = [&](size_t j) { return plain ? f[j].plain : f[j].redo; };
    if (at(fewest) <= limit) return {fewest, true};
    size_t least = fewest;
    for (size_t j = 0; j < f.size(); ++j)
      if (at(j) < at(least)) least = j;
    if (at(least) <= limit) return {least, true};
    if (plain ? policy == RecomputePolicy::never : true) return {least, false};  // the last option tried
  }
  return {};
}

}  // namespace

TEST_CASE("rank layouts choose as the selection rule does on real splits, and capacity is the last fit") {
  int64_t checked = 0, fit = 0, unfit = 0, not_fewest = 0;
  for (const std::string name : {"bert-3.8b", "gpt-3.8b"}) {
    const Profile profile = pd2bw::testing::repeated_profile(name, 40);
    for (const auto policy : {RecomputePolicy::auto_, RecomputePolicy::never, RecomputePolicy::always})
      for (const int64_t gib : {24, 48, 80})
        for (const auto& [kind, v] : std::vector<std::pair<Schedule, int64_t>>{
                 {Schedule::zb_v, 2}, {Schedule::interleaved, 2}, {Schedule::interleaved, 3}})
          for (int64_t d = 2; d <= 5; ++d)
            for (const int64_t m : {d, 2 * d, 3 * d}) {
              Constraints constraints;
              constraints.global_batch = m * 2;
              constraints.recompute = policy;
              const CostModel model(profile, pd2bw::testing::one_node(gib), constraints);
              const Candidate c{kind, 1, 2, 1, d, m, pd2bw::schemas::Placement::replicas_inner, v};
              REQUIRE(profile.microbatch_sizes[1] == 2);
              const detail::RankFloors floors(model, c);
              const detail::RankLayouts layouts(model, c, floors);
              const int64_t most = model.num_layers() - (d - 1) * v;
              for (int64_t p = 0; p < d; ++p) {
                CAPTURE(name);
                CAPTURE(pd2bw::schemas::to_string(kind));
                CAPTURE(static_cast<int>(policy));
                CAPTURE(gib);
                CAPTURE(d);
                CAPTURE(v);
                CAPTURE(m);
                CAPTURE(p);
                const size_t fewest = fewest_chunk(c, p);
                int64_t last_fit = v - 1;
                for (int64_t n = v; n <= most; ++n) {
                  CAPTURE(n);
                  const detail::RankLayout got = layouts.best(p, n), want = reference_best(model, c, p, n);
                  REQUIRE(got.fits == want.fits);
                  CHECK(got.heavy == want.heavy);
                  if (got.fits) last_fit = n, ++fit, not_fewest += got.heavy != fewest;
                  unfit += !got.fits;
                  ++checked;
                }
                // Fitting holds on a prefix of n here, so the bisection finds the last fit.
                CHECK(layouts.capacity(p, most) == last_fit);
              }
            }
  }
  // Both answers occur, and so do layouts away from the fewest-activations chunk.
  CHECK(checked > 10000);
  CHECK(fit > 1000);
  CHECK(unfit > 1000);
  CHECK(not_fewest > 100);
}
