// Training on the built-in corpus learns: with the seeded tiny GPT planned as a 2-stage, 2-replica 2BW
// pipeline, the loss starts at the uniform guess ln(256) and within 40 steps falls below the corpus's
// unigram entropy, the best loss any model that ignores context can reach, so the model must be using the
// preceding bytes. Also: a run stopped and resumed from checkpoints reports the losses of the uninterrupted
// run, and rank 0 gathers one metrics entry per stage from the ranks.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

#include "pd2bw/executor/checkpoint.hpp"
#include "pd2bw/executor/data.hpp"
#include "pd2bw/executor/safetensors.hpp"
#include "pd2bw/executor/trainer.hpp"
#include "pd2bw/planner/search.hpp"
#include "pd2bw/schemas/common.hpp"
#include "temp_dir.hpp"

using namespace pd2bw;

namespace {

double unigram_entropy(const executor::TokenData& data) {
  std::vector<double> count(static_cast<size_t>(data.vocab()), 0.0);
  for (int64_t i = 0; i < data.size(); ++i) count[static_cast<size_t>(data.token(i))] += 1.0;
  double h = 0;
  for (double c : count)
    if (c > 0) {
      const double p = c / static_cast<double>(data.size());
      h -= p * std::log(p);
    }
  return h;
}

// bert: the tiny GPT's profile relabelled as a (post-LN, tied) BERT over bytes and its 4 special tokens;
// the layer list and costs are the GPT's, which is all the planner reads.
schemas::Plan tiny_plan(bool bert = false) {
  auto profile = schemas::parse_profile(
      schemas::read_text_file(std::string(PD2BW_SOURCE_DIR) + "/schemas/examples/gpt-tiny.profile.json"));
  if (bert) {
    profile.model.kind = "bert";
    profile.model.ln = "post";
    profile.model.tie_embeddings = true;
    profile.model.vocab = executor::kByteVocab + 4;
  }
  schemas::Cluster cluster;
  cluster.device = {"cpu", 4 << 20};
  cluster.levels = {{"node", 4, 10.0, 0.002, 8.0}};
  planner::Constraints k;
  k.global_batch = 16;
  k.reserve_bytes = 0;
  k.schedule = schemas::Schedule::two_bw;
  const planner::CostModel model(profile, cluster, k);
  auto result = planner::search(model);
  REQUIRE(result.feasible());
  return planner::build_plan(model, result, std::string(64, '0'), {});
}

}  // namespace

TEST_CASE("the tiny GPT's loss falls below the corpus's unigram entropy within 40 steps") {
  const auto plan = tiny_plan();
  REQUIRE(plan.depth == 2);
  REQUIRE(plan.width == 2);
  executor::TrainOptions o;
  o.steps = 40;
  o.quiet = true;
  const auto r = executor::train(plan, std::string(64, '0'), o, nullptr);
  REQUIRE(r.losses.size() == 40);
  const double h1 = unigram_entropy(executor::TokenData::builtin());
  const double last = std::accumulate(r.losses.end() - 5, r.losses.end(), 0.0) / 5.0;
  MESSAGE("unigram entropy " << h1 << " nats; loss " << r.losses.front() << " -> " << last << " (mean of last 5)");
  CHECK(std::abs(r.losses.front() - std::log(256.0)) < 0.1);
  CHECK(last < h1);
}

TEST_CASE("a run in segments with checkpoints and a resume gives the uninterrupted run's losses") {
  const auto plan = tiny_plan();
  const std::string sha(64, '0');
  executor::TrainOptions o;
  o.steps = 6;
  o.quiet = true;
  const auto whole = executor::train(plan, sha, o, nullptr);
  REQUIRE(whole.losses.size() == 6);
  const test::TempDir dir("train-segments");
  o.checkpoint_dir = (dir.path() / "ck").string();
  o.checkpoint_every = 2;
  o.stop_after = 3;  // segments of 2 and 1 steps, then stop with a checkpoint at step 3
  const auto first = executor::train(plan, sha, o, nullptr);
  o.resume = true;
  o.stop_after = 0;
  const auto second = executor::train(plan, sha, o, nullptr);
  CHECK(second.first_step == 3);
  std::vector<double> parts = first.losses;
  parts.insert(parts.end(), second.losses.begin(), second.losses.end());
  CHECK(parts == whole.losses);  // bit for bit
}

