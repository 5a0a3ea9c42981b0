// The chunked schedules' memory floor (planner/src/chunk_floor.hpp): its closed-form moments are moments
// both stash walks keep (or cover), and over many small random instances no candidate it rules out has a
// split that fits, and no split it rules out fits or is over by no more than the slack it was given.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "brute_force.hpp"
#include "chunk_floor.hpp"
#include "pd2bw/pipeline/stash.hpp"
#include "random_instances.hpp"

using pd2bw::planner::Candidate;
using pd2bw::planner::CostModel;
using pd2bw::schemas::Schedule;
namespace pipeline = pd2bw::pipeline;
namespace detail = pd2bw::planner::detail;

namespace {

using Moment = std::vector<pipeline::ChunkHeld>;

bool covered(const std::vector<Moment>& kept, const Moment& m) {
  return std::any_of(kept.begin(), kept.end(), [&](const Moment& k) {
    for (size_t j = 0; j < m.size(); ++j)
      if (k[j].activations < m[j].activations || k[j].rebuilt < m[j].rebuilt ||
          k[j].weight_stashes < m[j].weight_stashes)
        return false;
    return true;
  });
}

// Every composition of L layers into n non-empty chunks.
void for_each_composition(int64_t L, int64_t n, const std::function<void(const std::vector<int64_t>&)>& visit) {
  std::vector<int64_t> bounds(static_cast<size_t>(n + 1), 0);
  bounds.back() = L;
  std::function<void(int64_t)> walk = [&](int64_t k) {
    if (k == n - 1) return visit(bounds);
    for (int64_t e = bounds[static_cast<size_t>(k)] + 1; e <= L - (n - 1 - k); ++e) {
      bounds[static_cast<size_t>(k + 1)] = e;
      walk(k + 1);
    }
  };
  if (n <= L) walk(0);
}

}  // namespace

TEST_CASE("the floor's moments are moments both stash walks keep or cover") {
  int64_t checked = 0, loaded = 0;
  for (Schedule kind : {Schedule::interleaved, Schedule::zb_v})
    for (int64_t d = 1; d <= 9; ++d)
      for (int64_t v : kind == Schedule::zb_v ? std::vector<int64_t>{2} : std::vector<int64_t>{2, 3, 4})
        for (int64_t m = 1; m <= 3 * d + 2; ++m) {
          if (kind == Schedule::interleaved && (m < d || m % d != 0)) continue;
          const int64_t walked = pipeline::walk_microbatches(kind, d, m);
          for (int64_t i = 0; i < d; ++i) {
            const auto [plain, redo] = pipeline::stash_walks({kind, d, m, 1, 1, v}, i);
            const auto moments = detail::floor_moments(kind, d, v, walked, i);
            CHECK(!moments.empty());
            for (const Moment& fm : moments) {
              INFO(pd2bw::testing::schedule_name(kind) << " d=" << d << " v=" << v << " m=" << m << " rank " << i);
              REQUIRE(fm.size() == plain.chunks.size());
              Moment none_rebuilt = fm;
              for (auto& h : none_rebuilt) h.rebuilt = 0;
              CHECK(covered(plain.moments.rows(), none_rebuilt));
              CHECK(covered(redo.moments.rows(), fm));
              ++checked;
              for (const auto& h : fm) loaded += h.activations + h.weight_stashes;
            }
          }
        }
  CHECK(checked > 1000);
  CHECK(loaded > 10000);
}

