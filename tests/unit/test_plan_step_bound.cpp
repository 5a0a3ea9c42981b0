// An alternative's step_bound (plan schema 1.6): a row the planner did not replay carries its objective,
// a lower bound on its replay, which may be below the plan's step; the file says so, round-trips byte for
// byte as 1.6.0, and `pd2bw validate`'s rules (check_plan_numbers) take such a row below the plan while
// still refusing a replayed (or upper-bound) row that is faster than the plan.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "pd2bw/planner/plan_audit.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "schema_samples.hpp"
#include "schema_test_util.hpp"

namespace s = pd2bw::schemas;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The findings on the plan's alternatives.
int alternative_findings(const s::Plan& plan) {
  int n = 0;
  for (const auto& f : pd2bw::planner::check_plan_numbers(plan))
    if (f.pointer.rfind("/alternatives/", 0) == 0) ++n;
  return n;
}

}  // namespace

TEST_CASE("a bound among the alternatives round-trips as 1.6.0; plans without one are written as before") {
  s::Plan plan = pd2bw::testing::sample_plan();
  const std::string before = s::dump_plan(plan);
  CHECK(has(before, "\"schema_version\": \"1.0.0\""));
  CHECK_FALSE(has(before, "step_bound"));
  CHECK(s::parse_plan(before).alternatives[0].step_bound == s::StepBound::none);
  for (const s::StepBound b : {s::StepBound::lower, s::StepBound::upper}) {
    plan.alternatives[0].step_bound = b;
    const std::string text = s::dump_plan(plan);
    CHECK(has(text, "\"schema_version\": \"1.6.0\""));
    CHECK(has(text, "\"step_bound\": \"" + std::string(s::to_string(b)) + "\""));
    const s::Plan back = s::parse_plan(text);
    CHECK(back.alternatives[0].step_bound == b);
    CHECK(s::dump_plan(back) == text);
  }
  nlohmann::json j = nlohmann::json::parse(before);
  j["alternatives"][0]["step_bound"] = "none";
  const std::string error = pd2bw::testing::schema_error_of([&] { s::parse_plan(j.dump()); });
  CHECK(has(error, "/alternatives/0/step_bound: unknown step bound \"none\""));
}

TEST_CASE("validate takes an unreplayed row below the plan's step, and refuses any other row faster") {
  s::Plan plan = pd2bw::testing::sample_plan();
  REQUIRE(alternative_findings(plan) == 0);
  plan.alternatives[0].step_ms = 0.8 * plan.predictions.step_ms;  // faster than the plan
  CHECK(alternative_findings(plan) == 1);
  plan.alternatives[0].step_bound = s::StepBound::upper;  // an upper bound below the plan: a better plan exists
  CHECK(alternative_findings(plan) == 1);
  plan.alternatives[0].step_bound = s::StepBound::lower;  // its replay may well be slower than the plan
  CHECK(alternative_findings(plan) == 0);
}