TEST_CASE("bert: masked-LM learns, resumes exactly, and checkpoints under BertForMaskedLM's names") {
  const auto plan = tiny_plan(true);
  REQUIRE(plan.depth == 2);
  const std::string sha(64, '0');
  executor::TrainOptions o;
  o.steps = 30;
  o.quiet = true;
  const auto whole = executor::train(plan, sha, o, nullptr);
  REQUIRE(whole.losses.size() == 30);
  const double last = std::accumulate(whole.losses.end() - 5, whole.losses.end(), 0.0) / 5.0;
  MESSAGE("bert loss " << whole.losses.front() << " -> " << last << " (mean of last 5)");
  CHECK(std::abs(whole.losses.front() - std::log(260.0)) < 0.3);
  CHECK(last < whole.losses.front() * 2.0 / 3.0);

  const test::TempDir dir("train-bert");
  o.steps = 6;
  const auto six = executor::train(plan, sha, o, nullptr);
  o.checkpoint_dir = (dir.path() / "ck").string();
  o.checkpoint_every = 2;
  o.stop_after = 3;
  const auto first = executor::train(plan, sha, o, nullptr);
  o.resume = true;
  o.stop_after = 0;
  const auto second = executor::train(plan, sha, o, nullptr);
  std::vector<double> parts = first.losses;
  parts.insert(parts.end(), second.losses.begin(), second.losses.end());
  CHECK(parts == six.losses);  // bit for bit
  const auto stage0 = executor::read_safetensors((dir.path() / "ck" / "step-000006" / "stage-000.safetensors").string());
  const auto last_stage = executor::read_safetensors(
      (dir.path() / "ck" / "step-000006" / executor::stage_file_name(plan.depth - 1)).string());
  for (const char* name : {"bert.embeddings.word_embeddings.weight", "bert.embeddings.token_type_embeddings.weight",
                           "bert.embeddings.LayerNorm.weight", "bert.encoder.layer.0.attention.self.query.weight"})
    CHECK_MESSAGE(stage0.tensors.count(name) == 1, name);
  for (const char* name : {"cls.predictions.transform.dense.weight", "cls.predictions.bias",
                           "cls.predictions.decoder.weight"})
    CHECK_MESSAGE(last_stage.tensors.count(name) == 1, name);
}

TEST_CASE("rank 0 gathers one metrics entry per stage and the step times of every step") {
  const auto plan = tiny_plan();
  executor::TrainOptions o;
  o.steps = 4;
  o.quiet = true;
  o.checkpoint_every = 0;
  const auto r = executor::train(plan, std::string(64, '0'), o, nullptr);
  REQUIRE(r.peak_bytes.size() == static_cast<size_t>(plan.depth));
  REQUIRE(r.versions.size() == static_cast<size_t>(plan.depth));
  REQUIRE(r.compute_ms.size() == static_cast<size_t>(plan.depth));
  for (int64_t i = 0; i < plan.depth; ++i) {
    CHECK(r.peak_bytes[static_cast<size_t>(i)] > 0);
    CHECK(r.versions[static_cast<size_t>(i)] == 2);  // 2BW keeps two weight versions on every stage
    CHECK(r.compute_ms[static_cast<size_t>(i)] > 0);
  }
  // Each entry comes from its own stage (different layers and stash counts), not one rank repeated.
  CHECK(r.peak_bytes.front() != r.peak_bytes.back());
  CHECK(r.step_ms.size() == 3);
  for (double ms : r.step_ms) CHECK(ms > 0);
}
