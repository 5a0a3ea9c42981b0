// pd2bw train's path for a plan of several model chunks per rank (interleaved, zb-v): train() runs it as
// threads, with the losses of Flush run on the same chunks as stages, bit for bit; a run stopped at a
// checkpoint and resumed ends with the uninterrupted run's losses and checkpoint, byte for byte; each
// rank's checkpoint file holds exactly the tensors Flush's stage files of its chunks hold, with the same
// bytes; rank 0 reports one metrics entry per rank of a replica. Also the message tags of a rank's
// chunks stay apart (white box: the runtime's private tag rule).
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "../../executor/src/runtime/stage_state.hpp"  // make_tag, kTagWindow (private to the runtime)
#include "pd2bw/executor/checkpoint.hpp"
#include "pd2bw/executor/safetensors.hpp"
#include "pd2bw/executor/trainer.hpp"
#include "pd2bw/planner/search.hpp"
#include "pd2bw/schemas/common.hpp"
#include "temp_dir.hpp"

using namespace pd2bw;
using schemas::Schedule;

namespace {

// The tiny GPT (6 layers) planned as Flush on `stages` stages of one replica, its embeddings tied.
schemas::Plan flush_plan(int64_t stages) {
  auto profile = schemas::parse_profile(
      schemas::read_text_file(std::string(PD2BW_SOURCE_DIR) + "/schemas/examples/gpt-tiny.profile.json"));
  profile.model.tie_embeddings = true;
  schemas::Cluster cluster;
  cluster.device = {"cpu", 4 << 20};
  cluster.levels = {{"node", stages, 10.0, 0.002, 8.0}};
  planner::Constraints k;
  k.global_batch = 8;
  k.reserve_bytes = 0;
  k.schedule = Schedule::flush;
  k.depth = stages;
  k.width = 1;
  k.recompute = planner::RecomputePolicy::never;
  const planner::CostModel model(profile, cluster, k);
  auto result = planner::search(model);
  REQUIRE(result.feasible());
  auto plan = planner::build_plan(model, result, std::string(64, '0'), {});
  REQUIRE(plan.depth == stages);
  return plan;
}

// The same model chunks as a plan of schedule s with v chunks per rank: d = stages / v positions, chunk
// c on position chunk_position(s, d, c), ranks p (one replica).
schemas::Plan chunked_plan(schemas::Plan plan, Schedule s, int64_t v) {
  const int64_t d = plan.depth / v;
  plan.schedule = s;
  plan.chunks_per_rank = v;
  plan.depth = d;
  plan.placement = schemas::Placement::replicas_inner;
  plan.ranks.resize(static_cast<size_t>(d));
  for (int64_t p = 0; p < d; ++p) plan.ranks[static_cast<size_t>(p)] = {p, p, 0, 0, p};
  for (auto& st : plan.stages) st.ranks = {schemas::chunk_position(s, d, st.index)};
  return plan;
}

std::map<std::string, std::vector<std::byte>> tensors_of(const std::string& path) {
  std::map<std::string, std::vector<std::byte>> out;
  for (const auto& [name, t] : executor::read_safetensors(path).tensors) out[name] = t.data;
  return out;
}

}  // namespace

TEST_CASE("train() runs interleaved and zb-v plans: Flush's losses, and a resumed run is the whole run") {
  const schemas::Plan flush = flush_plan(4);
  REQUIRE(flush.microbatches_per_step % 2 == 0);
  const std::string sha(64, '0');
  const test::TempDir dir("train-chunks");
  executor::TrainOptions o;
  o.steps = 4;
  o.quiet = true;
  o.checkpoint_dir = (dir.path() / "flush").string();
  const auto base = executor::train(flush, sha, o, nullptr);
  REQUIRE(base.losses.size() == 4);
  for (Schedule s : {Schedule::interleaved, Schedule::zb_v}) {
    CAPTURE(schemas::to_string(s));
    const schemas::Plan plan = chunked_plan(flush, s, 2);
    const std::string name(schemas::to_string(s));
    o.checkpoint_dir = (dir.path() / (name + "-whole")).string();
    o.stop_after = 0;
    o.resume = false;
    const auto whole = executor::train(plan, sha, o, nullptr);
    CHECK(whole.losses == base.losses);  // bit for bit
    REQUIRE(whole.peak_bytes.size() == 2);
    for (size_t p = 0; p < 2; ++p) {
      CHECK(whole.versions[p] == 1);
      CHECK(whole.compute_ms[p] > 0);
    }
    o.checkpoint_dir = (dir.path() / (name + "-parts")).string();
    o.stop_after = 2;
    const auto first = executor::train(plan, sha, o, nullptr);
    o.resume = true;
    o.stop_after = 0;
    const auto second = executor::train(plan, sha, o, nullptr);
    CHECK(second.first_step == 2);
    std::vector<double> parts = first.losses;
    parts.insert(parts.end(), second.losses.begin(), second.losses.end());
    CHECK(parts == whole.losses);
    for (int64_t p = 0; p < 2; ++p) {
      CAPTURE(p);
      const auto file = [&](const std::string& run, int64_t stage) {
        return (dir.path() / run / "step-000004" / executor::stage_file_name(stage)).string();
      };
      const auto mine = tensors_of(file(name + "-whole", p));
      CHECK(mine == tensors_of(file(name + "-parts", p)));
      std::map<std::string, std::vector<std::byte>> flush_chunks;
      for (const int64_t c : pipeline::chunks_at(s, 2, 2, p)) flush_chunks.merge(tensors_of(file("flush", c)));
      CHECK(mine.size() == flush_chunks.size());
      CHECK(mine == flush_chunks);
    }
  }
}

TEST_CASE("message tags: one lane per chunk of a rank, apart from every other lane and kind, and within MPI's range") {
  using executor::kTagWindow;
  using executor::make_tag;
  using executor::TagKind;
  for (int64_t v : {1, 2, 3, 7, 64}) {
    CAPTURE(v);
    std::map<int64_t, std::pair<int64_t, int64_t>> owner;  // tag -> (kind, lane)
    for (TagKind kind : {TagKind::activation, TagKind::gradient, TagKind::tied})
      for (int64_t lane = 0; lane < v; ++lane)
        for (int64_t step = 0; step < 20; ++step)
          for (int64_t k = -1; k < 300; ++k) {
            const int64_t tag = make_tag(kind, lane, v, step, k);
            REQUIRE(tag >= 0);
            REQUIRE(tag < 3 * kTagWindow);  // below the job's report tags (8192) and Comm's kMaxUserTag
            const auto who = std::make_pair(static_cast<int64_t>(kind), lane);
            REQUIRE(owner.emplace(tag, who).first->second == who);
            if (v == 1)  // one chunk per rank: the tags of one stage
              REQUIRE(tag == static_cast<int64_t>(kind) * kTagWindow + (step % 8) * 128 + (k < 0 ? 0 : k % 128));
          }
  }
}
