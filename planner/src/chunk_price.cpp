// The chunked schedules' pricing: per chunk the time terms of its layers and of the boundaries that leave
// its rank, per rank the memory of all its chunks together (see chunk_price.hpp).
#include "chunk_price.hpp"

#include <algorithm>

#include "pd2bw/checked.hpp"
#include "objective.hpp"
#include "pd2bw/pipeline/memory.hpp"

namespace pd2bw::planner::detail {

ChunkPricer::ChunkPricer(const CostModel& model, const Candidate& c) : model_(model), c_(c), pc_(prepare(model, c)) {
  const int64_t n = chunks_total(), d = c.depth;
  held_.resize(static_cast<size_t>(d));
  for (int64_t k = 0; k < n; ++k) {
    pos_.push_back(pipeline::chunk_position(c.schedule, d, k));
    held_[static_cast<size_t>(pos_.back())].push_back(k);
  }
  in_level_.assign(static_cast<size_t>(n), std::vector<int64_t>(static_cast<size_t>(c.width), -1));
  out_level_ = in_level_;
  for (int64_t k = 0; k + 1 < n; ++k) {
    const int64_t a = pos_[static_cast<size_t>(k)], b = pos_[static_cast<size_t>(k + 1)];
    if (a == b) continue;  // zb-v's turn: a hand-over on the rank
    for (int64_t r = 0; r < c.width; ++r) {
      const int64_t lv = model.level_between(CostModel::rank_of(c, a, r), CostModel::rank_of(c, b, r));
      out_level_[static_cast<size_t>(k)][static_cast<size_t>(r)] = lv;
      in_level_[static_cast<size_t>(k + 1)][static_cast<size_t>(r)] = lv;
    }
  }
  for (int64_t p = 0; p < d; ++p) ar_level_.push_back(c.width > 1 ? model.allreduce_level(c, p) : -1);
  peaks_.resize(static_cast<size_t>(2 * d));
  held_cache_.resize(static_cast<size_t>(n));
  // Replicas whose chunks' boundaries cross the same levels move as much: one of each kind is priced.
  kinds_.resize(static_cast<size_t>(d));
  for (int64_t p = 0; p < d; ++p) {
    const auto same = [&](int64_t r, int64_t q) {
      for (int64_t k : held_[static_cast<size_t>(p)]) {
        const auto K = static_cast<size_t>(k);
        if (in_level_[K][static_cast<size_t>(r)] != in_level_[K][static_cast<size_t>(q)] ||
            out_level_[K][static_cast<size_t>(r)] != out_level_[K][static_cast<size_t>(q)])
          return false;
      }
      return true;
    };
    auto& kinds = kinds_[static_cast<size_t>(p)];
    for (int64_t r = 0; r < c.width; ++r)
      if (std::none_of(kinds.begin(), kinds.end(), [&](int64_t q) { return same(r, q); })) kinds.push_back(r);
  }
}

std::pair<double, double> ChunkPricer::boundary_ms(int64_t chunk, int64_t replica, int64_t begin, int64_t end) const {
  return {begin > 0 ? transfer_ms(chunk, replica, begin - 1, true) : 0.0,
          end < model_.num_layers() ? transfer_ms(chunk, replica, end - 1, false) : 0.0};
}

bool ChunkPricer::completes(int64_t chunk) const {
  return held_[static_cast<size_t>(position_of(chunk))].back() == chunk;
}

double ChunkPricer::transfer_ms(int64_t chunk, int64_t replica, int64_t layer_out, bool input) const {
  const auto& levels = input ? in_level_ : out_level_;
  const int64_t lv = levels[static_cast<size_t>(chunk)][static_cast<size_t>(replica)];
  return lv < 0 ? 0.0 : model_.output_p2p_ms(c_.microbatch_index, lv)[static_cast<size_t>(layer_out)];
}

double ChunkPricer::compute_lane(int64_t begin, int64_t end) const {
  return static_cast<double>(c_.microbatches) * (pc_.compute[end] - pc_.compute[begin]);
}

double ChunkPricer::least_lane(int64_t chunk, int64_t begin, int64_t end) const {
  double p2p = kInfinity;
  for (int64_t r = 0; r < c_.width; ++r) {
    const auto [in, out] = boundary_ms(chunk, r, begin, end);
    p2p = std::min(p2p, 2.0 * (in + out));
  }
  const int64_t lv = ar_level_[static_cast<size_t>(position_of(chunk))];
  const int64_t grads = pc_.statics.grads(pc_.params[end] - pc_.params[begin]);
  const double ar = lv >= 0 ? model_.allreduce_ms(grads, c_.width, lv) : 0.0;
  return compute_lane(begin, end) + static_cast<double>(c_.microbatches) * p2p + ar + (pc_.update[end] - pc_.update[begin]);
}

namespace {

// A chunk's time terms without the rank's choices (recompute, the replica that sets the lane).
StageCost chunk_times(const PreparedCandidate& pc, int64_t begin, int64_t end) {
  StageCost sc;
  sc.forward_ms = pc.fwd[end] - pc.fwd[begin];
  sc.compute_ms = pc.compute[end] - pc.compute[begin];
  if (pc.split_backward()) sc.weight_ms = pc.weight[end] - pc.weight[begin];
  sc.update_ms = pc.update[end] - pc.update[begin];
  return sc;
}

}  // namespace

ChunkPricer::RankMemory ChunkPricer::rank_memory(int64_t position, const std::vector<int64_t>& bounds) const {
  const auto& held = chunks_of(position);
  const auto P = static_cast<size_t>(position);
  const int64_t L = model_.num_layers();
  int64_t fixed = pc_.reserve_bytes;
  plain_bytes_.clear();
  redo_bytes_.clear();
  for (int64_t k : held) {
    const int64_t b = bounds[static_cast<size_t>(k)], e = bounds[static_cast<size_t>(k + 1)];
    const int64_t params = pc_.params[e] - pc_.params[b], stash = pc_.stash[e] - pc_.stash[b];
    const int64_t in = pc_.in_bytes[b], wst = pc_.split_backward() ? pc_.weight_stash[e] - pc_.weight_stash[b] : 0;
    const bool cross_in = b > 0 && in_level_[static_cast<size_t>(k)][0] >= 0;
    const bool cross_out = e < L && out_level_[static_cast<size_t>(k)][0] >= 0;
    const int64_t comm = saturating_add(cross_in ? saturating_mul(2, in) : 0,
                                        cross_out ? saturating_mul(2, pc_.out_bytes[e - 1]) : 0);
    fixed = saturating_add(fixed, saturating_add(pc_.statics.total(params), comm));
    plain_bytes_.push_back({stash, 0, wst});
    redo_bytes_.push_back({in, stash, wst});
  }
  RankMemory r;
  const auto& walks = position_walks();
  r.plain = saturating_add(fixed, peaks_[2 * P].peak(walks[P][0], plain_bytes_));
  r.redo = saturating_add(fixed, peaks_[2 * P + 1].peak(walks[P][1], redo_bytes_));
  const RecomputeChoice choice = choose_recompute(pc_.policy, r.plain, r.redo, pc_.limit_bytes);
  r.recompute = choice.recompute;
  r.feasible = choice.feasible;
  return r;
}

const CostModel::PositionWalks& ChunkPricer::position_walks() const {
  if (!walks_) walks_ = model_.position_walks(c_);
  return *walks_;
}

double ChunkPricer::position_lane(int64_t position, const std::vector<int64_t>& bounds, bool* recompute) const {
  const RankMemory mem = rank_memory(position, bounds);
  if (recompute) *recompute = mem.recompute;
  if (!mem.feasible) return kInfinity;
  return lane_with(position, bounds, mem.recompute);
}

double ChunkPricer::lane_with(int64_t position, const std::vector<int64_t>& bounds, bool recompute) const {
  const double m = static_cast<double>(c_.microbatches);
  double fixed = 0.0, worst = 0.0;
  const auto& held = chunks_of(position);
  const int64_t lv = ar_level_[static_cast<size_t>(position)];
  for (int64_t k : held) {
    const int64_t b = bounds[static_cast<size_t>(k)], e = bounds[static_cast<size_t>(k + 1)];
    double compute = pc_.compute[e] - pc_.compute[b];
    if (recompute) compute += pc_.redo[e] - pc_.redo[b];
    fixed += m * compute + (pc_.update[e] - pc_.update[b]);
    if (lv >= 0) fixed += model_.allreduce_ms(pc_.statics.grads(pc_.params[e] - pc_.params[b]), c_.width, lv);
  }
  worst = busiest_replica(position, bounds).second;
  return fixed + m * 2.0 * worst;
}

std::pair<int64_t, double> ChunkPricer::busiest_replica(int64_t position, const std::vector<int64_t>& bounds) const {
  double worst = -1.0;
  int64_t worst_r = 0;
  // The first replica of each kind in replica order: the first of the busiest, as over every replica.
  for (int64_t r : kinds_[static_cast<size_t>(position)]) {
    double sum = 0.0;
    for (int64_t k : chunks_of(position)) {
      const int64_t b = bounds[static_cast<size_t>(k)], e = bounds[static_cast<size_t>(k + 1)];
      const auto [in, out] = boundary_ms(k, r, b, e);
      sum += in + out;
    }
    if (sum > worst) worst = sum, worst_r = r;
  }
  return {worst_r, worst};
}

double ChunkPricer::objective(const std::vector<int64_t>& bounds, const std::vector<double>& lanes,
                              const std::vector<char>& recompute, double cutoff,
                              const std::vector<double>* held) const {
  double most = 0.0;
  for (double lane : lanes) most = std::max(most, lane);
  if (!(most < cutoff)) return most;
  const auto d = static_cast<size_t>(c_.depth), n = static_cast<size_t>(chunks_total());
  const double m = static_cast<double>(c_.microbatches);
  const bool apart = pc_.split_backward();
  // Chunk k's forward and backward as its StageCost has them (compute_ms less weight_ms).
  auto chunk_u = [&](size_t k) {
    const int64_t b = bounds[k], e = bounds[k + 1];
    const bool redo = recompute[static_cast<size_t>(pos_[k])] != 0;
    double x = (pc_.compute[e] - pc_.compute[b]) + (redo ? pc_.redo[e] - pc_.redo[b] : 0.0);
    if (apart) x -= pc_.weight[e] - pc_.weight[b];
    return x;
  };
  auto& u = cycle_u_;
  u.resize(n);
  if (c_.schedule == Schedule::interleaved) {  // its cycle first: it mostly binds, and then decides alone
    auto& work = cycle_work_;
    auto& h = cycle_h_;
    work.resize(d);
    h.resize(d);
    for (size_t p = 0; p < d; ++p) {
      h[p] = held ? (*held)[p] : held_time(p, bounds);
      work[p] = lanes[p] - h[p];
      u[p] = chunk_u(p);  // each rank's first chunk (no W apart)
    }
    most = std::max(most, interleaved_cycle(work, h, u));
    if (!(most < cutoff)) return most;
    add_waits(bounds, recompute, work);  // the waits only add: the cycle without them may answer first
    most = std::max(most, interleaved_cycle(work, h, u));
    if (!(most < cutoff)) return most;
  }
  // The climb through the last chunk without recompute, in O(1), a part of the climb that often decides.
  const double h0 = held ? held->front() : held_time(0, bounds);
  if (cutoff < kInfinity) {
    auto upto = [&](int64_t layer) {
      const auto k = static_cast<size_t>(layer);
      return apart ? pc_.compute[k] - pc_.weight[k] : pc_.compute[k];
    };
    const int64_t b = bounds[n - 1], L = bounds[n];
    const double quick = h0 + upto(b) + m * (upto(L) - upto(b));
    if (!(quick < cutoff)) return std::max(most, quick);
  }
  for (size_t k = c_.schedule == Schedule::interleaved ? d : 0; k < n; ++k) u[k] = chunk_u(k);
  return std::max(most, chunked_climb(u, h0, m));
}

void ChunkPricer::add_waits(const std::vector<int64_t>& bounds, const std::vector<char>& recompute,
                            std::vector<double>& work) const {
  const auto n = static_cast<size_t>(chunks_total());
  wait_f_.resize(n);
  wait_b_.resize(n);
  wait_x_.resize(n);
  wait_keys_.resize(static_cast<size_t>(c_.depth));
  for (int64_t p = 0; p < c_.depth; ++p) {
    // As price_position has them: the busiest replica's transfers, the backward with the rank's recompute.
    // A rank whose chunks and choice are those of the last call keeps its terms (a refinement's move
    // changes two ranks).
    WaitKey& key = wait_keys_[static_cast<size_t>(p)];
    const char redo = recompute[static_cast<size_t>(p)];
    bool same = key.valid && key.recompute == redo;
    for (size_t j = 0; same && j < chunks_of(p).size(); ++j) {
      const auto K = static_cast<size_t>(chunks_of(p)[j]);
      same = key.bounds[2 * j] == bounds[K] && key.bounds[2 * j + 1] == bounds[K + 1];
    }
    if (same) continue;
    key.valid = true;
    key.recompute = redo;
    key.bounds.clear();
    const int64_t r = busiest_replica(p, bounds).first;
    for (int64_t k : chunks_of(p)) {
      const auto K = static_cast<size_t>(k);
      const int64_t b = bounds[K], e = bounds[K + 1];
      key.bounds.push_back(b);
      key.bounds.push_back(e);
      StageCost t = chunk_times(pc_, b, e);
      if (redo != 0) t.compute_ms += pc_.redo[e] - pc_.redo[b];
      wait_f_[K] = t.forward_ms;
      wait_b_[K] = t.compute_ms - t.forward_ms;
      const auto [in, out] = boundary_ms(k, r, b, e);
      wait_x_[K] = in + out;
    }
  }
  add_interleaved_waits(c_.depth, c_.chunks, wait_f_, wait_b_, wait_x_, work, wait_scratch_);
}

double ChunkPricer::held_time(size_t p, const std::vector<int64_t>& bounds) const {
  double h = 0.0;
  for (int64_t k : held_[p]) {
    const auto K = static_cast<size_t>(k);
    h += chunk_held(K, bounds[K], bounds[K + 1], ar_level_[p]);
  }
  return h;
}

double ChunkPricer::chunk_held(size_t k, int64_t b, int64_t e, int64_t lv) const {
  HeldCache& cache = held_cache_[k];
  for (uint8_t i = 0; i < 2; ++i)
    if (cache.slots[i].begin == b && cache.slots[i].end == e) {
      cache.older = static_cast<uint8_t>(1 - i);
      return cache.slots[i].ms;
    }
  const double allreduce =
      lv >= 0 ? model_.allreduce_ms(pc_.statics.grads(pc_.params[e] - pc_.params[b]), c_.width, lv) : 0.0;
  HeldCache::Slot& slot = cache.slots[cache.older];
  cache.older = static_cast<uint8_t>(1 - cache.older);
  slot = {b, e, allreduce + (pc_.update[e] - pc_.update[b])};  // as StageCost's allreduce_ms + update_ms
  return slot.ms;
}

PositionPrice ChunkPricer::price_position(int64_t position, const std::vector<int64_t>& bounds) const {
  const auto& held = chunks_of(position);
  const auto P = static_cast<size_t>(position);
  const int64_t L = model_.num_layers(), m = c_.microbatches;
  PositionPrice out;
  for (int64_t k : held) {
    const int64_t b = bounds[static_cast<size_t>(k)], e = bounds[static_cast<size_t>(k + 1)];
    StageCost sc = chunk_times(pc_, b, e);
    const int64_t params = pc_.params[e] - pc_.params[b];
    const bool cross_in = b > 0 && in_level_[static_cast<size_t>(k)][0] >= 0;
    const bool cross_out = e < L && out_level_[static_cast<size_t>(k)][0] >= 0;
    sc.memory.comm_bytes = saturating_add(cross_in ? saturating_mul(2, pc_.in_bytes[b]) : 0,
                                          cross_out ? saturating_mul(2, pc_.out_bytes[e - 1]) : 0);
    sc.memory.weights_bytes = pc_.statics.weights(params);
    sc.memory.master_bytes = pc_.statics.master_copy(params);
    sc.memory.grads_bytes = pc_.statics.grads(params);
    sc.memory.optimizer_bytes = pc_.statics.optimizer(params);
    if (ar_level_[P] >= 0) sc.allreduce_ms = model_.allreduce_ms(pc_.statics.grads(params), c_.width, ar_level_[P]);
    out.chunks.push_back(sc);
  }
  const RankMemory mem = rank_memory(position, bounds);  // fills the scratch bytes the stash peak reads
  const int64_t limit = pc_.limit_bytes;
  out.feasible = mem.feasible;
  const bool recompute = mem.recompute;
  const auto& walk = position_walks()[P][recompute ? 1 : 0];
  // The replica whose transfers make the rank busiest sets every chunk's p2p.
  const int64_t worst_r = busiest_replica(position, bounds).first;
  const int64_t stash_peak = peaks_[2 * P + (recompute ? 1 : 0)].peak(walk, recompute ? redo_bytes_ : plain_bytes_);
  for (size_t j = 0; j < held.size(); ++j) {
    StageCost& sc = out.chunks[j];
    const int64_t k = held[j], b = bounds[static_cast<size_t>(k)], e = bounds[static_cast<size_t>(k + 1)];
    sc.feasible = out.feasible;
    sc.recompute = recompute;
    if (recompute) sc.compute_ms += pc_.redo[e] - pc_.redo[b];
    sc.backward_ms = sc.compute_ms - sc.forward_ms;
    const auto [in, outward] = boundary_ms(k, worst_r, b, e);
    sc.p2p_ms = 2.0 * (in + outward);
    sc.in_ms = in;
    sc.out_ms = outward;
    sc.step_ms = static_cast<double>(m) * (sc.compute_ms + sc.p2p_ms) + sc.allreduce_ms + sc.update_ms;
    for (const auto& moment : walk.moments) sc.in_flight = std::max(sc.in_flight, moment[j].activations);
    if (j == 0) {  // the rank's stash and reserve are written on its first chunk
      sc.memory.stash_bytes = stash_peak;
      sc.memory.reserve_bytes = pc_.reserve_bytes;
    }
    sc.memory.total_bytes = pipeline::memory_total(sc.memory);
    sc.memory.limit_bytes = limit;
    sc.memory.dominant = pipeline::dominant_term(sc.memory);
  }
  // The rank's time as the split walk adds it up, so that a split's objective is the same both ways.
  out.lane_ms = out.feasible ? position_lane(position, bounds) : kInfinity;
  if (!out.feasible) {
    const int64_t over = std::min(mem.plain, mem.redo) - limit;
    for (auto& sc : out.chunks) sc.over_bytes = over;
  }
  return out;
}

std::vector<StageCost> ChunkPricer::price(const std::vector<int64_t>& bounds, double* objective) const {
  std::vector<StageCost> out(static_cast<size_t>(chunks_total()));
  std::vector<double> lanes;
  std::vector<char> recompute;
  bool feasible = true;
  for (int64_t p = 0; p < c_.depth; ++p) {
    PositionPrice pp = price_position(p, bounds);
    feasible = feasible && pp.feasible;
    lanes.push_back(pp.lane_ms);
    recompute.push_back(pp.chunks.front().recompute ? 1 : 0);
    const auto& held = chunks_of(p);
    for (size_t j = 0; j < held.size(); ++j) out[static_cast<size_t>(held[j])] = std::move(pp.chunks[j]);
  }
  if (objective) *objective = feasible ? this->objective(bounds, lanes, recompute) : kInfinity;
  return out;
}

}  // namespace pd2bw::planner::detail
