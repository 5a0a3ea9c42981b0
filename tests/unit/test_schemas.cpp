// Tests of pd2bw_schemas: round trips and determinism of the three formats, a table of bad inputs
// (each must fail with a SchemaError naming the right JSON pointer), that every shipped example
// validates, and the writers' golden fixtures. The helpers (byte sizes, SHA-256, files) are tested in
// test_schemas_files.cpp, the optional keys and their versions in test_schemas_optional.cpp.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "schema_samples.hpp"
#include "schema_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"
#include "pd2bw/schemas/validate.hpp"

namespace s = pd2bw::schemas;
using nlohmann::json;

namespace {

using pd2bw::testing::check_prefix;
using pd2bw::testing::sample_cluster;
using pd2bw::testing::sample_plan;
using pd2bw::testing::sample_profile;
using pd2bw::testing::schema_error_of;

enum class Kind { profile, cluster, plan };

std::string sample_text(Kind kind) {
  switch (kind) {
    case Kind::profile: return s::dump_profile(sample_profile());
    case Kind::cluster: return s::dump_cluster(sample_cluster());
    case Kind::plan: return s::dump_plan(sample_plan());
  }
  return {};
}

void parse_as(Kind kind, const std::string& text) {
  switch (kind) {
    case Kind::profile: (void)s::parse_profile(text); break;
    case Kind::cluster: (void)s::parse_cluster(text); break;
    case Kind::plan: (void)s::parse_plan(text); break;
  }
}

// Sets the value at a JSON pointer, or erases the key when `value` is discarded.
std::function<void(json&)> set(const std::string& pointer, json value) {
  return [pointer, value](json& j) {
    const json::json_pointer ptr(pointer);
    if (value.is_discarded()) {
      json& parent = j[ptr.parent_pointer()];
      if (parent.is_array()) {
        parent.erase(std::stoul(ptr.back()));
      } else {
        parent.erase(ptr.back());
      }
    } else {
      j[ptr] = value;
    }
  };
}
const json kErase = json(json::value_t::discarded);

struct BadCase {
  const char* name;
  Kind kind;
  std::function<void(json&)> mutate;
  const char* prefix;
};

}  // namespace

TEST_CASE("round trips are exact and output is deterministic") {
  const s::Profile profile = sample_profile();
  const std::string text = s::dump_profile(profile);
  CHECK(text == s::dump_profile(profile));
  CHECK(text.back() == '\n');
  const s::Profile back = s::parse_profile(text);
  CHECK(s::dump_profile(back) == text);
  CHECK(back.layers[2].per_microbatch[1].bwd_ms == profile.layers[2].per_microbatch[1].bwd_ms);
  CHECK(back.layers.size() == 4);
  CHECK(back.model.dtype == s::DType::bf16);

  const std::string ctext = s::dump_cluster(sample_cluster());
  const s::Cluster cluster = s::parse_cluster(ctext);
  CHECK(s::dump_cluster(cluster) == ctext);
  CHECK(cluster.total_devices() == 4);

  const std::string ptext = s::dump_plan(sample_plan());
  CHECK(ptext == s::dump_plan(sample_plan()));
  const s::Plan plan = s::parse_plan(ptext);
  CHECK(s::dump_plan(plan) == ptext);
  CHECK(plan.stages[0].recompute);
  CHECK(plan.alternatives[0].placement == s::Placement::stages_inner);
  CHECK(plan.predictions.samples_per_s == sample_plan().predictions.samples_per_s);
}


TEST_CASE("writers put keys in the documented order") {
  const json j = json::parse(s::dump_plan(sample_plan()));
  const std::string text = s::dump_plan(sample_plan());
  CHECK(text.find("\"schema\"") < text.find("\"schema_version\""));
  CHECK(text.find("\"schema_version\"") < text.find("\"provenance\""));
  CHECK(text.find("\"stages\"") < text.find("\"predictions\""));
  CHECK(j.at("cluster").size() == 2);  // device and levels only, no schema keys
  const std::string ctext = s::dump_cluster(sample_cluster());
  CHECK(ctext.find("provenance") == std::string::npos);
}

TEST_CASE("a cluster file may carry provenance") {
  json j = json::parse(s::dump_cluster(sample_cluster()));
  j["provenance"] = json::parse(R"({"tool":"x","version":"1","git_sha":"unknown","command_line":"","notes":""})");
  CHECK(s::parse_cluster(j.dump()).total_devices() == 4);
}

