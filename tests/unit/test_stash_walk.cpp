// The stash walk (pipeline/stash.hpp), what a rank holds per chunk over a step read off the generator's
// op list, against the closed forms of the schedules that have one, for random byte sizes, recompute on
// and off: stash_term over in_flight for 2bw, flush and gpipe, split_stash_term for zb-h1 and
// deferred_stash_term over split_shape for zb-h2; deferred_weight_grads of zb-h1 and zb-h2 against the
// W's it holds waiting; in_flight of every schedule (interleaved and zb-v included) against its most
// activations; stash_peak against a brute-force count over every op of every schedule; and the one-pass
// pair of walks (stash_walks) against the two walks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/pipeline/memory.hpp"
#include "pd2bw/pipeline/shape.hpp"
#include "pd2bw/pipeline/stash.hpp"
#include "schedule_checks.hpp"

using namespace pd2bw::pipeline;
using pd2bw::testing::chunked_cases;
using pd2bw::testing::Rng;
using pd2bw::testing::ScheduleCase;

namespace {

std::string name(Schedule s) {
  return std::string(pd2bw::schemas::to_string(s));
}

ScheduleSpec spec_of(const ScheduleCase& c) {
  return {c.kind, c.d, c.m, 1, 1, c.v};
}

// The most bytes position `pos` holds, counted after every op of one step's list: per chunk, its
// activations (forward to backward or B) x activation bytes, the rebuilt stash (Recompute to backward or
// B) x rebuilt bytes, and the B's waiting for their W x weight bytes; `bytes` by chunk number.
int64_t brute_peak(const ScheduleCase& c, int64_t pos, bool recompute, const std::vector<ChunkStashBytes>& bytes) {
  std::vector<int64_t> acts(bytes.size()), rebuilt(bytes.size()), waiting(bytes.size());
  int64_t most = 0;
  for (const Op& op : stage_ops(spec_of(c), pos, recompute)) {
    if (op.chunk < 0) continue;
    const auto ch = static_cast<size_t>(op.chunk);
    if (op.kind == OpKind::forward) ++acts[ch];
    if (op.kind == OpKind::recompute) rebuilt[ch] = 1;
    if (op.kind == OpKind::backward || op.kind == OpKind::backward_input) --acts[ch], rebuilt[ch] = 0;
    if (op.kind == OpKind::backward_input) ++waiting[ch];
    if (op.kind == OpKind::backward_weight) --waiting[ch];
    int64_t now = 0;
    for (size_t j = 0; j < bytes.size(); ++j)
      now += acts[j] * bytes[j].activation + rebuilt[j] * bytes[j].rebuilt + waiting[j] * bytes[j].weight;
    most = std::max(most, now);
  }
  return most;
}

// Random bytes per chunk of the model (d v of them): the stash, the input (smaller) and the W stash.
struct ChunkSizes {
  int64_t stash, input, weight;
};
std::vector<ChunkSizes> draw_sizes(int64_t chunks, Rng& rng) {
  std::vector<ChunkSizes> out;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t stash = rng.range(1000, 1000000);
    out.push_back({stash, rng.range(1, stash), rng.range(0, stash)});
  }
  return out;
}

// The walk's bytes of one chunk, as the memory model weighs it.
ChunkStashBytes bytes_of(const ChunkSizes& s, bool recompute, bool split) {
  return {recompute ? s.input : s.stash, recompute ? s.stash : 0, split ? s.weight : 0};
}

int64_t most_activations(const StashWalk& walk) {
  int64_t most = 0;
  for (const auto& moment : walk.moments) {
    int64_t held = 0;
    for (const auto& h : moment) held += h.activations;
    most = std::max(most, held);
  }
  return most;
}

}  // namespace

