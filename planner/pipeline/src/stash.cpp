// The stash walk: counts per chunk after each op of one step, reduced to the moments that can peak.
#include "pd2bw/pipeline/stash.hpp"

#include <algorithm>
#include <utility>

#include "pd2bw/checked.hpp"
#include "pd2bw/error.hpp"

namespace pd2bw::pipeline {

namespace {

bool covers(const std::vector<ChunkHeld>& a, const std::vector<ChunkHeld>& b) {  // a >= b everywhere
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

void keep(std::vector<std::vector<ChunkHeld>>& moments, const std::vector<ChunkHeld>& now) {
  const size_t from = moments.size() > kKeepWindow ? moments.size() - kKeepWindow : 0;
  for (size_t k = from; k < moments.size(); ++k)
    if (covers(moments[k], now)) return;
  for (size_t k = moments.size(); k-- > from;)
    if (covers(now, moments[k])) moments.erase(moments.begin() + static_cast<std::ptrdiff_t>(k));
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

// Fills walk's flat rows from its moments (StashWalk::flat).
void flatten(StashWalk& walk) {
  const size_t v = walk.chunks.size();
  walk.flat.assign(walk.moments.size() * 3 * v, 0);
  walk.flat_most = 0;
  for (size_t t = 0; t < walk.moments.size(); ++t) {
    int64_t* row = walk.flat.data() + t * 3 * v;
    int64_t sum = 0;
    for (size_t j = 0; j < v; ++j) {
      const ChunkHeld& h = walk.moments[t][j];
      row[j] = h.activations;
      row[v + j] = h.rebuilt;
      row[2 * v + j] = h.weight_stashes;
      sum = saturating_add(sum, saturating_add(h.activations, saturating_add(h.rebuilt, h.weight_stashes)));
      walk.flat_rebuilt = walk.flat_rebuilt || h.rebuilt != 0;
      walk.flat_weight = walk.flat_weight || h.weight_stashes != 0;
    }
    walk.flat_most = std::max(walk.flat_most, sum);
  }
}

// Whether the flat rows can be summed without saturating: every byte count >= 0 and the largest row's
// counts times the largest byte count within int64 (then no partial sum, and no change of one chunk's
// term between two such byte vectors, can overflow).
bool flat_exact(const StashWalk& walk, const std::vector<ChunkStashBytes>& bytes) {
  if (walk.flat.size() != walk.moments.size() * 3 * bytes.size()) return false;
  int64_t most_bytes = 0;
  for (const auto& b : bytes) {
    if (b.activation < 0 || b.rebuilt < 0 || b.weight < 0) return false;
    most_bytes = std::max({most_bytes, b.activation, b.rebuilt, b.weight});
  }
  return walk.flat_most == 0 || most_bytes <= INT64_MAX / walk.flat_most;
}

// stash_peak over the flat rows where flat_exact holds; columns whose counts or bytes are all zero are
// skipped. -1 where it does not hold (the caller then saturates term by term).
int64_t flat_peak(const StashWalk& walk, const std::vector<ChunkStashBytes>& bytes) {
  const size_t v = bytes.size();
  if (!flat_exact(walk, bytes)) return -1;
  bool use_rebuilt = false, use_weight = false;
  for (const auto& b : bytes) {
    use_rebuilt = use_rebuilt || b.rebuilt != 0;
    use_weight = use_weight || b.weight != 0;
  }
  use_rebuilt = use_rebuilt && walk.flat_rebuilt;
  use_weight = use_weight && walk.flat_weight;
  int64_t most = 0;
  const int64_t* row = walk.flat.data();
  for (size_t t = 0; t < walk.moments.size(); ++t, row += 3 * v) {
    int64_t sum = 0;
    for (size_t j = 0; j < v; ++j) sum += row[j] * bytes[j].activation;
    if (use_rebuilt)
      for (size_t j = 0; j < v; ++j) sum += row[v + j] * bytes[j].rebuilt;
    if (use_weight)
      for (size_t j = 0; j < v; ++j) sum += row[2 * v + j] * bytes[j].weight;
    most = std::max(most, sum);
  }
  return most;
}

}  // namespace

int64_t walk_microbatches(Schedule kind, int64_t depth, int64_t microbatches) {
  const bool chunked = kind == Schedule::interleaved || kind == Schedule::zb_v;
  return chunked && depth > 0 && microbatches > 2 * depth ? 2 * depth : microbatches;
}

StashWalk stash_walk(const ScheduleSpec& spec, int64_t stage, bool recompute) {
  const ScheduleSpec one = one_step(spec, stage);
  StashWalk walk;
  walk.chunks = chunks_at(one.kind, one.depth, one.chunks, stage);
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
  flatten(walk);
  return walk;
}

std::pair<StashWalk, StashWalk> stash_walks(const ScheduleSpec& spec, int64_t stage) {
  const ScheduleSpec one = one_step(spec, stage);
  std::pair<StashWalk, StashWalk> out;
  auto& [plain, redo] = out;
  plain.chunks = redo.chunks = chunks_at(one.kind, one.depth, one.chunks, stage);
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
  flatten(plain);
  flatten(redo);
  return out;
}

int64_t stash_peak(const StashWalk& walk, const std::vector<ChunkStashBytes>& bytes) {
  if (bytes.size() != walk.chunks.size())
    throw UsageError("stash_peak needs the bytes of every chunk of the walk");
  if (const int64_t fast = flat_peak(walk, bytes); fast >= 0) return fast;
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
  if (v != walk.chunks.size() || !flat_exact(walk, bytes)) {
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
    const int64_t* flat = walk.flat.data();
    for (size_t j = 0; j < v; ++j) {
      if (bytes_[j] == bytes[j]) continue;
      const int64_t da = bytes[j].activation - bytes_[j].activation, dr = bytes[j].rebuilt - bytes_[j].rebuilt;
      const int64_t dw = bytes[j].weight - bytes_[j].weight;
      const int64_t* row = flat + j;
      for (size_t t = 0; t < moments; ++t, row += 3 * v) sums_[t] += row[0] * da + row[v] * dr + row[2 * v] * dw;
      bytes_[j] = bytes[j];
    }
  }
  int64_t most = 0;
  for (int64_t x : sums_) most = std::max(most, x);
  return most;
}

}  // namespace pd2bw::pipeline
