// The profile's runtime_calibration.split (schema 1.5): read, written and refused like the other fields;
// priced by the planner as the closed form says (the layers before split.layer at the first stage's
// scales, the others at the second's; a boundary inside a node at the runtime's measured work); the
// prediction stays the replay of the written plan; without a split the plans are those of 1.4; and
// run_profile derives the split's numbers from its own runs as RuntimeSplit says.
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

// The test cluster's innermost p2p curve, at the tiny profile's boundary sizes (b = 1, 2, 4, 8).
const std::vector<std::pair<int64_t, double>> kCurve = {{16384, 0.02}, {32768, 0.03}, {65536, 0.05}, {131072, 0.09}};

json tiny_profile_json() {
  std::ifstream f(std::string(PD2BW_SOURCE_DIR) + "/schemas/examples/gpt-tiny.profile.json");
  std::stringstream s;
  s << f.rdbuf();
  return json::parse(s.str());
}

// A 1.4 calibration (compute_scale 1.5, update_scale 2) and, unless `split` is false, a split at layer 3
// (embedding, block.0, block.1 | block.2, block.3, head) with scales 1.1 and 1.3 at every size, update
// scales 3 and 5, and boundary_ms equal to the curve's time at each size (so a quarter of it per
// message: the link's ratio is 0.25 at every size). Every layer gets update_ms 0.25.
json with_split(json p, bool split = true) {
  json entries = json::array(), splits = json::array();
  for (size_t k = 0; k < p["microbatch_sizes"].size(); ++k) {
    entries.push_back({{"microbatch", p["microbatch_sizes"][k]}, {"step_ms", {2.0, 9.0}}, {"compute_scale", 1.5}});
    splits.push_back({{"microbatch", p["microbatch_sizes"][k]},
                      {"step_ms", {{1.0, 4.0}, {1.5, 5.0}}},
                      {"compute_scales", {1.1, 1.3}},
                      {"boundary_ms", kCurve[k].second}});
  }
  for (auto& layer : p["layers"]) layer["update_ms"] = 0.25;
  p["runtime_calibration"] = {{"microbatches", {1, 5}}, {"update_scale", 2.0}, {"per_microbatch", entries}};
  if (split)
    p["runtime_calibration"]["split"] = {
        {"layer", 3}, {"microbatches", {2, 6}}, {"update_scales", {3.0, 5.0}}, {"per_microbatch", splits}};
  return p;
}

// testing::one_node_cluster with kCurve as its p2p curve.
schemas::Cluster node_with_curve() {
  schemas::Cluster c = testing::one_node_cluster();
  for (const auto& [bytes, ms] : kCurve) c.levels[0].p2p_curve.push_back({bytes, ms});
  return c;
}

// 2bw, b = 2, m = 16 at depth d: the plan (read back from its file) and the replay of it.
std::pair<schemas::Plan, double> plan_and_replay(const schemas::Profile& profile, int64_t depth) {
  planner::Constraints k;
  k.global_batch = 32;
  k.schedule = schemas::Schedule::two_bw;
  k.microbatch = 2;
  k.depth = depth;
  k.width = 1;
  k.reserve_bytes = 0;
  auto got = testing::written_plan_and_replay(profile, planner::CostModel(profile, node_with_curve(), k));
  REQUIRE(got.has_value());
  return std::move(*got);
}

std::string error_with(const std::function<void(json&)>& mutate) {
  json p = with_split(tiny_profile_json());
  mutate(p);
  return testing::schema_error_of([&] { (void)schemas::parse_profile(p.dump()); });
}

// fwd + bwd at b = 2 (index 1) of layers [begin, end).
double compute_at_b2(const schemas::Profile& p, size_t begin, size_t end) {
  double sum = 0;
  for (size_t j = begin; j < end; ++j) sum += p.layers[j].per_microbatch[1].fwd_ms + p.layers[j].per_microbatch[1].bwd_ms;
  return sum;
}

}  // namespace

