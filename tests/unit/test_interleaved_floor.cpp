// interleaved_wait_floor (planner/src/interleaved_floor.cpp) against the cycle it bounds, computed by the
// objective's own functions (objective.hpp: add_interleaved_waits, interleaved_cycle) on random chunk
// times, and what it adds over the average rank where the first chunks are cut short.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "interleaved_floor.hpp"
#include "objective.hpp"

namespace {

using pd2bw::planner::detail::add_interleaved_waits;
using pd2bw::planner::detail::interleaved_cycle;
using pd2bw::planner::detail::interleaved_wait_floor;
using pd2bw::planner::detail::wait_mix_share;

// One split's chunk times: forward f, backward b (with recompute), transfers x per op; per rank its
// allreduces and updates h.
struct Chunks {
  int64_t d = 0, v = 0;
  double m = 0;
  std::vector<double> f, b, x, h;
  double total() const {
    double s = 0;
    for (size_t j = 0; j < f.size(); ++j) s += f[j] + b[j];
    return s;
  }
  // interleaved's cycle as ChunkPricer::objective prices it: work = m (f + b + 2 x) per chunk of the rank,
  // plus the waits; the climb's u of each rank's first chunk.
  double cycle() const {
    const auto D = static_cast<size_t>(d);
    std::vector<double> work(D, 0.0), u(D), scratch;
    for (size_t j = 0; j < f.size(); ++j) work[j % D] += m * (f[j] + b[j] + 2.0 * x[j]);
    for (size_t p = 0; p < D; ++p) u[p] = f[p] + b[p];
    add_interleaved_waits(d, v, f, b, x, work, scratch);
    return interleaved_cycle(work, h, u);
  }
};

// Random chunks: sizes from tiny to large (so that some splits starve their first chunks), the forward a
// random share of each chunk, transfers and allreduces small.
Chunks random_chunks(std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> depth(2, 9), chunks(2, 5), rounds(1, 3);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Chunks c;
  c.d = depth(rng);
  c.v = chunks(rng);
  c.m = static_cast<double>(c.d * rounds(rng));
  const auto n = static_cast<size_t>(c.d * c.v);
  const int shape = static_cast<int>(rng() % 3);  // even, random, or the first round cut short
  for (size_t j = 0; j < n; ++j) {
    double size = shape == 0 ? 1.0 : 0.05 + 2.0 * unit(rng);
    if (shape == 2 && j < static_cast<size_t>(c.d)) size *= 0.05;
    const double fwd = 0.15 + 0.4 * unit(rng);
    c.f.push_back(size * fwd);
    c.b.push_back(size * (1.0 - fwd));
    c.x.push_back(0.02 * unit(rng));
  }
  for (int64_t p = 0; p < c.d; ++p) c.h.push_back(0.1 * unit(rng));
  return c;
}

}  // namespace

TEST_CASE("the waits' floor never passes the cycle of any split, and lifts it where the first chunks are short") {
  std::mt19937_64 rng(20261206);
  int64_t checked = 0, lifted = 0, close = 0;
  for (int it = 0; it < 20000; ++it) {
    const Chunks c = random_chunks(rng);
    const double floor = interleaved_wait_floor(c.d, c.v, c.m, c.total());
    const double cycle = c.cycle();
    CAPTURE(c.d);
    CAPTURE(c.v);
    CAPTURE(c.m);
    // Rank 0's allreduces and updates come on top of the floor.
    CHECK(floor + c.h[0] <= cycle * (1.0 + 1e-12));
    ++checked;
    const double average = c.m * c.total() / static_cast<double>(c.d);
    if (floor > 1.05 * average) ++lifted;
    if (floor + c.h[0] >= 0.9 * cycle) ++close;
  }
  MESSAGE(checked << " random splits: the floor above 1.05 x the average rank in " << lifted
                  << ", within 10% of the cycle in " << close);
  CHECK(lifted >= checked / 2);
  CHECK(close >= checked / 20);
}