TEST_CASE("bad inputs name the offending JSON pointer") {
  using P = Kind;
  const std::vector<BadCase> cases = {
      // profile
      {"wrong type", P::profile, set("/device/memory_bytes", "16GiB"),
       "/device/memory_bytes: expected an integer, got string"},
      {"float for integer", P::profile, set("/model/heads", 1.5), "/model/heads: expected an integer"},
      {"bool for integer", P::profile, set("/layers/0/param_bytes", true), "/layers/0/param_bytes: expected an integer"},
      {"string for number", P::profile, set("/links/0/p2p_gbps", "fast"), "/links/0/p2p_gbps: expected a number"},
      {"negative bytes", P::profile, set("/layers/1/per_microbatch/0/input_bytes", -1),
       "/layers/1/per_microbatch/0/input_bytes: must be >= 0"},
      {"zero time", P::profile, set("/layers/3/per_microbatch/1/fwd_ms", 0), "/layers/3/per_microbatch/1/fwd_ms: must be > 0"},
      {"negative latency", P::profile, set("/links/0/p2p_latency_ms", -0.5), "/links/0/p2p_latency_ms: must be >= 0"},
      {"unknown key", P::profile, set("/layers/0/per_microbatch/0/foo", 1), "/layers/0/per_microbatch/0/foo: unknown key"},
      {"unknown root key", P::profile, set("/extra", 1), "/extra: unknown key"},
      {"missing key", P::profile, set("/model/heads", kErase), "/model/heads: missing"},
      {"missing provenance", P::profile, set("/provenance", kErase), "/provenance: missing"},
      {"zero layers", P::profile, set("/layers", json::array()), "/layers: must have at least one layer"},
      {"unknown major", P::profile, set("/schema_version", "2.0.0"), "/schema_version: schema version 2.0.0"},
      {"not semver", P::profile, set("/schema_version", "1.0"), "/schema_version: \"1.0\" is not a version"},
      {"wrong kind", P::profile, set("/schema", "pd2bw.plan"), "/schema: this is a plan (pd2bw.plan), not a profile"},
      {"unknown kind", P::profile, set("/schema", "pd2bw.other"), "/schema: expected \"pd2bw.profile\""},
      {"bad dtype", P::profile, set("/model/dtype", "fp8"), "/model/dtype: unknown dtype"},
      {"bad ln", P::profile, set("/model/ln", "sideways"), "/model/ln: is neither \"pre\" nor \"post\""},
      {"ln not a string", P::profile, set("/model/ln", 1), "/model/ln: expected a string"},
      {"tie not a bool", P::profile, set("/model/tie_embeddings", "yes"), "/model/tie_embeddings: expected"},
      {"model zero", P::profile, set("/model/blocks", 0), "/model/blocks: must be > 0"},
      {"device zero memory", P::profile, set("/device/memory_bytes", 0), "/device/memory_bytes: must be > 0"},
      {"too few timings", P::profile, set("/layers/2/per_microbatch/1", kErase),
       "/layers/2/per_microbatch: has 1 entries"},
      {"timing order", P::profile, set("/layers/0/per_microbatch/1/microbatch", 4),
       "/layers/0/per_microbatch/1/microbatch: expected 2"},
      {"sizes not increasing", P::profile, set("/microbatch_sizes", json::array({2, 1})),
       "/microbatch_sizes/1: must be greater"},
      {"no sizes", P::profile, set("/microbatch_sizes", json::array()), "/microbatch_sizes: must list"},
      {"duplicate layer name", P::profile, set("/layers/2/name", "embedding"), "/layers/2/name: duplicate layer name"},
      {"layers not an array", P::profile, set("/layers", json::object()), "/layers: expected an array"},
      {"layer not an object", P::profile, set("/layers/1", 3), "/layers/1: expected an object"},
      // cluster
      {"level size 0", P::cluster, set("/levels/0/size", 0), "/levels/0/size: must be > 0"},
      {"no levels", P::cluster, set("/levels", json::array()), "/levels: must have at least one level"},
      {"too many devices", P::cluster, set("/levels/1/size", int64_t{1} << 62), "/levels/1/size: the product"},
      {"gbps zero", P::cluster, set("/levels/1/allreduce_busbw_gbps", 0), "/levels/1/allreduce_busbw_gbps: must be > 0"},
      {"bad provenance", P::cluster, set("/provenance", json::object({{"tool", "x"}})), "/provenance/"},
      {"missing device", P::cluster, set("/device", kErase), "/device: missing"},
      {"cluster major", P::cluster, set("/schema_version", "0.9.0"), "/schema_version: schema version 0.9.0"},
      // plan
      {"gap between stages", P::plan, set("/stages/1/layer_begin", 3), "/stages/1/layer_begin: expected 2"},
      {"empty stage", P::plan, set("/stages/0/layer_end", 0), "/stages/0/layer_end: must be > 0"},
      {"short cover", P::plan, set("/num_layers", 5), "/stages/1/layer_end: the last stage must end"},
      {"stage index", P::plan, set("/stages/1/index", 0), "/stages/1/index: expected 1"},
      {"depth mismatch", P::plan, set("/depth", 3), "/stages: has 2 stages but /depth is 3"},
      {"m < d for 2bw", P::plan,
       [](json& j) {
         j["microbatches_per_step"] = 1;
         j["global_batch"] = 4;
       },
       "/microbatches_per_step: 2bw needs"},
      {"wrong global batch", P::plan, set("/global_batch", 17), "/global_batch: must equal"},
      {"too few devices", P::plan, set("/cluster/levels/1/size", 1), "/width: width x depth"},
      {"stage rank count", P::plan, set("/stages/0/ranks", json::array({0})), "/stages/0/ranks: has 1 ranks"},
      {"rank order", P::plan, set("/ranks/0/rank", 1), "/ranks/0/rank: expected 0"},
      {"rank table disagrees", P::plan, set("/ranks/1/replica", 0), "/stages/0/ranks/1: rank 1 is stage 0 replica 1"},
      {"placement rule", P::plan, set("/placement", "stages-inner"), "/stages/0/ranks/1: placement stages-inner"},
      {"shared device", P::plan, set("/ranks/1/local_device", 0), "/ranks/1: shares node 0 device 0"},
      {"local device range", P::plan, set("/ranks/3/local_device", 2), "/ranks/3/local_device: must be <"},
      {"bad sha", P::plan, set("/profile_sha256", "ABC"), "/profile_sha256: must be 64"},
      {"bad schedule", P::plan, set("/schedule", "1f1b"), "/schedule: unknown schedule"},
      {"plan bad ln", P::plan, set("/model/ln", "Post"), "/model/ln: is neither"},
      {"bad placement", P::plan, set("/alternatives/0/placement", "diagonal"),
       "/alternatives/0/placement: unknown placement"},
      {"recompute not bool", P::plan, set("/stages/0/recompute", 1), "/stages/0/recompute: expected true or false"},
      {"schema inside cluster", P::plan, set("/cluster/schema", "pd2bw.cluster"), "/cluster/schema: unknown key"},
      {"bottleneck range", P::plan, set("/predictions/bottleneck_stage", 2), "/predictions/bottleneck_stage: must name"},
      {"bubble fraction", P::plan, set("/predictions/bubble_fraction", 1.5), "/predictions/bubble_fraction: must be <= 1"},
      {"alternative time", P::plan, set("/alternatives/0/step_ms", -1.0), "/alternatives/0/step_ms: must be > 0"},
      {"memory negative", P::plan, set("/stages/1/memory/stash_bytes", -5), "/stages/1/memory/stash_bytes: must be >= 0"},
      {"missing memory key", P::plan, set("/stages/1/memory/dominant", kErase), "/stages/1/memory/dominant: missing"},
      {"plan kind", P::plan, set("/schema", "pd2bw.cluster"), "/schema: this is a cluster (pd2bw.cluster), not a plan"},
      {"manifest as plan", P::plan, set("/schema", "pd2bw.checkpoint"),
       "/schema: this is a checkpoint manifest (pd2bw.checkpoint), not a plan"},
  };
  for (const BadCase& c : cases) {
    SUBCASE(c.name) {
      json j = json::parse(sample_text(c.kind));
      c.mutate(j);
      check_prefix(schema_error_of([&] { parse_as(c.kind, j.dump(2)); }), c.prefix);
    }
  }
}