TEST_CASE("runtime_calibration.split is read and written back, at schema 1.5.0; without it the file stays 1.4.0") {
  const schemas::Profile p = schemas::parse_profile(with_split(tiny_profile_json()).dump());
  const schemas::RuntimeSplit& s = p.runtime_calibration.split;
  REQUIRE(s.present());
  CHECK(s.layer == 3);
  CHECK(s.few == 2);
  CHECK(s.many == 6);
  CHECK(s.update_scales[1] == 5.0);
  REQUIRE(s.per_microbatch.size() == 4);
  CHECK(s.per_microbatch[2].microbatch == 4);
  CHECK(s.per_microbatch[2].step_ms[1][0] == 1.5);
  CHECK(s.per_microbatch[2].compute_scales[1] == 1.3);
  CHECK(s.per_microbatch[2].boundary_ms == 0.05);
  const std::string text = schemas::dump_profile(p);
  CHECK(json::parse(text)["schema_version"] == "1.5.0");
  CHECK(schemas::dump_profile(schemas::parse_profile(text)) == text);
  const schemas::Profile old = schemas::parse_profile(with_split(tiny_profile_json(), false).dump());
  CHECK_FALSE(old.runtime_calibration.split.present());
  CHECK(json::parse(schemas::dump_profile(old))["schema_version"] == "1.4.0");
}

TEST_CASE("a bad runtime_calibration.split is refused with its JSON pointer") {
  using testing::check_prefix;
  const std::string split = "/runtime_calibration/split";
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["split"]["layer"] = 6; }),
               split + "/layer: must be below the layer count 6");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["split"]["layer"] = 0; }), split + "/layer: must be > 0");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["split"]["microbatches"] = {1, 5}; }),
               split + "/microbatches: must hold 2 microbatch counts, 2 <=");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["split"]["update_scales"] = {1.0}; }),
               split + "/update_scales: must hold 2 numbers");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["split"]["per_microbatch"][1]["compute_scales"][1] = 4.5; }),
               split + "/per_microbatch/1/compute_scales/1: must be <= 4");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["split"]["per_microbatch"][0]["boundary_ms"] = -0.1; }),
               split + "/per_microbatch/0/boundary_ms: must be >= 0");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["split"]["per_microbatch"][0]["step_ms"] = {{1.0, 2.0}}; }),
               split + "/per_microbatch/0/step_ms: must hold 2 entries");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["split"]["per_microbatch"].erase(3); }),
               split + "/per_microbatch: has 3 entries but /microbatch_sizes has 4");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["split"]["per_microbatch"][3]["microbatch"] = 16; }),
               split + "/per_microbatch/3/microbatch: expected 8");
  check_prefix(error_with([](json& p) { p["runtime_calibration"]["split"]["cut"] = 3; }), split);
}

TEST_CASE("the planner prices each side of the split at its own scales, and a boundary at the runtime's work") {
  const schemas::Profile p = schemas::parse_profile(with_split(tiny_profile_json()).dump());
  const double m = 16, first = compute_at_b2(p, 0, 3), second = compute_at_b2(p, 3, 6);
  const auto [one, one_replay] = plan_and_replay(p, 1);
  // d = 1: m (1.1 first + 1.3 second) + 3 x three layers' update_ms + 5 x the other three's.
  CHECK(one.predictions.step_ms == doctest::Approx(m * (1.1 * first + 1.3 * second) + 3 * 0.75 + 5 * 0.75).epsilon(1e-12));
  CHECK(one_replay == doctest::Approx(one.predictions.step_ms).epsilon(1e-12));
  // d = 2: every stage pays boundary_ms / 2 at b = 2 per microbatch for its one boundary, not the link's
  // 2 x 0.03; the plan's cluster keeps the measured curve.
  const auto [two, two_replay] = plan_and_replay(p, 2);
  REQUIRE(two.stages.size() == 2);
  for (const auto& s : two.stages) CHECK(s.p2p_ms == doctest::Approx(0.03 / 2).epsilon(1e-12));
  const int64_t cut = two.stages[1].layer_begin;
  const auto scaled = [&](size_t b, size_t e) {
    return 1.1 * compute_at_b2(p, b, std::min<size_t>(e, 3)) + 1.3 * compute_at_b2(p, std::max<size_t>(b, 3), e);
  };
  CHECK(two.stages[0].compute_ms == doctest::Approx(scaled(0, static_cast<size_t>(cut))).epsilon(1e-12));
  CHECK(two.stages[1].compute_ms == doctest::Approx(scaled(static_cast<size_t>(cut), 6)).epsilon(1e-12));
  CHECK(two.cluster.levels[0].p2p_curve[1].ms == 0.03);
  CHECK(two_replay == doctest::Approx(two.predictions.step_ms).epsilon(1e-12));
  CHECK(planner::runtime_costs_note(p).find("before/from its split at layer 3 (b=1 x1.100/1.300 boundary 0.020 ms") != std::string::npos);
}

