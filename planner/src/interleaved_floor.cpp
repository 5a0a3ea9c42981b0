// interleaved_wait_floor: interleaved 1F1B's cycle with its ranks' waits, bounded below over every split.
//
// Proof. Fix a split; write u_j = f_j + b_j for chunk j's forward plus backward (with its rank's recompute),
// U = sum_j u_j >= total, and x_j for one op's transfers at chunk j (on the replica whose work counts). The
// objective is at least, for every rank k and 0 <= r, r' < v (objective.hpp: the cycle turning at rank 0,
// with add_interleaved_waits' terms):
//   S >= h_0 + work_k + E_F(k, r) + E_B(k, r') + sum_{j < k} u_j,
// with work_k = m sum_s (u_{s d + k} + 2 x_{s d + k}) (its lane without allreduces and updates),
// E_F(k, 0) = E_B(k, 0) = 0 and, for r >= 1,
//   E_F(k, r) >= sum_{k <= j < r d + k} f_j - d sum_{s < r} (f_{s d + k} + x_{s d + k}) - x_{r d + k}
// (E_B likewise with b). The two waits give up at most 2 d <= 2 m of each of the rank's x's, which work_k
// holds, so the transfers can be dropped from both sides:
//   S >= h_0 + m sum_s u_{s d + k} + W_F(k, r) + W_B(k, r') + sum_{j < k} u_j,
// W_F(k, r) = sum_{k <= j < r d + k} f_j - d sum_{s < r} f_{s d + k} (W_B with b). Any weights w >= 0 adding
// up to 1 over these inequalities give S >= h_0 + sum_j (a_j f_j + c_j b_j). The mix here: share x on the
// cycles without waits (r = r' = 0), rank k weighted k / (d (d - 1) / 2), and 1 - x spread evenly over every
// (k, r, r'). The forward and backward waits then carry the same weights, so a_j = c_j, and
// S >= h_0 + sum_j c_j u_j >= h_0 + (min_j c_j) U once min_j c_j >= 0.
// Where the split evens out its chunks the waits vanish and the climb term carries the bound; where it
// shrinks the first chunks to cut the climb, the forwards of the later chunks wait for them (the fill
// that the cycle alone does not see). At d = m the best mix bounds the objective some 20% (v = 2) to 3%
// (v = 16) above the average rank's m U / d.
#include "interleaved_floor.hpp"

#include <algorithm>
#include <limits>
#include <vector>

namespace pd2bw::planner::detail {

double wait_mix_share(int64_t d, int64_t v, double m, double x) {
  if (d < 2 || v < 2) return 0.0;
  const auto D = static_cast<size_t>(d), V = static_cast<size_t>(v), n = D * V;
  std::vector<double> coef(n, 0.0), step(n + 1, 0.0);  // step: differences, summed into coef at the end
  const double ranked = static_cast<double>(d) * static_cast<double>(d - 1) / 2.0;
  const double even = (1.0 - x) / static_cast<double>(d), wait = (1.0 - x) / static_cast<double>(d * v);
  const double dd = static_cast<double>(d);
  for (size_t k = 0; k < D; ++k) {
    const double weight = even + x * static_cast<double>(k) / ranked;  // all of rank k's inequalities
    for (size_t s = 0; s < V; ++s) coef[s * D + k] += m * weight;      // its lane
    step[0] += weight;                                                 // the climb to it
    step[k] -= weight;
    for (size_t r = 1; r < V; ++r) {  // the waits: its chain from chunk k up to r d + k, less its own ops
      step[k] += wait;
      step[r * D + k] -= wait;
    }
    for (size_t s = 0; s + 1 < V; ++s) coef[s * D + k] -= dd * wait * static_cast<double>(V - 1 - s);
  }
  double run = 0.0, least = std::numeric_limits<double>::infinity();  // n >= 4 chunks
  for (size_t j = 0; j < n; ++j) {
    run += step[j];
    least = std::min(least, coef[j] + run);
  }
  return least;
}

double interleaved_wait_floor(int64_t d, int64_t v, double m, double total) {
  if (d < 2 || v < 2 || m < static_cast<double>(d) || !(total > 0.0)) return 0.0;
  auto at = [&](double x) { return std::max(0.0, wait_mix_share(d, v, m, x)) * total; };
  // The share is concave in x (a least of lines): a ternary search finds its top.
  double lo = 0.0, hi = 1.0, best = std::max(at(0.0), at(1.0));
  for (int it = 0; it < 48; ++it) {
    const double a = lo + (hi - lo) / 3.0, b = hi - (hi - lo) / 3.0;
    const double fa = at(a), fb = at(b);
    best = std::max({best, fa, fb});
    (fa < fb ? lo : hi) = fa < fb ? a : b;
  }
  return std::max(0.0, best);
}

}  // namespace pd2bw::planner::detail
