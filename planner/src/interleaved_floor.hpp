// A lower bound on interleaved 1F1B's objective over every split, from its cycle with the ranks' waits
// (objective.hpp: interleaved_cycle, add_interleaved_waits). Private to the planner.
#pragma once

#include <cstdint>

namespace pd2bw::planner::detail {

// Every split of an interleaved candidate with d ranks, v chunks each and m >= d microbatches, whose chunks'
// forward, backward and recompute add up to at least `total` ms per microbatch, has an objective of at
// least interleaved_wait_floor(d, v, m, total) + rank 0's allreduces and updates (whatever its transfers).
// 0 where the argument does not apply (d < 2, v < 2, m < d) or gives nothing. Deterministic; O(d v) per
// trial of the mix, about 100 trials.
double interleaved_wait_floor(int64_t d, int64_t v, double m, double total);

// The least per-chunk coefficient of that bound's mix with share `x` of the weight on the plain cycles
// (weighted by their rank) and the rest spread over the cycles with waits: every split's objective is at
// least wait_mix_share(d, v, m, x) total + rank 0's allreduces and updates. Exposed for the tests.
double wait_mix_share(int64_t d, int64_t v, double m, double x);

}  // namespace pd2bw::planner::detail
