// The memory walk's test by counts (StepLowerBound::Relaxed::may_cover): before memory_reaches walks a
// candidate's stages over the layers, the most layers each stage could hold at all, priced with the
// smallest layers of the model, must add up to the model. At 4,096 GPUs most zb-h1 depths fail here:
// their early stages hold a whole pipeline's activations and fit next to nothing.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "pd2bw/checked.hpp"
#include "pd2bw/pipeline/memory.hpp"
#include "step_bound.hpp"

namespace pd2bw::planner {

namespace {

// A split backward's stash term (pipeline::deferred_stash_term, without saturation: the caller's bytes are
// small) without recompute (first) and with it (second), each only when asked, in one pass over the
// shapes of stage st (Relaxed::with_shapes).
template <bool Plain, bool Redo, class Stage>
std::pair<int64_t, int64_t> split_terms(const Stage& st, int64_t input, int64_t stash, int64_t grads) {
  int64_t plain = 0, redo = 0;
  for (size_t i = 0; i < st.shape_count; ++i) {
    const int64_t act = st.shapes[i][0], deferred = st.shapes[i][1];
    const int64_t before = deferred * grads, after = (deferred + 1) * grads;
    if constexpr (Plain) plain = std::max({plain, act * stash + before, (act - 1) * stash + after});
    if constexpr (Redo) redo = std::max({redo, act * input + stash + before, (act - 1) * input + after});
  }
  return {plain, redo};
}

}  // namespace

std::shared_ptr<const StepLowerBound::SmallestSums> StepLowerBound::smallest_sums(const CostModel& model) {
  constexpr size_t kOutliers = 2;  // per kind
  auto out = std::make_shared<SmallestSums>();
  const auto& pp = model.param_prefix();
  const size_t L = pp.size() - 1;
  for (int64_t bi = 0; bi < static_cast<int64_t>(model.profile().microbatch_sizes.size()); ++bi) {
    const std::array<const std::vector<int64_t>*, 3> prefixes{&pp, &model.stash_prefix(bi),
                                                              &model.weight_stash_prefix(bi)};
    std::array<std::vector<int64_t>, 3> each;  // per kind (parameters, stash, W stash), each layer's bytes
    std::vector<char> outlier(L, 0);
    bool ordered = true;
    for (size_t kind = 0; kind < 3; ++kind) {
      const auto& prefix = *prefixes[kind];
      for (size_t j = 0; j < L; ++j) {
        each[kind].push_back(prefix[j + 1] - prefix[j]);
        ordered = ordered && prefix[j + 1] >= prefix[j];
      }
      std::vector<size_t> by_size(L);
      std::iota(by_size.begin(), by_size.end(), size_t{0});
      std::stable_sort(by_size.begin(), by_size.end(),
                       [&](size_t a, size_t b) { return each[kind][a] < each[kind][b]; });
      for (size_t r = 0; r < std::min(kOutliers, L); ++r) outlier[by_size[r]] = 1;
    }
    std::array<SmallestSums::Kinds, 2> sets;
    for (size_t set = 0; set < 2; ++set) {
      const std::array<std::vector<int64_t>*, 3> sums{&sets[set].params, &sets[set].stash, &sets[set].grads};
      for (size_t kind = 0; kind < 3; ++kind) {
        std::vector<int64_t> kept;
        for (size_t j = 0; j < L; ++j)
          if (set == 0 || !outlier[j]) kept.push_back(each[kind][j]);
        std::sort(kept.begin(), kept.end());
        sums[kind]->assign(1, 0);
        for (int64_t x : kept) sums[kind]->push_back(saturating_add(sums[kind]->back(), x));
      }
    }
    out->sets.push_back(std::move(sets));
    out->ordered.push_back(ordered ? 1 : 0);
  }
  return out;
}

int64_t StepLowerBound::Relaxed::bytes(const Stage& st, bool redo, int64_t params, int64_t stash, int64_t grads) const {
  const int64_t term = split_ ? pipeline::deferred_stash_term(st.ahead, st.defer, c_.microbatches, redo, input_, stash, grads)
                              : pipeline::stash_term(st.in_flight, redo, input_, stash);
  return saturating_add(saturating_add(statics_.total(params), st.fixed), term);
}

// Fills st's deferred shapes once (small stages only: their counts are below kCounts, so int32 holds them).
void StepLowerBound::Relaxed::with_shapes(const Stage& st) const {
  if (st.shape_count != kShapesUnknown) return;
  uint8_t n = 0;
  pipeline::for_each_deferred_shape(st.ahead, st.defer, c_.microbatches, [&](int64_t act, int64_t deferred) {
    st.shapes[n++] = {static_cast<int32_t>(act), static_cast<int32_t>(deferred)};
  });
  st.shape_count = n;
}

int64_t StepLowerBound::Relaxed::small_bytes(const Stage& st, bool redo, int64_t params, int64_t stash,
                                             int64_t grads) const {
  int64_t term = 0;
  if (split_) {
    with_shapes(st);
    term = redo ? split_terms<false, true>(st, input_, stash, grads).second
                : split_terms<true, false>(st, input_, stash, grads).first;
  } else {
    term = redo ? st.in_flight * input_ + stash : st.in_flight * stash;
  }
  return plain_statics(params) + st.fixed + term;
}

// A run of n layers of a set has at least the n smallest bytes of each kind of that set, and a stage's
// bytes only grow with each (its stash counts are at least one activation: deferred_stash_term's
// coefficients are non-negative), so a run that fits stage k in some option makes could_hold true.
bool StepLowerBound::Relaxed::could_hold(const Stage& st, int64_t n, const SmallestSums::Kinds& sums) const {
  const auto un = static_cast<size_t>(n);
  const int64_t params = sums.params[un], stash = sums.stash[un], grads = sums.grads[un];
  const bool fast = st.bounded && params < kSmallBytes && stash < kSmallBytes && grads < kSmallBytes;
  if (fast && split_ && policy_ == RecomputePolicy::auto_) {  // both options in one pass over the shapes
    const auto [plain, redo] = small_split_bytes(st, params, stash, grads);
    return plain <= limit_ || redo <= limit_;
  }
  auto in = [&](bool redo) {
    return (fast ? small_bytes(st, redo, params, stash, grads) : bytes(st, redo, params, stash, grads)) <= limit_;
  };
  if (policy_ == RecomputePolicy::always) return in(true);
  return in(false) || (policy_ == RecomputePolicy::auto_ && in(true));
}

// small_bytes of a split backward's stage without and with recompute, one pass over its deferred shapes.
std::pair<int64_t, int64_t> StepLowerBound::Relaxed::small_split_bytes(const Stage& st, int64_t params, int64_t stash,
                                                                     int64_t grads) const {
  with_shapes(st);
  const auto [plain, redo] = split_terms<true, true>(st, input_, stash, grads);
  const int64_t base = plain_statics(params) + st.fixed;
  return {base + plain, base + redo};
}

// A walk that reaches L has split the layers into runs, stage k's fitting its memory; of a set of
// layers, stage k's run holds some n_k, at most the largest n could_hold allows, and the n_k sum to the
// set's size. The largest n is found from the previous stage's (neighbouring stages hold nearly as many),
// so a pass is O(depth + L) tests.
bool StepLowerBound::Relaxed::may_cover(int64_t depth) const {
  if (!smallest_->ordered[bi_]) return true;
  // All but the outliers first: on a deep pipeline that set is the one that fails.
  for (const auto* sums_of : {&smallest_->sets[bi_][1], &smallest_->sets[bi_][0]}) {
    const auto& sums = *sums_of;
    const int64_t size = static_cast<int64_t>(sums.params.size()) - 1;
    int64_t covered = 0, n = 0;
    for (int64_t k = 0; k < depth && covered < size; ++k) {
      Stage st;  // priced here, not in the table: most candidates that get here fail, and their walk is saved
      price_stage(st, k);
      while (n < size && could_hold(st, n + 1, sums)) ++n;
      while (n > 0 && !could_hold(st, n, sums)) --n;
      covered += n;
    }
    if (covered < size) return false;
  }
  return true;
}

}  // namespace pd2bw::planner