TEST_CASE("bad JSON text is rejected at the root") {
  const std::string text = sample_text(Kind::profile);
  const std::string truncated = text.substr(0, text.size() / 2);
  check_prefix(schema_error_of([&] { (void)s::parse_profile(truncated); }), "(root): not valid JSON: ");
  CHECK(schema_error_of([&] { (void)s::parse_profile(truncated); }).find("byte") != std::string::npos);
  check_prefix(schema_error_of([] { (void)s::parse_cluster(""); }), "(root): not valid JSON");
  check_prefix(schema_error_of([] { (void)s::parse_plan("[1, 2]"); }), "(root): expected an object, got array");

  // A number too large for a double would become infinity; it must not get through.
  json j = json::parse(text);
  j["layers"][0]["per_microbatch"][0]["fwd_ms"] = 12345.5;
  std::string huge = j.dump();
  huge.replace(huge.find("12345.5"), 7, "1e999");
  check_prefix(schema_error_of([&] { (void)s::parse_profile(huge); }), "(root): not valid JSON");

  // nlohmann keeps the last of two equal keys; pd2bw refuses the file instead.
  std::string dup = text;
  dup.replace(dup.find("\"kind\": \"gpt\""), 13, R"("kind": "gpt", "kind": "gpt")");
  check_prefix(schema_error_of([&] { (void)s::parse_profile(dup); }), "/model/kind: duplicate key");
  std::string dup_in_array = text;
  const auto at = dup_in_array.find("\"name\": \"block.0\"");
  dup_in_array.replace(at, 17, R"("name": "block.0", "name": "x")");
  check_prefix(schema_error_of([&] { (void)s::parse_profile(dup_in_array); }), "/layers/1/name: duplicate key");
}

