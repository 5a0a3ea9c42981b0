// Tests of the optional measurement fields (layer timing spread, recompute time, computed stash,
// optimizer bytes, measured link curves): round trips and the readers' rules, byte-identical files
// without them, the pinned writer fixtures the JSON Schema test validates, and the cost model's reading
// of p2p and allreduce curves against hand-computed interpolation.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schema_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace s = pd2bw::schemas;
namespace pl = pd2bw::planner;
using nlohmann::json;

namespace {

const std::filesystem::path kFixtures = std::filesystem::path(PD2BW_SOURCE_DIR) / "tests" / "schema" / "fixtures";

s::LinkLevel link(const char* name, double gbps, double latency_ms, double busbw_gbps) {
  s::LinkLevel l;
  l.level = name;
  l.p2p_gbps = gbps;
  l.p2p_latency_ms = latency_ms;
  l.allreduce_busbw_gbps = busbw_gbps;
  return l;
}

// A two-layer profile with every optional field set (of a kind pd2bw plans but does not train: two layers
// are not a gpt's embedding, blocks and head).
s::Profile curves_profile() {
  s::Profile p;
  p.provenance = {"pd2bw", "0.1.0", "abc123", "pd2bw profile --links", "made in a unit test"};
  p.model = {"synthetic", "curves", 1, 64, 4, 32, 100, s::DType::bf16};
  p.device = {"NVIDIA H200", int64_t{16} << 30};
  p.microbatch_sizes = {1, 2};
  for (int i = 0; i < 2; ++i) {
    s::LayerProfile layer{.name = i == 0 ? "embedding" : "block.0", .kind = i == 0 ? "embedding" : "block",
                          .param_bytes = 2000 * (i + 1), .per_microbatch = {}};
    for (int64_t b : p.microbatch_sizes) {
      const double x = static_cast<double>(b);
      s::LayerTiming t{.microbatch = b, .fwd_ms = 0.25 * x, .bwd_ms = 0.5 * x, .input_bytes = 4096 * b,
                       .output_bytes = 4096 * b, .stash_bytes = 16384 * b};
      t.fwd_ms_min = 0.2 * x;
      t.fwd_ms_p90 = 0.3 * x;
      t.bwd_ms_min = 0.45 * x;
      t.bwd_ms_p90 = 0.625 * x;
      t.recompute_ms = 0.26 * x;
      t.stash_bytes_computed = 16000 * b;
      layer.per_microbatch.push_back(t);
    }
    layer.optimizer_bytes = 8000 * (i + 1);
    p.layers.push_back(layer);
  }
  s::LinkLevel node = link("node", 400.0, 0.004, 350.0);
  node.p2p_curve = {{1024, 0.006}, {1 << 20, 0.01}, {1 << 26, 0.17}};
  node.allreduce_curve = {{1 << 20, 0.02}, {1 << 26, 0.4}};
  node.allreduce_ranks = 8;
  s::LinkLevel net = link("cluster", 40.0, 0.02, 35.0);
  net.p2p_curve = {{65536, 0.03}};
  p.links = {node, net};
  return p;
}

s::ClusterLevel level(const char* name, int64_t size, double gbps, double latency_ms, double busbw_gbps) {
  s::ClusterLevel l;
  l.name = name;
  l.size = size;
  l.p2p_gbps = gbps;
  l.p2p_latency_ms = latency_ms;
  l.allreduce_busbw_gbps = busbw_gbps;
  return l;
}

s::Cluster curves_cluster() {
  s::Cluster c;
  c.device = {"NVIDIA H200", int64_t{16} << 30};
  s::ClusterLevel node = level("node", 4, 400.0, 0.004, 350.0);
  node.p2p_curve = {{4096, 0.005}, {1 << 24, 0.05}};
  node.allreduce_curve = {{1 << 24, 0.125}};
  node.allreduce_ranks = 4;
  c.levels = {node, level("cluster", 2, 40.0, 0.02, 35.0)};
  return c;
}

void check_points(const std::vector<s::LinkPoint>& a, const std::vector<s::LinkPoint>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    CHECK(a[k].bytes == b[k].bytes);
    CHECK(a[k].ms == b[k].ms);
  }
}

