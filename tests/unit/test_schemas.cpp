// Tests of pd2bw_schemas: round trips and determinism of the three formats, a table of bad inputs
// (each must fail with a SchemaError naming the right JSON pointer), byte sizes, SHA-256 vectors,
// file helpers, and that every shipped example validates.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "schema_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"
#include "pd2bw/schemas/validate.hpp"
#include "temp_dir.hpp"

namespace s = pd2bw::schemas;
using nlohmann::json;

namespace {

s::Provenance sample_provenance() {
  return {"pd2bw", "0.1.0", "abc123", "pd2bw test --flag \"quoted\"", "made in a unit test"};
}

s::ModelDesc sample_model() {
  return {"gpt", "gpt-tiny", 2, 64, 4, 32, 100, s::DType::bf16};
}

s::Profile sample_profile() {
  s::Profile p;
  p.provenance = sample_provenance();
  p.model = sample_model();
  p.device = {"cpu", int64_t{1} << 31};
  p.microbatch_sizes = {1, 2};
  const char* names[] = {"embedding", "block.0", "block.1", "head"};
  for (int i = 0; i < 4; ++i) {
    s::LayerProfile layer{names[i], i == 0 ? "embedding" : (i == 3 ? "head" : "block"), 1000 * (i + 1), {}};
    for (int64_t b : p.microbatch_sizes) {
      const double scale = static_cast<double>(b);
      layer.per_microbatch.push_back({b, 0.1 * scale, 0.30000000000000004 * scale, 4096 * b, 4096 * b, 16384 * b});
    }
    p.layers.push_back(layer);
  }
  p.links = {{"node", 12.5, 0.002, 10.0}};
  return p;
}

s::Cluster sample_cluster() {
  s::Cluster c;
  c.device = {"NVIDIA H200", int64_t{16} << 30};
  c.levels = {{"node", 2, 450.0, 0.005, 360.0}, {"cluster", 2, 50.0, 0.01, 45.0}};
  return c;
}

// d = 2 stages of 2 layers, w = 2 replicas, replicas-inner: stage s replica r is rank 2s + r.
s::Plan sample_plan() {
  s::Plan p;
  p.provenance = sample_provenance();
  p.profile_sha256 = s::sha256_hex("profile");
  p.model = sample_model();
  p.num_layers = 4;
  p.cluster = sample_cluster();
  p.microbatch_size = 2;
  p.microbatches_per_step = 4;
  p.depth = 2;
  p.width = 2;
  p.global_batch = 16;
  p.reserve_bytes = 1 << 20;
  for (int64_t st = 0; st < 2; ++st) {
    s::StagePlan stage;
    stage.index = st;
    stage.layer_begin = 2 * st;
    stage.layer_end = 2 * st + 2;
    stage.recompute = st == 0;
    stage.ranks = {2 * st, 2 * st + 1};
    stage.in_flight = 2 - st;
    stage.compute_ms = 1.25;
    stage.p2p_ms = 0.0625;
    stage.allreduce_ms = 0.5;
    stage.step_ms = 4 * (1.25 + 0.0625) + 0.5;
    stage.memory = {200, 400, 400, 800, 1000, 64, 1 << 20, 1051440, int64_t{16} << 30, "reserve"};
    p.stages.push_back(stage);
  }
  for (int64_t k = 0; k < 4; ++k) p.ranks.push_back({k, k / 2, k % 2, k / 2, k % 2});
  p.predictions = {5.75, 2782.608695652174, 89043.47826086957, 0, 0.0, 0.0, "reserve"};
  p.alternatives = {{s::Schedule::flush, 2, 4, 2, 2, s::Placement::stages_inner, 7.0, 2285.714285714286,
                     "flush drains the pipeline every step"}};
  return p;
}

using pd2bw::testing::check_prefix;
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

TEST_CASE("a bert model block keeps its ln and tied embeddings; a gpt one without them writes neither") {
  s::Profile profile = sample_profile();
  CHECK(s::dump_profile(profile).find("\"ln\"") == std::string::npos);
  CHECK(s::dump_profile(profile).find("tie_embeddings") == std::string::npos);
  profile.model.kind = "bert";
  profile.model.tie_embeddings = true;
  for (const char* ln : {"pre", "post", ""}) {
    profile.model.ln = ln;
    const std::string text = s::dump_profile(profile);
    const s::Profile back = s::parse_profile(text);
    CHECK(back.model.kind == "bert");
    CHECK(back.model.ln == ln);
    CHECK(back.model.tie_embeddings);
    CHECK(s::dump_profile(back) == text);
    s::Plan plan = sample_plan();
    plan.model = profile.model;
    const s::Plan pback = s::parse_plan(s::dump_plan(plan));
    CHECK(pback.model.ln == ln);
    CHECK(pback.model.kind == "bert");
  }
  // The model block's order: dtype, tie_embeddings, ln (the schema's).
  profile.model.ln = "post";
  const std::string text = s::dump_profile(profile);
  CHECK(text.find("\"dtype\"") < text.find("\"tie_embeddings\": true"));
  CHECK(text.find("\"tie_embeddings\": true") < text.find("\"ln\": \"post\""));
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

TEST_CASE("parse_bytes reads sizes as people write them") {
  CHECK(s::parse_bytes("16GiB", "--memory") == 17179869184);
  CHECK(s::parse_bytes("1.5GB", "--memory") == 1500000000);
  CHECK(s::parse_bytes("512 MiB", "--memory") == 536870912);
  CHECK(s::parse_bytes("4096", "--memory") == 4096);
  CHECK(s::parse_bytes(" 7 b ", "x") == 7);
  CHECK(s::parse_bytes("2k", "x") == 2000);
  CHECK(s::parse_bytes("1kib", "x") == 1024);
  CHECK(s::parse_bytes("0", "x") == 0);
  CHECK(s::parse_bytes("1TB", "x") == 1000000000000);
  CHECK(s::parse_bytes("9223372036854775807", "x") == INT64_MAX);
  for (const char* bad : {"-1GiB", "12XB", "", "GiB", "1.2.3", "1 GiBs", "99999999999999999999", "9000000 TiB",
                          "1e3"}) {
    INFO("input: " << bad);
    CHECK_THROWS_AS((void)s::parse_bytes(bad, "--memory"), pd2bw::UsageError);
  }
  try {
    (void)s::parse_bytes("12XB", "--memory");
  } catch (const pd2bw::UsageError& e) {
    check_prefix(e.what(), "--memory: ");
    CHECK(!e.hint().empty());
  }
}

TEST_CASE("format_bytes prints sizes for humans") {
  CHECK(s::format_bytes(100) == "100 B");
  CHECK(s::format_bytes(12 * 1024) == "12 KiB");
  CHECK(s::format_bytes(640 * 1024 * 1024) == "640 MiB");
  CHECK(s::format_bytes(static_cast<int64_t>(15.2 * 1024 * 1024 * 1024)) == "15.2 GiB");
  CHECK(s::format_bytes(int64_t{16} << 30) == "16 GiB");
  CHECK(s::format_bytes((int64_t{1} << 30) - 1) == "1.0 GiB");
  CHECK(s::format_bytes(-2048) == "-2 KiB");
}

TEST_CASE("sha256 matches the FIPS 180-4 examples") {
  CHECK(s::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(s::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(s::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(s::sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(s::sha256_hex(std::string(55, 'x')).size() == 64);  // padding fits one block exactly
  CHECK(s::sha256_hex(std::string(64, 'x')) != s::sha256_hex(std::string(63, 'x')));
}

TEST_CASE("files are written atomically and read back") {
  const auto dir = std::filesystem::temp_directory_path() / "pd2bw_test_schemas";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "out.json").string();
  s::write_text_file(path, "first\n");
  s::write_text_file(path, "second\n");
  CHECK(s::read_text_file(path) == "second\n");
  int leftovers = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) leftovers += e.path().filename() != "out.json";
  CHECK(leftovers == 0);
  CHECK_THROWS_AS(s::read_text_file(dir.string()), pd2bw::UsageError);
  std::filesystem::remove_all(dir);
  CHECK_THROWS_AS(s::read_text_file((dir / "missing.json").string()), pd2bw::UsageError);
  CHECK_THROWS_AS(s::write_text_file((dir / "no" / "such" / "dir.json").string(), "x"), pd2bw::Error);
}

TEST_CASE("write_file_atomic joins the pieces, replaces the target and cleans up after a failure") {
  const pd2bw::test::TempDir tmp("atomic");
  const std::filesystem::path& dir = tmp.path();
  const std::string path = (dir / "t.bin").string();
  s::write_file_atomic(path, {"ab", "", std::string_view("c\0d", 3)});
  CHECK(s::read_text_file(path) == std::string("abc\0d", 5));
  s::write_file_atomic(path, {"new"});
  CHECK(s::read_text_file(path) == "new");
  s::write_file_atomic(path, {});
  CHECK(s::read_text_file(path).empty());
  // The target is a directory: the rename fails, the directory stays and no temporary is left.
  std::filesystem::create_directories(dir / "sub");
  CHECK_THROWS_AS(s::write_file_atomic((dir / "sub").string(), {"x"}), pd2bw::Error);
  CHECK(std::filesystem::is_directory(dir / "sub"));
  // A missing directory is the user's to fix.
  CHECK_THROWS_AS(s::write_file_atomic((dir / "missing" / "t.bin").string(), {"x"}), pd2bw::UsageError);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"sub", "t.bin"});
  // A bare file name lands in the working directory (whose directory entry is the one synced).
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  s::write_file_atomic("bare.txt", {"here"});
  std::filesystem::current_path(cwd);
  CHECK(s::read_text_file((dir / "bare.txt").string()) == "here");
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

TEST_CASE("a profile's device keeps the optional GPU measurements; a cluster written from it leaves them out") {
  s::Profile p = sample_profile();
  p.device = {"NVIDIA H200", int64_t{140} << 30, "580.159.04", "13.0", "9.0", 132, 2072.75, 55.5};
  const std::string text = s::dump_profile(p);
  const s::Profile back = s::parse_profile(text);
  CHECK(back.device.driver_version == "580.159.04");
  CHECK(back.device.cuda_version == "13.0");
  CHECK(back.device.compute_capability == "9.0");
  CHECK(back.device.multiprocessors == 132);
  CHECK(back.device.device_copy_gbps == 2072.75);
  CHECK(back.device.host_to_device_gbps == 55.5);
  CHECK(s::dump_profile(back) == text);
  CHECK(text.find("\"schema_version\": \"1.1.0\"") != std::string::npos);  // 1.1's keys: a 1.1 file
  CHECK(s::dump_profile(sample_profile()).find("\"schema_version\": \"1.0.0\"") != std::string::npos);
  CHECK(s::dump_profile(sample_profile()).find("driver_version") == std::string::npos);  // absent when not measured
  s::Cluster c = sample_cluster();
  c.device = p.device;  // as `pd2bw plan` copies the profile's device
  const std::string cluster_text = s::dump_cluster(c);
  CHECK(cluster_text.find("driver_version") == std::string::npos);
  CHECK(s::parse_cluster(cluster_text).device.name == "NVIDIA H200");
  auto j = nlohmann::json::parse(text);
  j["device"]["multiprocessors"] = 0;
  check_prefix(schema_error_of([&] { s::parse_profile(j.dump()); }), "/device/multiprocessors: must be > 0");
}

TEST_CASE("a profile's optional split backward: absent in old files, all three keys or none, stamped 1.2") {
  const s::Profile old_profile = sample_profile();
  const std::string old_text = s::dump_profile(old_profile);
  CHECK(old_text.find("bwd_input_ms") == std::string::npos);
  CHECK(old_text.find("\"schema_version\": \"1.0.0\"") != std::string::npos);
  for (const auto& l : s::parse_profile(old_text).layers)
    for (const auto& t : l.per_microbatch) CHECK_FALSE(t.split);  // an old file still loads, unsplit

  s::Profile p = sample_profile();
  s::LayerTiming& t = p.layers[1].per_microbatch[0];
  t.split = true;
  t.bwd_input_ms = 0.75;
  t.bwd_weight_ms = 0.5;
  t.bwd_weight_stash_bytes = 4096;
  const std::string text = s::dump_profile(p);
  CHECK(text.find("\"schema_version\": \"1.2.0\"") != std::string::npos);
  const s::Profile back = s::parse_profile(text);
  const s::LayerTiming& u = back.layers[1].per_microbatch[0];
  CHECK(u.split);
  CHECK(u.bwd_input_ms == 0.75);
  CHECK(u.bwd_weight_ms == 0.5);
  CHECK(u.bwd_weight_stash_bytes == 4096);
  CHECK_FALSE(back.layers[0].per_microbatch[0].split);
  CHECK(s::dump_profile(back) == text);

  auto j = json::parse(text);
  j["layers"][1]["per_microbatch"][0].erase("bwd_weight_ms");
  check_prefix(schema_error_of([&] { s::parse_profile(j.dump()); }),
               "/layers/1/per_microbatch/0/bwd_weight_ms: is missing");
  j = json::parse(text);
  j["layers"][1]["per_microbatch"][0]["bwd_input_ms"] = -1;
  check_prefix(schema_error_of([&] { s::parse_profile(j.dump()); }), "/layers/1/per_microbatch/0/bwd_input_ms: ");
  j = json::parse(text);
  j["layers"][1]["per_microbatch"][0]["bwd_input_ms"] = 0;
  j["layers"][1]["per_microbatch"][0]["bwd_weight_ms"] = 0;
  check_prefix(schema_error_of([&] { s::parse_profile(j.dump()); }), "/layers/1/per_microbatch/0/bwd_weight_ms: ");
}

TEST_CASE("a zb-h1 plan is written as 1.2.0 and reads back") {
  s::Plan plan = sample_plan();
  CHECK(s::dump_plan(plan).find("\"schema_version\": \"1.0.0\"") != std::string::npos);
  plan.schedule = s::Schedule::zb_h1;
  plan.microbatches_per_step = std::max(plan.microbatches_per_step, plan.depth);
  const std::string text = s::dump_plan(plan);
  CHECK(text.find("\"schema_version\": \"1.2.0\"") != std::string::npos);
  CHECK(s::parse_plan(text).schedule == s::Schedule::zb_h1);
  CHECK(s::dump_plan(s::parse_plan(text)) == text);
  CHECK(s::parse_schedule("zb-h1", "/schedule") == s::Schedule::zb_h1);
  CHECK(s::to_string(s::Schedule::zb_h1) == "zb-h1");
  CHECK(s::min_microbatches(s::Schedule::zb_h1, 4) == 1);  // only 2bw needs m >= d
}

TEST_CASE("version stamp") {
  CHECK(!s::pd2bw_version().empty());
  CHECK(!s::pd2bw_git_sha().empty());
}