TEST_CASE("stash walk: equals the closed forms of 2bw, flush, gpipe, zb-h1 and zb-h2") {
  Rng rng(7);
  int64_t checked = 0;
  for (int64_t d = 1; d <= 6; ++d)
    for (int64_t m = 1; m <= 3 * d + 1; ++m)
      for (Schedule k : {Schedule::two_bw, Schedule::flush, Schedule::gpipe, Schedule::zb_h1, Schedule::zb_h2}) {
        if (m < min_microbatches(k, d)) continue;
        for (int64_t i = 0; i < d; ++i)
          for (bool recompute : {false, true}) {
            CAPTURE(name(k));
            CAPTURE(d);
            CAPTURE(m);
            CAPTURE(i);
            CAPTURE(recompute);
            const ChunkSizes s = draw_sizes(1, rng)[0];
            const bool split = splits_backward(k);
            const StashWalk walk = stash_walk({k, d, m, 1, 1, 1}, i, recompute);
            REQUIRE(walk.chunks == std::vector<int64_t>{i});
            const int64_t peak = stash_peak(walk, {bytes_of(s, recompute, split)});
            if (k == Schedule::zb_h1) {
              CHECK(peak == split_stash_term(d, m, i, recompute, s.input, s.stash, s.weight));
            } else if (k == Schedule::zb_h2) {
              const auto [ahead, defer] = split_shape(k, d, i);
              CHECK(peak == deferred_stash_term(ahead, defer, m, recompute, s.input, s.stash, s.weight));
            } else {
              CHECK(peak == stash_term(in_flight(k, d, m, i), recompute, s.input, s.stash));
            }
            CHECK(most_activations(walk) == in_flight(k, d, m, i));
            // The W's waiting: deferred_weight_grads while in_flight activations are held, and for a
            // moment after a B one more (none when the backward is one op).
            int64_t waiting = 0;
            for (const auto& moment : walk.moments) waiting = std::max(waiting, moment[0].weight_stashes);
            CHECK(waiting == (split ? deferred_weight_grads(k, m, i) + 1 : 0));
            ++checked;
          }
      }
  CHECK(checked > 1500);
}

TEST_CASE("stash walk: stash_peak equals a count over every op, for every schedule and random chunk sizes") {
  // This also checks in_flight of the chunked schedules (the most activations at one moment).
  Rng rng(11);
  for (const ScheduleCase& c : chunked_cases()) {
    CAPTURE(name(c.kind));
    CAPTURE(c.d);
    CAPTURE(c.v);
    CAPTURE(c.m);
    const bool split = splits_backward(c.kind);
    for (int64_t i = 0; i < c.d; ++i)
      for (bool recompute : {false, true}) {
        CAPTURE(i);
        CAPTURE(recompute);
        const StashWalk walk = stash_walk({c.kind, c.d, c.m, 3, 2, c.v}, i, recompute);  // steps, width ignored
        CHECK(walk.chunks == chunks_at(c.kind, c.d, c.v, i));
        // That the kept moments hold every moment no other covers is test_stash_walk_cap.cpp's check.
        for (int draw = 0; draw < 3; ++draw) {
          const auto sizes = draw_sizes(c.d * c.v, rng);
          std::vector<ChunkStashBytes> by_chunk, by_walk;  // every chunk of the model; the walk's chunks
          for (const auto& s : sizes) by_chunk.push_back(bytes_of(s, recompute, split));
          for (int64_t ch : walk.chunks) by_walk.push_back(by_chunk[static_cast<size_t>(ch)]);
          CHECK(stash_peak(walk, by_walk) == brute_peak(c, i, recompute, by_chunk));
        }
        // Counting activations alone: the most held at once, which is what in_flight says.
        const std::vector<ChunkStashBytes> ones(walk.chunks.size(), ChunkStashBytes{1, 0, 0});
        CHECK(stash_peak(walk, ones) == in_flight(c.kind, c.d, c.m, i, c.v));
        CHECK(most_activations(walk) == in_flight(c.kind, c.d, c.m, i, c.v));
      }
  }
}