namespace {

// What ChunkPricer prices a rank at, less its comm buffers, written out from the stash walks: reserve +
// its chunks' statics + the stash peak, without and with recompute.
detail::RankFloor reference(const CostModel& model, const Candidate& c, const std::vector<int64_t>& bounds,
                            const pipeline::StashWalk& plain, const pipeline::StashWalk& redo) {
  const auto mi = c.microbatch_index;
  const auto& pp = model.param_prefix();
  const auto& sp = model.stash_prefix(mi);
  const auto& wp = model.weight_stash_prefix(mi);
  const bool split = pd2bw::schemas::splits_backward(c.schedule);
  int64_t fixed = model.constraints().reserve_bytes;
  std::vector<pipeline::ChunkStashBytes> plain_bytes, redo_bytes;
  for (int64_t k : plain.chunks) {
    const auto b = static_cast<size_t>(bounds[static_cast<size_t>(k)]),
               e = static_cast<size_t>(bounds[static_cast<size_t>(k) + 1]);
    fixed += model.static_factors(c.schedule).total(pp[e] - pp[b]);
    const int64_t wst = split ? wp[e] - wp[b] : 0;
    plain_bytes.push_back({sp[e] - sp[b], 0, wst});
    redo_bytes.push_back({model.input_bytes(mi)[b], sp[e] - sp[b], wst});
  }
  return {fixed + pipeline::stash_peak(plain, plain_bytes), fixed + pipeline::stash_peak(redo, redo_bytes)};
}

struct Tally {
  int64_t candidates = 0, ruled_out = 0, splits = 0, fitting = 0, splits_out = 0, slack_out = 0;
  int64_t ranks = 0, tight_plain = 0, tight_redo = 0, capped = 0, tight_cap = 0, cap_changes = 0;
};

void check_candidate(const CostModel& model, const Candidate& c, pd2bw::testing::Rng& rng, Tally& t) {
  ++t.candidates;
  const bool may = detail::chunked_may_fit(model, c);
  t.ruled_out += may ? 0 : 1;
  const int64_t limit = model.memory_limit_bytes();
  std::vector<std::pair<pipeline::StashWalk, pipeline::StashWalk>> walks;
  std::vector<detail::RankFloor> caps;
  for (int64_t p = 0; p < c.depth; ++p) {
    walks.push_back(pipeline::stash_walks({c.schedule, c.depth, c.microbatches, 1, 1, c.chunks}, p));
    caps.push_back(detail::chunked_rank_capacity(model, c, p));
  }
  // All positions at once, each rank's searches starting from the rank before's answers: the same caps.
  const auto all = detail::chunked_rank_capacities(model, c);
  REQUIRE(all.size() == caps.size());
  for (size_t p = 0; p < caps.size(); ++p) {
    CHECK(all[p].plain == caps[p].plain);
    CHECK(all[p].redo == caps[p].redo);
    t.cap_changes += p > 0 && (caps[p].plain != caps[p - 1].plain || caps[p].redo != caps[p - 1].redo) ? 1 : 0;
  }
  for_each_composition(model.num_layers(), c.depth * c.chunks, [&](const std::vector<int64_t>& bounds) {
    pd2bw::planner::Split split;
    split.bounds = bounds;
    const auto stages = pd2bw::planner::evaluate_split(model, c, split).stages;
    const bool fits = std::all_of(stages.begin(), stages.end(), [](const auto& s) { return s.feasible; });
    int64_t over = 0;
    for (const auto& s : stages) over = std::max(over, s.over_bytes);
    ++t.splits;
    t.fitting += fits ? 1 : 0;
    if (!may) CHECK_FALSE(fits);
    if (!detail::chunked_split_may_fit(model, c, bounds)) {
      ++t.splits_out;
      CHECK_FALSE(fits);
    }
    const int64_t slack = rng.range(0, std::max<int64_t>(1, limit));
    if (!detail::chunked_split_may_fit(model, c, bounds, slack)) {
      ++t.slack_out;
      CHECK(over > slack);
    }
    for (int64_t p = 0; p < c.depth; ++p) {
      const auto& [plain, redo] = walks[static_cast<size_t>(p)];
      const auto ref = reference(model, c, bounds, plain, redo);
      const auto floor = detail::chunked_rank_floor(model, c, bounds, p);
      ++t.ranks;
      CHECK(floor.plain <= ref.plain);
      CHECK(floor.redo <= ref.redo);
      t.tight_plain += floor.plain == ref.plain ? 1 : 0;
      t.tight_redo += floor.redo == ref.redo ? 1 : 0;
      int64_t layers = 0;
      for (int64_t k : plain.chunks) layers += bounds[static_cast<size_t>(k) + 1] - bounds[static_cast<size_t>(k)];
      const auto& cap = caps[static_cast<size_t>(p)];
      // The capacity's bound over all splits is below this split's floor (the proof's chain), which is
      // below what the pricer charges: a rank whose floor fits holds no more layers than its capacity.
      for (const auto& [bytes, most] : {std::pair{floor.plain, cap.plain}, std::pair{floor.redo, cap.redo}}) {
        if (bytes > limit) continue;
        ++t.capped;
        CHECK(layers <= most);
        t.tight_cap += layers == most ? 1 : 0;
      }
    }
  });
}

}  // namespace

TEST_CASE("no candidate or split the floor rules out has a split that fits") {
  Tally t;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const auto inst = pd2bw::testing::make_random_instance(seed);
    INFO(inst.describe());
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    pd2bw::testing::Rng rng(seed + 17);
    pd2bw::testing::for_each_candidate(model, [&](const Candidate& c) {
      if (c.chunks < 2) return;
      INFO(pd2bw::testing::schedule_name(c.schedule) << " b=" << c.microbatch << " w=" << c.width << " d=" << c.depth
                                                     << " m=" << c.microbatches << " v=" << c.chunks);
      check_candidate(model, c, rng, t);
    });
  }
  MESSAGE(t.candidates << " chunked candidates, " << t.ruled_out << " ruled out; " << t.splits << " splits, "
                       << t.fitting << " fit, " << t.splits_out << " ruled out, " << t.slack_out
                       << " ruled out with slack; " << t.ranks << " ranks, floor tight " << t.tight_plain << " / "
                       << t.tight_redo << "; " << t.capped << " rank options whose floor fits, " << t.tight_cap
                       << " at their capacity; " << t.cap_changes << " ranks whose caps differ from the rank before's");
  // The checks above must have had something to check: the floor rules out a fair share, many splits
  // fit, and the floors meet what they bound often enough that a raised floor shows.
  CHECK(t.ruled_out > t.candidates / 20);
  CHECK(t.splits_out > t.splits / 20);
  CHECK(t.slack_out > 100);
  CHECK(t.fitting > t.splits / 20);
  CHECK(t.tight_plain > 100);
  CHECK(t.tight_redo > 100);
  CHECK(t.tight_cap > 100);
  CHECK(t.cap_changes > 100);  // the searches that start from the rank before's answer must move
}
