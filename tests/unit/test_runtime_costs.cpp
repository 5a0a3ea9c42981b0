// The profile's runtime_calibration: measured by run_profile on the cpu, read, written and refused like
// the other fields, and priced by the planner as the closed form says (every layer time at microbatch
// size b times compute_scale[b]); the planner's prediction stays the replay of the written plan; a
// profile without it (or one whose options turned it off) plans as before.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pd2bw/planner/runtime_costs.hpp"
#include "pd2bw/planner/search.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "pd2bw/profiler/profiler.hpp"
#include "pd2bw/schemas/profile.hpp"
#include "profiler_test_util.hpp"
#include "plan_replay_util.hpp"
#include "random_instances.hpp"
#include "schema_test_util.hpp"

using namespace pd2bw;
using nlohmann::json;

namespace {

json tiny_profile_json() {
  std::ifstream f(std::string(PD2BW_SOURCE_DIR) + "/schemas/examples/gpt-tiny.profile.json");
  std::stringstream s;
  s << f.rdbuf();
  return json::parse(s.str());
}

// Runs of 1 and 5 microbatches; update_scale 3; one entry per microbatch size of the tiny profile (1, 2,
// 4, 8), compute_scale 1 + 0.1 (k + 1). The tiny profile has no update_ms: give every layer 0.25 ms.
json with_calibration(json p) {
  json entries = json::array();
  for (size_t k = 0; k < p["microbatch_sizes"].size(); ++k)
    entries.push_back({{"microbatch", p["microbatch_sizes"][k]},
                       {"step_ms", {2.0, 9.0}},
                       {"compute_scale", 1.0 + 0.1 * static_cast<double>(k + 1)}});
  for (auto& layer : p["layers"]) layer["update_ms"] = 0.25;
  p["runtime_calibration"] = {{"microbatches", {1, 5}}, {"update_scale", 3.0}, {"per_microbatch", entries}};
  return p;
}

// 2bw, b = 2, m = 16, one stage: the plan's step and the replay of the written plan.
std::pair<double, double> plan_and_replay(const schemas::Profile& profile) {
  planner::Constraints k;
  k.global_batch = 32;
  k.schedule = schemas::Schedule::two_bw;
  k.microbatch = 2;
  k.depth = 1;
  k.width = 1;
  k.reserve_bytes = 0;
  const auto got = testing::written_plan_and_replay(profile, planner::CostModel(profile, testing::one_node_cluster(), k));
  REQUIRE(got.has_value());
  return {got->first.predictions.step_ms, got->second};
}

std::string error_with(const std::function<void(json&)>& mutate) {
  json p = with_calibration(tiny_profile_json());
  mutate(p);
  return testing::schema_error_of([&] { (void)schemas::parse_profile(p.dump()); });
}

}  // namespace

TEST_CASE("runtime_calibration is read and written back, at schema 1.4.0") {
  const schemas::Profile p = schemas::parse_profile(with_calibration(tiny_profile_json()).dump());
  const schemas::RuntimeCalibration& c = p.runtime_calibration;
  REQUIRE(c.present());
  CHECK(c.few == 1);
  CHECK(c.many == 5);
  CHECK(c.update_scale == 3.0);
  REQUIRE(c.per_microbatch.size() == 4);
  CHECK(c.per_microbatch[1].microbatch == 2);
  CHECK(c.per_microbatch[1].few_step_ms == 2.0);
  CHECK(c.per_microbatch[1].many_step_ms == 9.0);
  CHECK(c.per_microbatch[1].compute_scale == doctest::Approx(1.2).epsilon(1e-15));
  const std::string text = schemas::dump_profile(p);
  CHECK(json::parse(text)["schema_version"] == "1.4.0");
  CHECK(schemas::dump_profile(schemas::parse_profile(text)) == text);
  const schemas::Profile old = schemas::parse_profile(tiny_profile_json().dump());
  CHECK_FALSE(old.runtime_calibration.present());
  CHECK(json::parse(schemas::dump_profile(old))["schema_version"] == "1.0.0");
}

TEST_CASE("a bad runtime_calibration is refused with its JSON pointer and a hint") {
  using testing::check_prefix;
  const std::string entries = "/runtime_calibration/per_microbatch";
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["per_microbatch"][1]["compute_scale"] = 0.0; }),
               entries + "/1/compute_scale: must be > 0");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["per_microbatch"][2]["compute_scale"] = 5.0; }),
               entries + "/2/compute_scale: must be <= 4");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["per_microbatch"][0]["step_ms"][1] = -1.0; }),
               entries + "/0/step_ms/1: must be > 0");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["per_microbatch"][0]["step_ms"] = {1.0}; }),
               entries + "/0/step_ms: must hold 2 numbers");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["per_microbatch"].erase(3); }),
               entries + ": has 3 entries but /microbatch_sizes has 4");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["per_microbatch"][1]["microbatch"] = 3; }),
               entries + "/1/microbatch: expected 2");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["per_microbatch"][0]["scale"] = 1.0; }),
               entries + "/0/scale");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["per_microbatch"][0].erase("compute_scale"); }),
               entries + "/0/compute_scale");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["update_scale"] = -0.5; }),
               "/runtime_calibration/update_scale: must be >= 0");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["update_scale"] = 101.0; }),
               "/runtime_calibration/update_scale: must be <= 100");
  check_prefix(error_with([](json& p) {
                 p["runtime_calibration"]["microbatches"] = {5, 1};
               }),
               "/runtime_calibration/microbatches: must hold 2 microbatch counts");
  check_prefix(error_with([](json& p) { p["runtime_calibration"] = json::array(); }), "/runtime_calibration");
  try {
    json p = with_calibration(tiny_profile_json());
    p["runtime_calibration"]["per_microbatch"][2]["compute_scale"] = 5.0;
    (void)schemas::parse_profile(p.dump());
    FAIL("no error");
  } catch (const SchemaError& e) {
    CHECK(std::string(e.hint()).find("re-profile") != std::string::npos);
  }
}