TEST_CASE("without a split the planner prices as 1.4 did: one compute_scale, the link's p2p") {
  const schemas::Profile p = schemas::parse_profile(with_split(tiny_profile_json(), false).dump());
  const auto [one, one_replay] = plan_and_replay(p, 1);
  CHECK(one.predictions.step_ms == doctest::Approx(16 * 1.5 * compute_at_b2(p, 0, 6) + 2 * 1.5).epsilon(1e-12));
  const auto [two, two_replay] = plan_and_replay(p, 2);
  for (const auto& s : two.stages) CHECK(s.p2p_ms == doctest::Approx(2 * 0.03).epsilon(1e-12));
  const schemas::ClusterLevel node = node_with_curve().levels[0];
  const auto curve = planner::runtime_p2p_curve(p, node);
  REQUIRE(curve.size() == node.p2p_curve.size());
  for (size_t k = 0; k < curve.size(); ++k) CHECK(curve[k].ms == node.p2p_curve[k].ms);
  CHECK(planner::runtime_costs_note(p).find("split") == std::string::npos);
}

TEST_CASE("with a split the planner's predictions are still the replay of its plan") {
  int64_t compared = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    auto inst = testing::make_random_instance(seed);
    const auto n = static_cast<int64_t>(inst.profile.layers.size());
    if (n < 2) continue;
    // The one-chunk schedules (the split prices layers and links, not chunk placement).
    const schemas::Schedule pinned[] = {schemas::Schedule::two_bw, schemas::Schedule::flush, schemas::Schedule::gpipe,
                                        schemas::Schedule::two_bw};
    inst.constraints.schedule = pinned[seed % 4];
    auto& r = inst.profile.runtime_calibration;
    r = {1, 5, 1.5, {}, {}};
    r.split = {1 + static_cast<int64_t>(seed) % (n - 1), 2, 6, {1.0 + 0.25 * static_cast<double>(seed % 3), 2.0}, {}};
    for (size_t k = 0; k < inst.profile.microbatch_sizes.size(); ++k) {
      r.per_microbatch.push_back({inst.profile.microbatch_sizes[k], 1.0, 2.0, 1.1});
      r.split.per_microbatch.push_back({inst.profile.microbatch_sizes[k], {{{1.0, 2.0}, {1.0, 2.0}}},
                                        {0.9 + 0.05 * static_cast<double>((seed + k) % 5), 1.2}, 0.01 * static_cast<double>(k)});
    }
    if (testing::plan_predicts_its_replay(inst)) ++compared;
  }
  CHECK(compared > 20);
}

TEST_CASE("run_profile's split: the boundary and the scales follow from its runs' steps") {
  const profiler::ProfileOptions o = test::small_profile_options();
  const schemas::Profile p = profiler::run_profile(o, {});
  const schemas::RuntimeCalibration& r = p.runtime_calibration;
  const schemas::RuntimeSplit& s = r.split;
  REQUIRE(s.present());
  REQUIRE(s.per_microbatch.size() == 2);
  const size_t n = p.layers.size();
  CHECK(s.layer == static_cast<int64_t>(n / 2));
  REQUIRE(s.few < s.many);
  for (size_t k = 0; k < 2; ++k) {
    CAPTURE(k);
    const auto& e = s.per_microbatch[k];
    const auto& whole = r.per_microbatch[k];
    CHECK(e.microbatch == o.microbatches[k]);
    const double span = static_cast<double>(s.many - s.few);
    const double pm0 = (e.step_ms[0][1] - e.step_ms[0][0]) / span, pm1 = (e.step_ms[1][1] - e.step_ms[1][0]) / span;
    const double w = (whole.many_step_ms - whole.few_step_ms) / static_cast<double>(r.many - r.few);
    CHECK(e.boundary_ms == doctest::Approx(std::max(0.0, pm0 + pm1 - w)).epsilon(1e-12));
    double c0 = 0, c1 = 0;
    for (size_t j = 0; j < n; ++j)
      (j < n / 2 ? c0 : c1) += p.layers[j].per_microbatch[k].fwd_ms + p.layers[j].per_microbatch[k].bwd_ms;
    const auto expect = [](double v) { return std::clamp(v, 1e-3, schemas::kMaxSplitScale); };
    CHECK(e.compute_scales[0] == doctest::Approx(expect((pm0 - 0.5 * e.boundary_ms) / c0)).epsilon(1e-12));
    CHECK(e.compute_scales[1] == doctest::Approx(expect((pm1 - 0.5 * e.boundary_ms) / c1)).epsilon(1e-12));
  }
  const std::string text = schemas::dump_profile(p);
  CHECK(json::parse(text)["schema_version"] == "1.5.0");
  CHECK(schemas::dump_profile(schemas::parse_profile(text)) == text);
}