using pd2bw::testing::check_prefix;
using pd2bw::testing::schema_error_of;

// Writes the fixture when PD2BW_UPDATE_FIXTURES is set, then checks the text equals it.
void check_fixture(const std::string& name, const std::string& text) {
  const std::string path = (kFixtures / name).string();
  INFO("fixture: " << path << " (rerun with PD2BW_UPDATE_FIXTURES=1 after an intended format change)");
  if (std::getenv("PD2BW_UPDATE_FIXTURES") != nullptr) s::write_text_file(path, text);
  CHECK(s::read_text_file(path) == text);
}

}  // namespace

TEST_CASE("a profile with every optional field round-trips field by field") {
  const s::Profile p = curves_profile();
  const std::string text = s::dump_profile(p);
  CHECK(s::dump_profile(p) == text);  // deterministic
  const s::Profile q = s::parse_profile(text);
  CHECK(s::dump_profile(q) == text);
  REQUIRE(q.layers.size() == p.layers.size());
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    CHECK(q.layers[i].optimizer_bytes == p.layers[i].optimizer_bytes);
    REQUIRE(q.layers[i].per_microbatch.size() == p.layers[i].per_microbatch.size());
    for (std::size_t k = 0; k < p.layers[i].per_microbatch.size(); ++k) {
      const auto &a = p.layers[i].per_microbatch[k], &b = q.layers[i].per_microbatch[k];
      CHECK(b.fwd_ms_min == a.fwd_ms_min);
      CHECK(b.fwd_ms_p90 == a.fwd_ms_p90);
      CHECK(b.bwd_ms_min == a.bwd_ms_min);
      CHECK(b.bwd_ms_p90 == a.bwd_ms_p90);
      CHECK(b.recompute_ms == a.recompute_ms);
      CHECK(b.stash_bytes_computed == a.stash_bytes_computed);
      CHECK(b.stash_bytes == a.stash_bytes);
    }
  }
  REQUIRE(q.links.size() == p.links.size());
  for (std::size_t i = 0; i < p.links.size(); ++i) {
    check_points(q.links[i].p2p_curve, p.links[i].p2p_curve);
    check_points(q.links[i].allreduce_curve, p.links[i].allreduce_curve);
    CHECK(q.links[i].allreduce_ranks == p.links[i].allreduce_ranks);
  }
  check_fixture("curves.profile.json", text);
}

TEST_CASE("a cluster with curves round-trips field by field") {
  const s::Cluster c = curves_cluster();
  const std::string text = s::dump_cluster(c);
  CHECK(s::dump_cluster(c) == text);
  const s::Cluster d = s::parse_cluster(text);
  CHECK(s::dump_cluster(d) == text);
  REQUIRE(d.levels.size() == c.levels.size());
  for (std::size_t i = 0; i < c.levels.size(); ++i) {
    check_points(d.levels[i].p2p_curve, c.levels[i].p2p_curve);
    check_points(d.levels[i].allreduce_curve, c.levels[i].allreduce_curve);
    CHECK(d.levels[i].allreduce_ranks == c.levels[i].allreduce_ranks);
  }
  check_fixture("curves.cluster.json", text);
}