TEST_CASE("stash walks: one pass gives the walks without and with recompute, moment for moment") {
  int64_t checked = 0;
  for (const ScheduleCase& c : chunked_cases())
    for (int64_t i = 0; i < c.d; ++i) {
      CAPTURE(name(c.kind));
      CAPTURE(c.d);
      CAPTURE(c.v);
      CAPTURE(c.m);
      CAPTURE(i);
      const auto [plain, redo] = stash_walks(spec_of(c), i);
      for (const auto& [walk, recompute] : {std::pair{&plain, false}, std::pair{&redo, true}}) {
        const StashWalk want = stash_walk(spec_of(c), i, recompute);
        CHECK(walk->chunks == want.chunks);
        CHECK(walk->moments == want.moments);
      }
      ++checked;
    }
  CHECK(checked > 1000);
}

TEST_CASE("stash walk: errors and saturation") {
  const StashWalk walk = stash_walk({Schedule::zb_v, 3, 6, 1, 1, 2}, 1, false);
  CHECK(walk.chunks == std::vector<int64_t>{1, 4});
  CHECK_THROWS_AS(stash_peak(walk, {ChunkStashBytes{1, 0, 0}}), pd2bw::UsageError);
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  CHECK(stash_peak(walk, {{huge, 0, huge}, {huge, 0, huge}}) == std::numeric_limits<int64_t>::max());
  CHECK_THROWS_AS(stash_walk({Schedule::zb_v, 3, 6, 1, 1, 3}, 0, false), pd2bw::UsageError);
  CHECK_THROWS_AS(stash_walk({Schedule::interleaved, 3, 4, 1, 1, 2}, 0, false), pd2bw::UsageError);
}

// The moments' one array: rows as pushed, erasing one closes the gap, and the summaries the exact peak
// reads (the largest row sum, whether any row rebuilt a stash or holds a W) cover every row pushed.
TEST_CASE("StashMoments holds its rows in one array, with the largest row sum and the terms that occur") {
  StashMoments m(2);
  CHECK(m.empty());
  const std::vector<ChunkHeld> a{{1, 0, 0}, {2, 0, 0}}, b{{3, 1, 0}, {0, 0, 0}}, c{{0, 0, 2}, {4, 0, 1}};
  m.push_back(a);
  CHECK_FALSE(m.any_rebuilt());
  CHECK_FALSE(m.any_weight());
  m.push_back(b);
  m.push_back(c);
  CHECK(m.size() == 3);
  CHECK(m.rows() == std::vector<std::vector<ChunkHeld>>{a, b, c});
  CHECK(m[1][0] == b[0]);
  CHECK(m.most_held() == 7);  // c: 2 + 4 + 1
  CHECK(m.any_rebuilt());
  CHECK(m.any_weight());
  m.erase(1);
  CHECK(m.rows() == std::vector<std::vector<ChunkHeld>>{a, c});
  std::vector<std::vector<ChunkHeld>> seen;
  for (const auto& row : m) seen.emplace_back(row.begin(), row.end());
  CHECK(seen == m.rows());
  StashMoments same(2);
  same.push_back(a);
  same.push_back(c);
  CHECK(same.rows() == m.rows());
  CHECK_THROWS_AS(m.push_back(std::vector<ChunkHeld>{{1, 0, 0}}), pd2bw::UsageError);
  CHECK(m.size() == 2);
  // A walk whose moments are not as wide as its chunks is refused, by stash_peak and StashPeaks alike.
  StashWalk walk;
  walk.chunks = {0, 1, 2};
  walk.moments = m;
  const std::vector<ChunkStashBytes> three(3, ChunkStashBytes{1, 0, 0});
  CHECK_THROWS_AS(stash_peak(walk, three), pd2bw::UsageError);
  StashPeaks peaks;
  CHECK_THROWS_AS(peaks.peak(walk, three), pd2bw::UsageError);
  walk.chunks = {0, 1};
  CHECK(stash_peak(walk, {ChunkStashBytes{1, 0, 0}, ChunkStashBytes{1, 0, 0}}) == 4);  // c: 0 + 4
}
