// The stash walk: counts per chunk after each op of one step, reduced to the moments that can peak.
#include "pd2bw/pipeline/stash.hpp"

#include <algorithm>
#include <utility>

#include "pd2bw/checked.hpp"
#include "pd2bw/error.hpp"

namespace pd2bw::pipeline {

namespace {

bool covers(StashMoments::Row a, StashMoments::Row b) {  // a >= b everywhere
  for (size_t j = 0; j < a.size(); ++j)
    if (a[j].activations < b[j].activations || a[j].rebuilt < b[j].rebuilt ||
        a[j].weight_stashes < b[j].weight_stashes)
      return false;
  return true;
}

// Compares `now` with the last kKeepWindow moments kept only: the walk's counts move by one op at a time,
// so a moment is covered by, or covers, one kept shortly before (a full scan made a walk quadratic in its
// moments). What it keeps is a superset of the moments no other covers; that is all stash_peak needs.
constexpr size_t kKeepWindow = 8;

void keep(StashMoments& moments, const std::vector<ChunkHeld>& now) {
  const size_t from = moments.size() > kKeepWindow ? moments.size() - kKeepWindow : 0;
  for (size_t k = from; k < moments.size(); ++k)
    if (covers(moments[k], now)) return;
  for (size_t k = moments.size(); k-- > from;)
    if (covers(now, moments[k])) moments.erase(k);
  moments.push_back(now);
}

// Applies one op to the counts (recompute: the chunk's stash rebuilt until its backward or B).
void apply(std::vector<ChunkHeld>& now, size_t j, OpKind kind) {
  ChunkHeld& h = now[j];
  switch (kind) {
    case OpKind::forward: ++h.activations; break;
    case OpKind::recompute: h.rebuilt = 1; break;
    case OpKind::backward:
    case OpKind::backward_input:
      --h.activations;
      h.rebuilt = 0;
      if (kind == OpKind::backward_input) ++h.weight_stashes;
      break;
    case OpKind::backward_weight: --h.weight_stashes; break;
    default: break;
  }
}

bool lowers(OpKind k) {
  return k == OpKind::backward || k == OpKind::backward_input || k == OpKind::backward_weight;
}

size_t local_index(const std::vector<int64_t>& chunks, int64_t chunk) {
  return static_cast<size_t>(std::find(chunks.begin(), chunks.end(), chunk) - chunks.begin());
}

// One step of spec, at the microbatch count whose walk equals its own (walk_microbatches). A capped m
// is past 2d >= min_microbatches, so only its multiple can be refused: the generator refuses it as given.
ScheduleSpec one_step(ScheduleSpec spec, int64_t stage) {
  spec.steps = 1;
  const int64_t m = walk_microbatches(spec.kind, spec.depth, spec.microbatches);
  if (m != spec.microbatches && spec.microbatches % microbatch_multiple(spec.kind, spec.depth) != 0)
    (void)StageOpStream(spec, stage, false);  // throws the generator's error
  spec.microbatches = m;
  return spec;
}

// Whether the rows can be summed without saturating: every byte count >= 0 and the largest row's counts
// times the largest byte count within int64 (then no partial sum, and no change of one chunk's term
// between two such byte vectors, can overflow).
bool sums_exact(const StashWalk& walk, const std::vector<ChunkStashBytes>& bytes) {
  int64_t most_bytes = 0;
  for (const auto& b : bytes) {
    if (b.activation < 0 || b.rebuilt < 0 || b.weight < 0) return false;
    most_bytes = std::max({most_bytes, b.activation, b.rebuilt, b.weight});
  }
  const int64_t most = walk.moments.most_held();
  return most == 0 || most_bytes <= INT64_MAX / most;
}

// stash_peak where sums_exact holds; the terms whose counts or bytes are all zero are skipped. -1 where
// it does not hold (the caller then saturates term by term).
int64_t exact_peak(const StashWalk& walk, const std::vector<ChunkStashBytes>& bytes) {
  const size_t v = bytes.size();
  if (!sums_exact(walk, bytes)) return -1;
  bool use_rebuilt = false, use_weight = false;
  for (const auto& b : bytes) {
    use_rebuilt = use_rebuilt || b.rebuilt != 0;
    use_weight = use_weight || b.weight != 0;
  }
  use_rebuilt = use_rebuilt && walk.moments.any_rebuilt();
  use_weight = use_weight && walk.moments.any_weight();
  int64_t most = 0;
  const ChunkHeld* row = walk.moments.data();
  for (size_t t = 0; t < walk.moments.size(); ++t, row += v) {
    int64_t sum = 0;
    for (size_t j = 0; j < v; ++j) sum += row[j].activations * bytes[j].activation;
    if (use_rebuilt)
      for (size_t j = 0; j < v; ++j) sum += row[j].rebuilt * bytes[j].rebuilt;
    if (use_weight)
      for (size_t j = 0; j < v; ++j) sum += row[j].weight_stashes * bytes[j].weight;
    most = std::max(most, sum);
  }
  return most;
}

}  // namespace

void StashMoments::push_back(Row row) {
  if (row.size() != width_) throw UsageError("a stash moment needs one entry per chunk of its walk");
  cells_.insert(cells_.end(), row.begin(), row.end());
  ++rows_;
  int64_t sum = 0;
  for (const ChunkHeld& h : row) {
    sum = saturating_add(sum, saturating_add(h.activations, saturating_add(h.rebuilt, h.weight_stashes)));
    any_rebuilt_ = any_rebuilt_ || h.rebuilt != 0;
    any_weight_ = any_weight_ || h.weight_stashes != 0;
  }
  most_ = std::max(most_, sum);
}

void StashMoments::erase(size_t t) {
  const auto at = cells_.begin() + static_cast<std::ptrdiff_t>(t * width_);
  cells_.erase(at, at + static_cast<std::ptrdiff_t>(width_));
  --rows_;
}

std::vector<std::vector<ChunkHeld>> StashMoments::rows() const {
  std::vector<std::vector<ChunkHeld>> out;
  for (Row row : *this) out.emplace_back(row.begin(), row.end());
  return out;
}

int64_t walk_microbatches(Schedule kind, int64_t depth, int64_t microbatches) {
  const bool chunked = kind == Schedule::interleaved || kind == Schedule::zb_v;
  return chunked && depth > 0 && microbatches > 2 * depth ? 2 * depth : microbatches;
}

StashWalk stash_walk(const ScheduleSpec& spec, int64_t stage, bool recompute) {
  const ScheduleSpec one = one_step(spec, stage);
  StashWalk walk;
  walk.chunks = chunks_at(one.kind, one.depth, one.chunks, stage);
  walk.moments = StashMoments(walk.chunks.size());
  std::vector<ChunkHeld> now(walk.chunks.size());
  // Counts only rise between the ops that lower one (a backward, a B, a W), so the moment just before each
  // of those, and the last, cover every other: only they are kept.
  for (StageOpStream s(one, stage, recompute); !s.done(); s.next()) {
    const Op& op = s.op();
    if (op.chunk < 0) continue;
    if (lowers(op.kind)) keep(walk.moments, now);
    apply(now, local_index(walk.chunks, op.chunk), op.kind);
  }
  keep(walk.moments, now);
  return walk;
}

std::pair<StashWalk, StashWalk> stash_walks(const ScheduleSpec& spec, int64_t stage) {
  const ScheduleSpec one = one_step(spec, stage);
  std::pair<StashWalk, StashWalk> out;
  auto& [plain, redo] = out;
  plain.chunks = redo.chunks = chunks_at(one.kind, one.depth, one.chunks, stage);
  plain.moments = redo.moments = StashMoments(plain.chunks.size());
  std::vector<ChunkHeld> now(plain.chunks.size());
  for (StageOpStream s(one, stage, false); !s.done(); s.next()) {
    const Op& op = s.op();
    if (op.chunk < 0) continue;
    const size_t j = local_index(plain.chunks, op.chunk);
    if (lowers(op.kind)) {
      keep(plain.moments, now);
      if (op.kind == OpKind::backward_weight) {
        keep(redo.moments, now);
      } else {  // the recomputing rank rebuilt this chunk's stash just before
        ChunkHeld& h = now[j];
        h.rebuilt = 1;
        keep(redo.moments, now);
        h.rebuilt = 0;
      }
    }
    apply(now, j, op.kind);
  }
  keep(plain.moments, now);
  keep(redo.moments, now);
  return out;
}

int64_t stash_peak(const StashWalk& walk, const std::vector<ChunkStashBytes>& bytes) {
  if (bytes.size() != walk.chunks.size() || (!walk.moments.empty() && walk.moments.width() != bytes.size()))
    throw UsageError("stash_peak needs the bytes of every chunk of the walk, and moments of that many chunks");
  if (const int64_t fast = exact_peak(walk, bytes); fast >= 0) return fast;
  int64_t most = 0;
  for (const auto& moment : walk.moments) {
    int64_t sum = 0;
    for (size_t j = 0; j < moment.size(); ++j) {
      const auto& h = moment[j];
      const auto& b = bytes[j];
      sum = saturating_add(sum, saturating_add(saturating_mul(h.activations, b.activation),
                                               saturating_add(saturating_mul(h.rebuilt, b.rebuilt),
                                                              saturating_mul(h.weight_stashes, b.weight))));
    }
    most = std::max(most, sum);
  }
  return most;
}

int64_t StashPeaks::peak(const StashWalk& walk, const std::vector<ChunkStashBytes>& bytes) {
  const size_t v = bytes.size(), moments = walk.moments.size();
  if (v != walk.chunks.size() || v != walk.moments.width() || !sums_exact(walk, bytes)) {
    walk_ = nullptr;
    return stash_peak(walk, bytes);  // throws on a size mismatch, saturates where sums could overflow
  }
  size_t changed = 0;
  const bool held = walk_ == &walk && bytes_.size() == v && sums_.size() == moments;
  if (held)
    for (size_t j = 0; j < v; ++j) changed += bytes_[j] == bytes[j] ? 0 : 1;
  if (!held || 2 * changed > v) {  // sum every row afresh
    sums_.assign(moments, 0);
    bytes_.assign(v, {});
    walk_ = &walk;
    changed = v;
  }
  if (changed > 0) {
    for (size_t j = 0; j < v; ++j) {
      if (bytes_[j] == bytes[j]) continue;
      const int64_t da = bytes[j].activation - bytes_[j].activation, dr = bytes[j].rebuilt - bytes_[j].rebuilt;
      const int64_t dw = bytes[j].weight - bytes_[j].weight;
      const ChunkHeld* h = walk.moments.data() + j;
      for (size_t t = 0; t < moments; ++t, h += v)
        sums_[t] += h->activations * da + h->rebuilt * dr + h->weight_stashes * dw;
      bytes_[j] = bytes[j];
    }
  }
  int64_t most = 0;
  for (int64_t x : sums_) most = std::max(most, x);
  return most;
}

}  // namespace pd2bw::pipeline
