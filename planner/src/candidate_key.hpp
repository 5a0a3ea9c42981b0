// A candidate as the key of a map that remembers something of it (the greedy memo, a search share).
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>

#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner::detail {

// Every field that tells two candidates apart (b follows from its index).
using CandidateKey = std::tuple<Schedule, int64_t, int64_t, int64_t, Placement, int64_t, int64_t>;
inline CandidateKey candidate_key(const Candidate& c) {
  return {c.schedule, c.microbatch_index, c.depth, c.width, c.placement, c.microbatches, c.chunks};
}

// A hash of CandidateKey for unordered maps (the fields folded in turn, each step mixed).
struct CandidateKeyHash {
  size_t operator()(const CandidateKey& k) const {
    uint64_t h = 0;
    auto fold = [&h](uint64_t v) {
      h = (h ^ v) * 0x9E3779B97F4A7C15ull;
      h ^= h >> 29;
    };
    fold(static_cast<uint64_t>(std::get<0>(k)));
    fold(static_cast<uint64_t>(std::get<1>(k)));
    fold(static_cast<uint64_t>(std::get<2>(k)));
    fold(static_cast<uint64_t>(std::get<3>(k)));
    fold(static_cast<uint64_t>(std::get<4>(k)));
    fold(static_cast<uint64_t>(std::get<5>(k)));
    fold(static_cast<uint64_t>(std::get<6>(k)));
    return static_cast<size_t>(h);
  }
};

}  // namespace pd2bw::planner::detail