namespace {

// The least cycle over every split of `units` equal pieces of compute into d v chunks, each chunk's forward
// a share `lo` or `hi` of it (the extremes a mix of layers allows), every op moving `transfer`: the
// floor's exact target, on a grid.
double least_cycle(int64_t d, int64_t v, double m, int units, double lo, double hi, double transfer) {
  const auto n = static_cast<size_t>(d * v);
  std::vector<int> parts(n, 0);
  double least = 1e300;
  Chunks c;
  c.d = d;
  c.v = v;
  c.m = m;
  c.x.assign(n, transfer);
  c.h.assign(static_cast<size_t>(d), 0.0);
  auto visit = [&] {
    for (uint64_t mask = 0; mask < (uint64_t{1} << n); ++mask) {
      c.f.clear();
      c.b.clear();
      for (size_t j = 0; j < n; ++j) {
        const double u = static_cast<double>(parts[j]) / units, share = (mask >> j) & 1 ? hi : lo;
        c.f.push_back(u * share);
        c.b.push_back(u * (1.0 - share));
      }
      least = std::min(least, c.cycle());
    }
  };
  // Every composition of `units` into n parts (empty chunks allowed: the floor holds in the limit).
  auto rec = [&](auto&& self, size_t j, int left) -> void {
    if (j + 1 == n) {
      parts[j] = left;
      visit();
      return;
    }
    for (int k = 0; k <= left; ++k) {
      parts[j] = k;
      self(self, j + 1, left - k);
    }
  };
  rec(rec, 0, units);
  return least;
}

}  // namespace

TEST_CASE("the waits' floor against the least cycle of every split on a grid") {
  struct Shape {
    int64_t d, v;
    double m;
    int units;
  };
  for (const Shape& s : {Shape{2, 2, 2.0, 24}, Shape{2, 2, 4.0, 24}, Shape{3, 2, 3.0, 10}, Shape{2, 3, 2.0, 10}}) {
    const double least = least_cycle(s.d, s.v, s.m, s.units, 0.25, 0.4, 0.0);
    const double floor = interleaved_wait_floor(s.d, s.v, s.m, 1.0);
    const double average = s.m / static_cast<double>(s.d);
    CAPTURE(s.d);
    CAPTURE(s.v);
    CAPTURE(s.m);
    MESSAGE("d=" << s.d << " v=" << s.v << " m=" << s.m << ": average rank " << average << ", floor " << floor
                 << ", least cycle on the grid " << least);
    CHECK(floor <= least * (1.0 + 1e-12));
    CHECK(floor > average);
    // Transfers shorten the waits, but the lanes hold more of them than the waits give up.
    CHECK(floor <= least_cycle(s.d, s.v, s.m, s.units, 0.25, 0.4, 0.05) * (1.0 + 1e-12));
  }
}

TEST_CASE("the waits' floor at d = m: at least 15% over the average rank at v = 2, less as v grows") {
  // The average rank's m U / d is all a split could be held to without the waits (a split that cuts its
  // first chunks short has almost no climb); with them every split pays at least this much more.
  double previous = 10.0;
  for (int64_t v : {2, 4, 8, 16}) {
    const double share = interleaved_wait_floor(32, v, 32.0, 1.0);  // U = 1, m / d = 1
    CAPTURE(v);
    CHECK(share > 1.0);
    CHECK(share < previous);
    previous = share;
    if (v == 2) CHECK(share >= 1.15);
    // The mix's best is no worse than either end of it.
    CHECK(share >= wait_mix_share(32, v, 32.0, 0.0) * (1.0 - 1e-12));
    CHECK(share >= wait_mix_share(32, v, 32.0, 1.0) * (1.0 - 1e-12));
  }
  // The argument needs m >= d (the first d forwards of a rank are its first chunk's) and two chunks a rank.
  CHECK(interleaved_wait_floor(8, 2, 4.0, 1.0) == 0.0);
  CHECK(interleaved_wait_floor(8, 1, 8.0, 1.0) == 0.0);
  CHECK(interleaved_wait_floor(1, 4, 8.0, 1.0) == 0.0);
}

TEST_CASE("add_interleaved_waits: equal chunks wait for nothing, a short first round waits for the fill") {
  Chunks c;
  c.d = 4;
  c.v = 2;
  c.m = 8;
  c.f.assign(8, 1.0);
  c.b.assign(8, 2.0);
  c.x.assign(8, 0.0);
  std::vector<double> work(4, 0.0), scratch;
  add_interleaved_waits(c.d, c.v, c.f, c.b, c.x, work, scratch);
  for (double w : work) CHECK(w == 0.0);
  // First round 0.1 each: rank 3's forward of chunk 7 waits for chunks 3..6 (0.1 + 3 x 1) while it runs 4 x
  // 0.1 of its own; its last backward likewise (0.2 + 3 x 2 against 4 x 0.2).
  for (size_t j = 0; j < 4; ++j) c.f[j] = 0.1, c.b[j] = 0.2;
  add_interleaved_waits(c.d, c.v, c.f, c.b, c.x, work, scratch);
  CHECK(work[3] == doctest::Approx((0.1 + 3.0 - 0.4) + (0.2 + 6.0 - 0.8)));
  CHECK(work[0] == doctest::Approx(0.0));  // rank 0's chain is its own first chunk alone: 0.1 - 4 x 0.1 < 0
}
