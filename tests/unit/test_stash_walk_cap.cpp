// The stash walk's two shortcuts against the walk they replace, read off the generator's uncapped op
// list: for the chunked schedules a step of m > 2d microbatches is walked as one of 2d
// (pipeline::walk_microbatches), and a moment is compared with the last few kept only. Reduced to the
// moments no other covers, the walk must equal those of the full op list moment for moment, in the order
// first seen, without and with recompute; its peak must equal a count over every op for random bytes.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pd2bw/pipeline/shape.hpp"
#include "pd2bw/pipeline/stash.hpp"
#include "schedule_checks.hpp"

using namespace pd2bw::pipeline;
using pd2bw::testing::Rng;

namespace {

using Moment = std::vector<ChunkHeld>;

bool covers(const Moment& a, const Moment& b) {
  for (size_t j = 0; j < a.size(); ++j)
    if (a[j].activations < b[j].activations || a[j].rebuilt < b[j].rebuilt ||
        a[j].weight_stashes < b[j].weight_stashes)
      return false;
  return true;
}

// The moments no other covers, each at its first sighting, in that order: a full scan per moment.
std::vector<Moment> reduce(const std::vector<Moment>& seen) {
  std::vector<Moment> out;
  for (const Moment& now : seen) {
    bool covered = false;
    for (const Moment& m : out) covered = covered || covers(m, now);
    if (covered) continue;
    std::erase_if(out, [&](const Moment& m) { return covers(now, m); });
    out.push_back(now);
  }
  return out;
}

// Every moment of one step's full op list (the counts after each op), with recompute as the generator
// emits it.
std::vector<Moment> every_moment(const ScheduleSpec& spec, int64_t stage, bool recompute) {
  const std::vector<int64_t> held = chunks_at(spec.kind, spec.depth, spec.chunks, stage);
  Moment now(held.size());
  std::vector<Moment> out;
  for (const Op& op : stage_ops(spec, stage, recompute)) {
    if (op.chunk < 0) continue;
    size_t j = 0;
    while (held[j] != op.chunk) ++j;
    ChunkHeld& h = now[j];
    if (op.kind == OpKind::forward) ++h.activations;
    if (op.kind == OpKind::recompute) h.rebuilt = 1;
    if (op.kind == OpKind::backward || op.kind == OpKind::backward_input) --h.activations, h.rebuilt = 0;
    if (op.kind == OpKind::backward_input) ++h.weight_stashes;
    if (op.kind == OpKind::backward_weight) --h.weight_stashes;
    out.push_back(now);
  }
  return out;
}

int64_t peak_of(const std::vector<Moment>& moments, const std::vector<ChunkStashBytes>& bytes) {
  int64_t most = 0;
  for (const Moment& m : moments) {
    int64_t sum = 0;
    for (size_t j = 0; j < m.size(); ++j)
      sum += m[j].activations * bytes[j].activation + m[j].rebuilt * bytes[j].rebuilt +
             m[j].weight_stashes * bytes[j].weight;
    most = std::max(most, sum);
  }
  return most;
}

struct Case {
  Schedule kind;
  int64_t d, v, m;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t d = 1; d <= 12; ++d) {
    for (int64_t m = 1; m <= 2 * d + 5; ++m) out.push_back({Schedule::zb_v, d, 2, m});
    for (int64_t v : {2, 3, 4, 8})
      for (int64_t m = d; m <= 2 * d + 3 * d; m += d) out.push_back({Schedule::interleaved, d, v, m});
  }
  return out;
}

}  // namespace

TEST_CASE("walk_microbatches: 2d for the chunked schedules past it, m otherwise") {
  CHECK(walk_microbatches(Schedule::zb_v, 4, 9) == 8);
  CHECK(walk_microbatches(Schedule::zb_v, 4, 8) == 8);
  CHECK(walk_microbatches(Schedule::zb_v, 4, 3) == 3);
  CHECK(walk_microbatches(Schedule::interleaved, 3, 12) == 6);
  CHECK(walk_microbatches(Schedule::zb_h2, 4, 100) == 100);
  CHECK(walk_microbatches(Schedule::two_bw, 4, 100) == 100);
  // A capped m the schedule refuses is still refused.
  CHECK_THROWS(stash_walk({Schedule::interleaved, 3, 13, 1, 1, 2}, 0, false));
}

TEST_CASE("stash walk: capped and windowed, equal to the full op list's moments and peaks") {
  Rng rng(20261205);
  int64_t checked = 0, capped = 0;
  for (const Case& c : cases()) {
    const ScheduleSpec spec{c.kind, c.d, c.m, 1, 1, c.v};
    capped += walk_microbatches(c.kind, c.d, c.m) < c.m ? 1 : 0;
    for (int64_t i = 0; i < c.d; ++i) {
      CAPTURE(std::string(pd2bw::schemas::to_string(c.kind)));
      CAPTURE(c.d);
      CAPTURE(c.v);
      CAPTURE(c.m);
      CAPTURE(i);
      const auto [plain, redo] = stash_walks(spec, i);
      for (const auto& [walk, recompute] : {std::pair{&plain, false}, std::pair{&redo, true}}) {
        const std::vector<Moment> all = every_moment(spec, i, recompute);
        CHECK(walk->chunks == chunks_at(c.kind, c.d, c.v, i));
        CHECK(reduce(walk->moments.rows()) == reduce(all));
        CHECK(stash_walk(spec, i, recompute).moments == walk->moments);
        for (int trial = 0; trial < 3; ++trial) {
          std::vector<ChunkStashBytes> bytes;
          for (size_t j = 0; j < walk->chunks.size(); ++j)
            bytes.push_back({rng.range(1, 1000), recompute ? rng.range(1, 1000) : 0,
                             c.kind == Schedule::zb_v ? rng.range(0, 1000) : 0});
          CHECK(stash_peak(*walk, bytes) == peak_of(all, bytes));
        }
      }
      ++checked;
    }
  }
  CHECK(checked > 500);
  CHECK(capped > 50);
}