TEST_CASE("files without the optional fields read and write back byte-identically") {
  std::vector<std::filesystem::path> files = {kFixtures / "writer.profile.json", kFixtures / "writer.cluster.json"};
  const auto examples = std::filesystem::path(PD2BW_SOURCE_DIR) / "schemas" / "examples";
  for (const auto& e : std::filesystem::directory_iterator(examples))
    if (e.path().extension() == ".json") files.push_back(e.path());
  int checked = 0;
  for (const auto& path : files) {
    INFO("file: " << path.string());
    const std::string text = s::read_text_file(path.string());
    const std::string kind = json::parse(text).at("schema").get<std::string>();
    if (kind == "pd2bw.profile") {
      const s::Profile p = s::parse_profile(text);
      for (const auto& l : p.links) CHECK((l.p2p_curve.empty() && l.allreduce_ranks == 0));
      CHECK(s::dump_profile(p) == text);
      ++checked;
    } else if (kind == "pd2bw.cluster" && !json::parse(text).contains("provenance")) {
      CHECK(s::dump_cluster(s::parse_cluster(text)) == text);  // pd2bw writes no cluster provenance
      ++checked;
    }
  }
  CHECK(checked >= 2);
}

TEST_CASE("the optional fields' rules fail with the JSON pointer") {
  const json good = json::parse(s::dump_profile(curves_profile()));
  struct Case {
    std::function<void(json&)> edit;
    std::string prefix;
  };
  const std::string t0 = "/layers/0/per_microbatch/1/";
  const std::vector<Case> cases = {
      {[](json& j) { j["layers"][0]["per_microbatch"][1]["fwd_ms_min"] = 0; }, t0 + "fwd_ms_min: must be > 0"},
      {[](json& j) { j["layers"][0]["per_microbatch"][1]["fwd_ms_min"] = 0.9; }, t0 + "fwd_ms_min: must be <= fwd_ms"},
      {[](json& j) { j["layers"][0]["per_microbatch"][1]["fwd_ms_p90"] = 0.4; }, t0 + "fwd_ms_p90: must be >= fwd_ms"},
      {[](json& j) { j["layers"][0]["per_microbatch"][1]["bwd_ms_min"] = 1.5; }, t0 + "bwd_ms_min: must be <= bwd_ms"},
      {[](json& j) { j["layers"][0]["per_microbatch"][1]["bwd_ms_p90"] = 0.5; }, t0 + "bwd_ms_p90: must be >= bwd_ms"},
      {[](json& j) { j["layers"][0]["per_microbatch"][1]["bwd_ms_p90"] = -2; }, t0 + "bwd_ms_p90: must be > 0"},
      {[](json& j) { j["layers"][0]["per_microbatch"][1]["recompute_ms"] = 0; }, t0 + "recompute_ms: must be > 0"},
      {[](json& j) { j["layers"][0]["per_microbatch"][1]["stash_bytes_computed"] = 0; },
       t0 + "stash_bytes_computed: must be > 0"},
      {[](json& j) { j["layers"][0]["per_microbatch"][1]["stash_bytes_computed"] = 1.5; },
       t0 + "stash_bytes_computed: expected an integer"},
      {[](json& j) { j["layers"][1]["optimizer_bytes"] = 0; }, "/layers/1/optimizer_bytes: must be > 0"},
      {[](json& j) { j["links"][0]["p2p_curve"] = json::array(); }, "/links/0/p2p_curve: must have at least one point"},
      {[](json& j) { j["links"][0]["p2p_curve"][2]["bytes"] = 1 << 20; },
       "/links/0/p2p_curve/2/bytes: must be > the previous point's (1048576), got 1048576"},
      {[](json& j) { j["links"][0]["p2p_curve"][0]["bytes"] = 0; }, "/links/0/p2p_curve/0/bytes: must be > 0"},
      {[](json& j) { j["links"][0]["p2p_curve"][1]["ms"] = 0; }, "/links/0/p2p_curve/1/ms: must be > 0"},
      {[](json& j) { j["links"][0]["p2p_curve"][1]["extra"] = 1; }, "/links/0/p2p_curve/1/extra: unknown key"},
      {[](json& j) { j["links"][0]["allreduce_curve"][1]["bytes"] = 1000; },
       "/links/0/allreduce_curve/1/bytes: must be > the previous point's"},
      {[](json& j) { j["links"][0]["allreduce_curve"][0]["ms"] = -1; }, "/links/0/allreduce_curve/0/ms: must be > 0"},
      {[](json& j) { j["links"][0]["allreduce_ranks"] = 1; }, "/links/0/allreduce_ranks: must be >= 2, got 1"},
      {[](json& j) { j["links"][0]["allreduce_ranks"] = 0; }, "/links/0/allreduce_ranks: must be > 0"},
      {[](json& j) { j["links"][0].erase("allreduce_ranks"); }, "/links/0/allreduce_ranks: missing"},
      {[](json& j) { j["links"][1]["allreduce_ranks"] = 4; },
       "/links/1/allreduce_ranks: given without allreduce_curve"},
  };
  for (std::size_t k = 0; k < cases.size(); ++k) {
    INFO("case " << k);
    json bad = good;
    cases[k].edit(bad);
    check_prefix(schema_error_of([&] { (void)s::parse_profile(bad.dump()); }), cases[k].prefix);
  }
  // The cluster levels share the rules (and so does the cluster a plan embeds).
  const json cluster = json::parse(s::dump_cluster(curves_cluster()));
  json bad = cluster;
  bad["levels"][0]["p2p_curve"][1]["bytes"] = 4096;
  check_prefix(schema_error_of([&] { (void)s::parse_cluster(bad.dump()); }),
               "/levels/0/p2p_curve/1/bytes: must be > the previous point's (4096), got 4096");
  bad = cluster;
  bad["levels"][1]["allreduce_curve"] = json::array({{{"bytes", 1024}, {"ms", 0.5}}});
  check_prefix(schema_error_of([&] { (void)s::parse_cluster(bad.dump()); }),
               "/levels/1/allreduce_ranks: missing (required with allreduce_curve)");
}

