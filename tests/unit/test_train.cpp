// Training on the built-in corpus learns: with the seeded tiny GPT planned as a 2-stage, 2-replica 2BW
// pipeline, the loss starts at the uniform guess ln(256) and within 40 steps falls below the corpus's
// unigram entropy, the best loss any model that ignores context can reach, so the model must be using the
// preceding bytes.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

#include "pd2bw/executor/data.hpp"
#include "pd2bw/executor/trainer.hpp"
#include "pd2bw/planner/search.hpp"
#include "pd2bw/schemas/common.hpp"

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

schemas::Plan tiny_plan() {
  const auto profile = schemas::parse_profile(
      schemas::read_text_file(std::string(PD2BW_SOURCE_DIR) + "/schemas/examples/gpt-tiny.profile.json"));
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
