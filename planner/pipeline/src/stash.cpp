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

void keep(std::vector<std::vector<ChunkHeld>>& moments, const std::vector<ChunkHeld>& now) {
  for (const auto& m : moments)
    if (covers(m, now)) return;
  std::erase_if(moments, [&](const auto& m) { return covers(now, m); });
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

ScheduleSpec one_step(ScheduleSpec spec) {
  spec.steps = 1;
  return spec;
}

}  // namespace

StashWalk stash_walk(const ScheduleSpec& spec, int64_t stage, bool recompute) {
  const ScheduleSpec one = one_step(spec);
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
  return walk;
}

std::pair<StashWalk, StashWalk> stash_walks(const ScheduleSpec& spec, int64_t stage) {
  const ScheduleSpec one = one_step(spec);
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
  return out;
}

int64_t stash_peak(const StashWalk& walk, const std::vector<ChunkStashBytes>& bytes) {
  if (bytes.size() != walk.chunks.size())
    throw UsageError("stash_peak needs the bytes of every chunk of the walk");
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

}  // namespace pd2bw::pipeline