TEST_CASE("errors carry hints and the usage exit code") {
  try {
    json j = json::parse(sample_text(Kind::profile));
    j["schema_version"] = "2.0.0";
    (void)s::parse_profile(j.dump());
    FAIL("no error");
  } catch (const pd2bw::SchemaError& e) {
    CHECK(std::string(e.what()).find("1") != std::string::npos);
    CHECK(!e.hint().empty());
    CHECK(e.code() == pd2bw::ExitCode::usage);
  }
}

TEST_CASE("validate_document recognises each kind") {
  const s::ValidationReport p = s::validate_document(sample_text(Kind::profile));
  CHECK(p.schema == "pd2bw.profile");
  CHECK(p.schema_version == "1.0.0");
  CHECK(p.summary.find("gpt-tiny") != std::string::npos);
  CHECK(s::validate_document(sample_text(Kind::cluster)).schema == "pd2bw.cluster");
  CHECK(s::validate_document(sample_text(Kind::plan)).schema == "pd2bw.plan");
  check_prefix(schema_error_of([] { (void)s::validate_document(R"({"schema": "pd2bw.other"})"); }),
               "/schema: unknown kind");
  check_prefix(schema_error_of([] { (void)s::validate_document("{}"); }), "/schema: missing");
  json bad = json::parse(sample_text(Kind::plan));
  bad["width"] = 3;
  check_prefix(schema_error_of([&] { (void)s::validate_document(bad.dump()); }), "/stages/0/ranks: has 2 ranks");
}

TEST_CASE("every shipped example validates") {
  const std::filesystem::path dir = std::filesystem::path(PD2BW_SOURCE_DIR) / "schemas" / "examples";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    INFO("file: " << entry.path().string());
    const std::string text = s::read_text_file(entry.path().string());
    CHECK_NOTHROW((void)s::validate_document(text));
    ++count;
  }
  CHECK(count >= 2);
}

// The writers' output is pinned by fixture files, which tests/schema/test_json_schemas.py also checks
// against the JSON Schemas (so the schemas accept exactly what the writers emit).
TEST_CASE("writer output matches the golden fixtures") {
  const std::filesystem::path dir = std::filesystem::path(PD2BW_SOURCE_DIR) / "tests" / "schema" / "fixtures";
  const bool update = std::getenv("PD2BW_UPDATE_FIXTURES") != nullptr;
  for (Kind kind : {Kind::profile, Kind::cluster, Kind::plan}) {
    const char* names[] = {"writer.profile.json", "writer.cluster.json", "writer.plan.json"};
    const std::string path = (dir / names[static_cast<int>(kind)]).string();
    INFO("fixture: " << path << " (rerun with PD2BW_UPDATE_FIXTURES=1 after an intended format change)");
    if (update) s::write_text_file(path, sample_text(kind));
    CHECK(s::read_text_file(path) == sample_text(kind));
  }
}