// ---------------------------------------------------------------------------------------------------
// The cost model.

namespace {

s::Profile tiny_profile() {
  s::Profile p;
  p.model = {"gpt", "t", 1, 8, 1, 4, 16, s::DType::fp32};
  p.device = {"cpu", int64_t{8} << 30};
  p.microbatch_sizes = {1};
  for (const char* name : {"a", "b"}) {
    s::LayerTiming t{.microbatch = 1, .fwd_ms = 1.0, .bwd_ms = 2.0, .input_bytes = 1000, .output_bytes = 1000,
                     .stash_bytes = 1000};
    p.layers.push_back({.name = name, .kind = "block", .param_bytes = 4096, .per_microbatch = {t}});
  }
  return p;
}

s::Cluster one_level(const s::ClusterLevel& only) {
  s::Cluster c;
  c.device = {"cpu", int64_t{8} << 30};
  c.levels = {only};
  return c;
}

}  // namespace

TEST_CASE("p2p time interpolates a measured curve") {
  s::ClusterLevel lv = level("node", 8, 100.0, 0.01, 80.0);
  lv.p2p_curve = {{1000, 0.02}, {3000, 0.06}, {7000, 0.08}};
  const pl::CostModel model(tiny_profile(), one_level(lv), {});
  CHECK(model.p2p_ms(1000, 0) == 0.02);  // at the measured sizes: exactly the points
  CHECK(model.p2p_ms(3000, 0) == 0.06);
  CHECK(model.p2p_ms(7000, 0) == 0.08);
  CHECK(model.p2p_ms(2000, 0) == doctest::Approx(0.04).epsilon(1e-12));  // halfway between 0.02 and 0.06
  CHECK(model.p2p_ms(6000, 0) == doctest::Approx(0.06 + 0.02 * 0.75).epsilon(1e-12));
  CHECK(model.p2p_ms(500, 0) == 0.02);  // below the first point: the first point's ms
  CHECK(model.p2p_ms(0, 0) == 0.02);
  // Above the last point: the last two points' slope, 0.02 ms per 4000 bytes.
  CHECK(model.p2p_ms(11000, 0) == doctest::Approx(0.08 + 0.02).epsilon(1e-12));
  // The partitioner's tables read the same function, at each layer's output.
  CHECK(model.output_p2p_ms(0, 0)[0] == model.p2p_ms(tiny_profile().layers[0].per_microbatch[0].output_bytes, 0));
}

