// Assembles a Plan from the search's winner: stages, rank table, predictions and the alternatives.
#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "pd2bw/planner/search.hpp"

namespace pd2bw::planner {

namespace {

schemas::StagePlan stage_plan(const Candidate& c, const Split& split, const StageCost& sc, int64_t i) {
  schemas::StagePlan st;
  st.index = i;
  st.layer_begin = split.bounds[static_cast<size_t>(i)];
  st.layer_end = split.bounds[static_cast<size_t>(i + 1)];
  st.recompute = sc.recompute;
  const int64_t position = pipeline::chunk_position(c.schedule, c.depth, i);  // i itself when v = 1
  for (int64_t r = 0; r < c.width; ++r) st.ranks.push_back(CostModel::rank_of(c, position, r));
  st.in_flight = sc.in_flight;
  st.compute_ms = sc.compute_ms;
  st.p2p_ms = sc.p2p_ms;
  st.allreduce_ms = sc.allreduce_ms;
  st.step_ms = sc.step_ms;
  st.memory = sc.memory;
  return st;
}

std::vector<schemas::RankEntry> rank_table(const CostModel& model, const Candidate& c) {
  const int64_t per_node = model.cluster().levels.front().size;
  std::vector<schemas::RankEntry> ranks(static_cast<size_t>(c.width * c.depth));
  for (int64_t i = 0; i < c.depth; ++i)
    for (int64_t r = 0; r < c.width; ++r) {
      const int64_t rank = CostModel::rank_of(c, i, r);
      ranks[static_cast<size_t>(rank)] = {rank, i, r, rank / per_node, rank % per_node};
    }
  return ranks;
}

schemas::Predictions predictions(const CostModel& model, const Evaluated& e) {
  schemas::Predictions p;
  p.step_ms = e.step_ms;
  const double samples = static_cast<double>(model.constraints().global_batch);
  p.samples_per_s = samples / (e.step_ms / 1e3);
  p.tokens_per_s = p.samples_per_s * static_cast<double>(model.profile().model.seq_len);
  for (size_t i = 1; i < e.stages.size(); ++i)
    if (e.stages[i].step_ms > e.stages[static_cast<size_t>(p.bottleneck_stage)].step_ms)
      p.bottleneck_stage = static_cast<int64_t>(i);
  p.bubble_fraction = e.bubble_fraction;
  p.imbalance_fraction = e.imbalance_fraction;
  double fullest = -1.0;
  for (const auto& s : e.stages) {
    const double f = static_cast<double>(s.memory.total_bytes) / static_cast<double>(s.memory.limit_bytes);
    if (f > fullest) {
      fullest = f;
      p.binding_memory = s.memory.dominant;
    }
  }
  return p;
}

}  // namespace

namespace {

// The stage that sets a candidate's step time.
const StageCost& bottleneck(const Evaluated& e, size_t* index) {
  size_t bi = 0;
  for (size_t i = 0; i < e.stages.size(); ++i)
    if (e.stages[i].step_ms > e.stages[bi].step_ms) bi = i;
  *index = bi;
  return e.stages[bi];
}

// A chunked candidate's busiest rank: its position and its chunks' times added up.
std::pair<int64_t, double> busiest_rank(const Evaluated& e) {
  const Candidate& c = e.candidate;
  std::vector<double> lanes(static_cast<size_t>(c.depth), 0.0);
  for (size_t k = 0; k < e.stages.size(); ++k)
    lanes[static_cast<size_t>(pipeline::chunk_position(c.schedule, c.depth, static_cast<int64_t>(k)))] += e.stages[k].step_ms;
  const auto top = std::max_element(lanes.begin(), lanes.end());
  return {top - lanes.begin(), *top};
}

std::string bottleneck_text(const Evaluated& e) {
  if (e.candidate.chunks > 1) {
    const auto [position, ms] = busiest_rank(e);
    return fmt::format("rank {} of the pipeline, {} chunks = {:.2f} ms", position, e.candidate.chunks, ms);
  }
  size_t i = 0;
  const StageCost& s = bottleneck(e, &i);
  return fmt::format("stage {} = {} x ({:.2f} compute + {:.2f} p2p) + {:.2f} allreduce ms", i, e.candidate.microbatches,
                     s.compute_ms, s.p2p_ms, s.allreduce_ms);
}


}  // namespace

std::string why_lost(const Evaluated& winner, const Evaluated& loser) {
  size_t li = 0;
  const auto& ls = bottleneck(loser, &li);
  std::string text;
  const double slower = (loser.step_ms / winner.step_ms - 1.0) * 100.0;
  if (loser.unreplayed && slower < 0.0)  // one that could win, left out of the replays by their budget
    text = fmt::format("not replayed (the replay budget ran out; the proven gap counts it): its objective, a lower "
                       "bound on its replay, is {:.1f}% below the winner's step", -slower);
  else if (loser.unreplayed)
    text = fmt::format("at least {:.1f}% slower", slower);
  else if (loser.step_ms == winner.step_ms)
    text = "same step time, ranked lower (uses more devices or comes later in search order)";
  else
    text = fmt::format("{:.1f}% slower", slower);
  text += fmt::format(": bottleneck {} (winner's {})", bottleneck_text(loser), bottleneck_text(winner));
  if (loser.bubble_fraction >= 0.005)
    text += fmt::format("; {:.1f}% of its ranks' time idles in fill and drain", 100.0 * loser.bubble_fraction);
  if (loser.imbalance_fraction >= 0.005)
    text += fmt::format("; {:.1f}% idles on stages less busy than the slowest", 100.0 * loser.imbalance_fraction);
  if (ls.recompute) text += "; recomputes activations to fit";
  if (loser.unreplayed && slower >= 0.0)
    text += "; not replayed (too large to replay for this list): its step is the objective, a lower bound on its "
            "replay";
  if (loser.representative)
    text += fmt::format("; an upper bound, not {0}'s best plan: {0} was not searched further (its most promising "
                        "candidate, split for the least busiest-stage time); `--schedule {0}` searches it and "
                        "may find a faster plan",
                        schemas::to_string(loser.candidate.schedule));
  return text;
}

schemas::Plan build_plan(const CostModel& model, const SearchResult& result,
                         const std::string& profile_sha256, const schemas::Provenance& provenance) {
  const Evaluated& win = result.ranked.front();
  const Candidate& c = win.candidate;
  schemas::Plan plan;
  plan.provenance = provenance;
  plan.profile_sha256 = profile_sha256;
  plan.model = model.profile().model;
  plan.num_layers = model.num_layers();
  plan.cluster = model.cluster();
  plan.schedule = c.schedule;
  plan.optimizer = model.constraints().optimizer;
  plan.placement = c.placement;
  plan.microbatch_size = c.microbatch;
  plan.microbatches_per_step = c.microbatches;
  plan.depth = c.depth;
  plan.width = c.width;
  plan.chunks_per_rank = c.chunks;
  plan.global_batch = model.constraints().global_batch;
  plan.reserve_bytes = model.constraints().reserve_bytes;
  for (int64_t i = 0; i < c.depth * c.chunks; ++i)
    plan.stages.push_back(stage_plan(c, win.split, win.stages[static_cast<size_t>(i)], i));
  plan.ranks = rank_table(model, c);
  plan.predictions = predictions(model, win);
  for (size_t i = 1; i < result.ranked.size(); ++i) {
    const auto& e = result.ranked[i];
    const auto& ec = e.candidate;
    const auto bound = e.unreplayed       ? schemas::StepBound::lower
                       : e.representative ? schemas::StepBound::upper
                                          : schemas::StepBound::none;
    plan.alternatives.push_back({ec.schedule, ec.microbatch, ec.microbatches, ec.depth, ec.width,
                                 ec.placement, e.step_ms,
                                 static_cast<double>(plan.global_batch) / (e.step_ms / 1e3),
                                 why_lost(win, e), ec.chunks, bound});
  }
  return plan;
}

}  // namespace pd2bw::planner
