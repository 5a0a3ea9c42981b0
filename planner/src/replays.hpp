// The replay search's store of replays (replay.cpp). Private to the planner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "pd2bw/planner/search.hpp"

namespace pd2bw::planner::detail {

// The replays so far, by candidate index. A few hundred of up to a few hundred thousand candidates are
// replayed, so the entries live apart from a dense index of 4 bytes per candidate (a dense vector of
// optional Evaluated took 45 MB at 4,096 GPUs, all of it touched). Distinct candidates' entries may be
// reset concurrently; set() is not concurrent with anything.
class Replays {
 public:
  // A store for candidate indices 0..candidates-1, none replayed.
  explicit Replays(size_t candidates) : slot_(candidates, -1) {}
  // Candidate idx's replay, or null when it has none (never set, or reset since).
  const Evaluated* operator[](size_t idx) const {
    const int32_t s = slot_[idx];
    return s >= 0 && entries_[static_cast<size_t>(s)].replay ? &*entries_[static_cast<size_t>(s)].replay : nullptr;
  }
  // Records (or replaces) candidate idx's replay, started from the split with bounds `from` (the search's
  // split of it, which the replay may have bettered with another); a candidate set again is still listed
  // once.
  void set(size_t idx, Evaluated e, std::vector<int64_t> from) {
    if (slot_[idx] < 0) {
      slot_[idx] = static_cast<int32_t>(entries_.size());
      entries_.push_back({idx, std::nullopt, {}});
    }
    Entry& entry = entries_[static_cast<size_t>(slot_[idx])];
    entry.replay = std::move(e);
    entry.from = std::move(from);
  }
  // The bounds the replay of candidate idx started from (it must have one).
  const std::vector<int64_t>& from(size_t idx) const { return entries_[static_cast<size_t>(slot_[idx])].from; }
  // Drops candidate idx's replay (its split changed): a no-op where it has none.
  void reset(size_t idx) {
    if (slot_[idx] >= 0) entries_[static_cast<size_t>(slot_[idx])].replay.reset();
  }
  // The candidates replayed (and not reset), in no particular order.
  std::vector<size_t> indices() const {
    std::vector<size_t> out;
    for (const Entry& e : entries_)
      if (e.replay) out.push_back(e.idx);
    return out;
  }

 private:
  struct Entry {
    size_t idx;
    std::optional<Evaluated> replay;
    std::vector<int64_t> from;
  };
  std::vector<int32_t> slot_;
  std::vector<Entry> entries_;
};

}  // namespace pd2bw::planner::detail