TEST_CASE("the planner's step grows by exactly m (s - 1) sum(fwd + bwd) + (u - 1) sum(update), as the replay") {
  const json raw = with_calibration(tiny_profile_json());
  json plain = raw;
  plain.erase("runtime_calibration");
  const schemas::Profile old = schemas::parse_profile(plain.dump());
  const schemas::Profile calibrated = schemas::parse_profile(raw.dump());
  double layers = 0, update = 0;  // at b = 2 (index 1)
  for (const auto& l : old.layers) {
    layers += l.per_microbatch[1].fwd_ms + l.per_microbatch[1].bwd_ms;
    update += l.update_ms;
  }
  const auto [old_step, old_replay] = plan_and_replay(old);
  const auto [new_step, new_replay] = plan_and_replay(calibrated);
  const double m = 16, s = 1.2, u = 3.0;  // compute_scale at b = 2, update_scale
  CHECK(update == doctest::Approx(6 * 0.25));
  CHECK(old_step == doctest::Approx(m * layers + update).epsilon(1e-12));  // an old profile still plans
  CHECK(new_step - old_step == doctest::Approx(m * (s - 1.0) * layers + (u - 1.0) * update).epsilon(1e-12));
  CHECK(old_replay == doctest::Approx(old_step).epsilon(1e-12));
  CHECK(new_replay == doctest::Approx(new_step).epsilon(1e-12));
  CHECK(planner::runtime_costs_note(old).find("no runtime_calibration") != std::string::npos);
  CHECK(planner::runtime_costs_note(calibrated).find("b=2 x1.200") != std::string::npos);
}

TEST_CASE("with a runtime_calibration the planner's predictions are still the replay of its plan") {
  int64_t compared = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    auto inst = testing::make_random_instance(seed);
    auto& r = inst.profile.runtime_calibration;
    r = {1, 5, 1.0 + 0.5 * static_cast<double>(seed % 3), {}};
    for (size_t k = 0; k < inst.profile.microbatch_sizes.size(); ++k)
      r.per_microbatch.push_back(
          {inst.profile.microbatch_sizes[k], 1.0, 2.0, 1.0 + 0.05 * static_cast<double>((seed + k) % 5)});
    if (testing::plan_predicts_its_replay(inst)) ++compared;
  }
  CHECK(compared > 20);
}

TEST_CASE("run_profile on the cpu calibrates the runtime at every microbatch size") {
  const profiler::ProfileOptions o = test::small_profile_options();
  const schemas::Profile p = profiler::run_profile(o, {});
  const schemas::RuntimeCalibration& r = p.runtime_calibration;
  REQUIRE(r.per_microbatch.size() == 2);
  REQUIRE(r.few < r.many);
  double update = 0;
  for (const auto& l : p.layers) update += l.update_ms;
  std::vector<double> per_step;
  for (size_t k = 0; k < 2; ++k) {
    const auto& c = r.per_microbatch[k];
    CAPTURE(k);
    CHECK(c.microbatch == o.microbatches[k]);
    double compute = 0;
    for (const auto& l : p.layers) compute += l.per_microbatch[k].fwd_ms + l.per_microbatch[k].bwd_ms;
    const double per_microbatch = (c.many_step_ms - c.few_step_ms) / static_cast<double>(r.many - r.few);
    CHECK(c.compute_scale == doctest::Approx(per_microbatch / compute).epsilon(1e-12));
    CHECK(c.compute_scale > 0.0);
    CHECK(c.compute_scale <= schemas::kMaxRuntimeScale);
    per_step.push_back(c.few_step_ms - static_cast<double>(r.few) * per_microbatch);
  }
  // The median of two per-step times is their mean.
  CHECK(r.update_scale == doctest::Approx(std::max(0.0, 0.5 * (per_step[0] + per_step[1])) / update).epsilon(1e-12));
  CHECK(schemas::parse_profile(schemas::dump_profile(p)).runtime_calibration.per_microbatch.size() == 2);
  CHECK(p.provenance.notes.find("runtime_calibration") != std::string::npos);
}

TEST_CASE("run_profile leaves the calibration out when the options turn it off, and its notes say so") {
  profiler::ProfileOptions o = test::small_profile_options();
  o.runtime_calibration = false;
  const schemas::Profile p = profiler::run_profile(o, {});
  CHECK_FALSE(p.runtime_calibration.present());
  CHECK(p.provenance.notes.find("runtime_calibration: not measured") != std::string::npos);
  CHECK(schemas::dump_profile(p).find("\"runtime_calibration\"") == std::string::npos);
  CHECK(planner::runtime_costs_note(p).rfind("note: the profile has no runtime_calibration", 0) == 0);
}
