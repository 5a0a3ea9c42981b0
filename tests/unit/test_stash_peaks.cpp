// pipeline::StashPeaks, the stash peak priced from the last bytes priced, against pipeline::stash_peak
// call for call: random sequences of byte vectors that change one chunk, a few or all at a time, move
// between walks, and reach sizes where the sums saturate.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/pipeline/stash.hpp"
#include "random_instances.hpp"

using namespace pd2bw::pipeline;
using pd2bw::testing::Rng;

namespace {

std::vector<std::pair<StashWalk, StashWalk>> some_walks() {
  std::vector<std::pair<StashWalk, StashWalk>> out;
  for (Schedule kind : {Schedule::interleaved, Schedule::zb_v})
    for (int64_t d : {1, 3, 5})
      for (int64_t m : {d, 2 * d, 5 * d})
        for (int64_t i = 0; i < d; ++i)
          out.push_back(stash_walks({kind, d, m, 1, 1, kind == Schedule::zb_v ? 2 : 3}, i));
  return out;
}

}  // namespace

TEST_CASE("StashPeaks returns stash_peak for every call of a sequence") {
  const auto walks = some_walks();
  Rng rng(7);
  int64_t calls = 0, saturated = 0, changed_one = 0;
  for (int round = 0; round < 200; ++round) {
    StashPeaks peaks;
    size_t at = static_cast<size_t>(rng.range(0, static_cast<int64_t>(walks.size()) - 1));
    const StashWalk* walk = rng.chance(0.5) ? &walks[at].first : &walks[at].second;
    std::vector<ChunkStashBytes> bytes(walk->chunks.size());
    const int64_t top = rng.chance(0.1) ? std::numeric_limits<int64_t>::max() / 4 : int64_t{1} << 30;
    for (auto& b : bytes) b = {rng.range(0, top), rng.range(0, top), rng.range(0, top)};
    for (int step = 0; step < 60; ++step) {
      const int64_t kind = rng.range(0, 9);
      if (kind == 0) {  // another walk (possibly with as many chunks)
        at = static_cast<size_t>(rng.range(0, static_cast<int64_t>(walks.size()) - 1));
        walk = rng.chance(0.5) ? &walks[at].first : &walks[at].second;
        bytes.resize(walk->chunks.size());
      }
      const int64_t changes = kind <= 6 ? 1 : rng.range(0, static_cast<int64_t>(bytes.size()));
      changed_one += changes == 1 ? 1 : 0;
      for (int64_t n = 0; n < changes; ++n) {
        auto& b = bytes[static_cast<size_t>(rng.range(0, static_cast<int64_t>(bytes.size()) - 1))];
        b = {rng.range(0, top), rng.chance(0.3) ? 0 : rng.range(0, top), rng.chance(0.3) ? 0 : rng.range(0, top)};
      }
      const int64_t want = stash_peak(*walk, bytes);
      CHECK(peaks.peak(*walk, bytes) == want);
      ++calls;
      saturated += want == std::numeric_limits<int64_t>::max() ? 1 : 0;
    }
  }
  CHECK(calls == 12000);
  CHECK(saturated > 50);
  CHECK(changed_one > 5000);
}

TEST_CASE("StashPeaks refuses bytes that do not match the walk, as stash_peak does") {
  const auto [plain, redo] = stash_walks({Schedule::zb_v, 3, 6, 1, 1, 2}, 1);
  StashPeaks peaks;
  CHECK(peaks.peak(plain, {{5, 0, 1}, {7, 0, 2}}) == stash_peak(plain, {{5, 0, 1}, {7, 0, 2}}));
  CHECK_THROWS_AS(peaks.peak(plain, {ChunkStashBytes{1, 0, 0}}), pd2bw::UsageError);
  CHECK(peaks.peak(redo, {{5, 9, 1}, {7, 3, 2}}) == stash_peak(redo, {{5, 9, 1}, {7, 3, 2}}));
}