TEST_CASE("a one-point curve extrapolates with its bandwidth; noise never makes bigger messages cheaper") {
  s::ClusterLevel lv = level("node", 8, 100.0, 0.01, 80.0);
  lv.p2p_curve = {{2000, 0.04}};
  const pl::CostModel one(tiny_profile(), one_level(lv), {});
  CHECK(one.p2p_ms(1000, 0) == 0.04);
  CHECK(one.p2p_ms(6000, 0) == doctest::Approx(0.12).epsilon(1e-12));
  lv.p2p_curve = {{1000, 0.05}, {2000, 0.04}, {4000, 0.04}};  // a noisy dip, then a flat tail
  const pl::CostModel noisy(tiny_profile(), one_level(lv), {});
  CHECK(noisy.p2p_ms(1500, 0) == 0.05);
  CHECK(noisy.p2p_ms(4000, 0) == 0.05);
  // The flat tail would mean infinite bandwidth; the last point's average cost stands in.
  CHECK(noisy.p2p_ms(8000, 0) == doctest::Approx(0.05 + 0.05 / 4000 * 4000).epsilon(1e-12));
  for (int64_t b = 0; b < 20000; b += 250) CHECK(noisy.p2p_ms(b, 0) <= noisy.p2p_ms(b + 250, 0));
}

TEST_CASE("a constant-bandwidth curve gives the scalar model's p2p time") {
  const double gbps = 37.5, latency = 0.0125;
  s::ClusterLevel scalar = level("node", 8, gbps, latency, 30.0);
  s::ClusterLevel curved = scalar;
  const std::vector<int64_t> sizes = {1, 999, 4096, 65536, 1 << 20, 123456789, int64_t{1} << 34};
  for (int64_t b : sizes) curved.p2p_curve.push_back({b, static_cast<double>(b) / (gbps * 1e6) + latency});
  const pl::CostModel a(tiny_profile(), one_level(scalar), {});
  const pl::CostModel b(tiny_profile(), one_level(curved), {});
  for (int64_t bytes : sizes) {
    INFO("bytes " << bytes);
    CHECK(std::abs(b.p2p_ms(bytes, 0) - a.p2p_ms(bytes, 0)) <= 1e-9 * a.p2p_ms(bytes, 0));
  }
  // Between and beyond the points too, the line is the same line.
  for (int64_t bytes : {int64_t{50000}, int64_t{3} << 30, int64_t{1} << 36})
    CHECK(b.p2p_ms(bytes, 0) == doctest::Approx(a.p2p_ms(bytes, 0)).epsilon(1e-9));
}

TEST_CASE("allreduce time from a curve measured over R ranks follows the ring formula") {
  const int64_t R = 8;
  s::ClusterLevel lv = level("node", 16, 100.0, 0.01, 80.0);
  lv.allreduce_curve = {{1 << 20, 0.05}, {1 << 24, 0.35}, {1 << 28, 4.6}};
  lv.allreduce_ranks = R;
  const pl::CostModel model(tiny_profile(), one_level(lv), {});
  auto curve_ms = [](double bytes) {  // hand interpolation of the points above
    if (bytes <= (1 << 20)) return 0.05;
    if (bytes <= (1 << 24)) return 0.05 + 0.3 * (bytes - (1 << 20)) / ((1 << 24) - (1 << 20));
    return 0.35 + 4.25 * (bytes - (1 << 24)) / ((1 << 28) - (1 << 24));
  };
  for (int64_t bytes : {int64_t{1000}, int64_t{1} << 20, int64_t{3} << 21, int64_t{1} << 24, int64_t{5} << 26,
                        int64_t{1} << 30}) {
    for (int64_t w : {2, 3, 8, 16}) {
      INFO("bytes " << bytes << ", width " << w);
      const double x = static_cast<double>(bytes), wd = static_cast<double>(w), r = static_cast<double>(R);
      const double busbw = 2.0 * (r - 1.0) / r * x / curve_ms(x);  // bytes per ms
      const double expect = 2.0 * (wd - 1.0) / wd * x / busbw;  // the measured times include the latency
      CHECK(model.allreduce_ms(bytes, w, 0) == doctest::Approx(expect).epsilon(1e-12));
    }
  }
  // Measured width: the curve's own time (its latency is in it, so none is added).
  CHECK(model.allreduce_ms(1 << 24, R, 0) == doctest::Approx(0.35).epsilon(1e-12));
  CHECK(model.allreduce_ms(1 << 24, 1, 0) == 0.0);
  // The search's bound on d stages' allreduces holds for any split of the gradient bytes.
  const int64_t total = int64_t{3} << 26;
  for (int64_t first : {int64_t{0}, int64_t{1} << 20, total / 3, total / 2, total}) {
    const double sum = model.allreduce_ms(first, 4, 0) + model.allreduce_ms(total - first, 4, 0);
    CHECK(model.allreduce_sum_floor(total, 2, 4, 0) <= sum);
  }
}

// CostModel::AllreduceAt (the ring factor worked out once per width and level, which the partitioner keeps
// per candidate) is allreduce_ms bit for bit, with a curve or without; without one it is the ring formula;
// and a stage the partitioner prices pays allreduce_ms of its gradients at the level its replicas span.
TEST_CASE("allreduce_at is allreduce_ms, and the partitioner's stages pay it") {
  const pl::CostModel model(curves_profile(), curves_cluster(), {});
  for (int64_t lv : {0, 1})
    for (int64_t w : {2, 3, 4, 8})
      for (int64_t bytes : {int64_t{0}, int64_t{1000}, int64_t{1} << 24, int64_t{7} << 30}) {
        INFO("level " << lv << ", width " << w << ", bytes " << bytes);
        CHECK(model.allreduce_at(w, lv)(bytes) == model.allreduce_ms(bytes, w, lv));
        if (lv == 1) {
          const double wd = static_cast<double>(w);
          CHECK(model.allreduce_ms(bytes, w, lv) ==
                doctest::Approx(2.0 * (wd - 1.0) / wd * static_cast<double>(bytes) / 35e6 + 0.02).epsilon(1e-12));
        }
      }
  int64_t priced = 0;
  for (s::Placement placement : {s::Placement::replicas_inner, s::Placement::stages_inner}) {
    pl::Candidate c;
    c.schedule = s::Schedule::flush;
    c.depth = 2;
    c.width = 4;
    c.microbatches = 4;
    c.microbatch = 1;
    c.placement = placement;
    for (int64_t stage : {0, 1}) {
      const int64_t begin = stage, end = stage + 1;
      const auto& pp = model.param_prefix();
      const int64_t grads =
          model.static_factors(c.schedule).grads(pp[static_cast<size_t>(end)] - pp[static_cast<size_t>(begin)]);
      CHECK(model.stage_cost(c, stage, begin, end).allreduce_ms ==
            model.allreduce_ms(grads, c.width, model.allreduce_level(c, stage)));
      ++priced;
    }
  }
  CHECK(priced == 4);
}

TEST_CASE("a malformed curve built in code is a usage error in the cost model") {
  s::ClusterLevel lv = level("node", 8, 100.0, 0.01, 80.0);
  lv.p2p_curve = {{2000, 0.04}, {1000, 0.05}};
  CHECK_THROWS_AS(pl::CostModel(tiny_profile(), one_level(lv), {}), pd2bw::UsageError);
  lv.p2p_curve.clear();
  lv.allreduce_curve = {{2000, 0.04}};
  lv.allreduce_ranks = 1;
  CHECK_THROWS_AS(pl::CostModel(tiny_profile(), one_level(lv), {}), pd2bw::UsageError);
}
