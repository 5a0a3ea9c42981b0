// Tests of checkpoint files: safetensors round trips (F32/F64/I64 + metadata), byte-determinism, the
// strict reader against each kind of corruption, and the manifest (round trip, strictness, stage
// file hashes, directory helpers).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/checkpoint.hpp"
#include "pd2bw/executor/safetensors.hpp"
#include "temp_dir.hpp"

namespace ex = pd2bw::executor;
namespace fs = std::filesystem;
using pd2bw::test::read_bytes;
using pd2bw::test::TempDir;
using pd2bw::test::write_bytes;

namespace {

const std::vector<float> kF32 = {1.5f, -2.25f, 3.0f, 0.0f, -0.0f, std::numeric_limits<float>::max()};
const std::vector<double> kF64 = {0.1, -1e300, 2.5};
const std::vector<int64_t> kI64 = {std::numeric_limits<int64_t>::min(), -1, 0, 42};

// True when the directory of `path` holds no temporary sibling of it ("<name>.tmp" or "<name>.tmp.<pid>").
bool no_temporary_beside(const std::string& path) {
  const std::string prefix = fs::path(path).filename().string() + ".tmp";
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path())) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) return false;
  }
  return true;
}

void write_sample(const std::string& path) {
  std::vector<ex::TensorView> views;
  views.push_back(ex::make_tensor_view<float>("blocks.0.w", {2, 3}, kF32));
  views.push_back(ex::make_tensor_view<double>("adam.m", {3}, kF64));
  views.push_back(ex::make_tensor_view<int64_t>("step", {2, 2}, kI64));
  views.push_back(ex::make_tensor_view<float>("empty", {0, 4}, std::span<const float>()));
  ex::write_safetensors(path, views, {{"step", "12"}, {"format", "pt"}, {"a key", "a value"}});
}

// A file made by hand: the given header text (padded to 8) and `data_bytes` bytes of data.
std::string handmade(const std::string& header, std::size_t data_bytes) {
  std::string out;
  std::string h = header;
  h.append((8 - h.size() % 8) % 8, ' ');
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((h.size() >> (8 * i)) & 0xFF));
  return out + h + std::string(data_bytes, '\x01');
}

void expect_schema_error(const std::string& path, const std::string& bytes, const char* why) {
  CAPTURE(why);
  write_bytes(path, bytes);
  try {
    (void)ex::read_safetensors(path);
    FAIL("expected SchemaError");
  } catch (const pd2bw::SchemaError& e) {
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
}

const std::string kShaA(64, 'a');
const std::string kShaB = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

ex::CheckpointManifest sample_manifest() {
  ex::CheckpointManifest m;
  m.plan_sha256 = kShaA;
  m.profile_sha256 = kShaB;
  m.schedule = "2bw";
  m.dtype = "double";
  m.depth = 2;
  m.width = 3;
  m.step = 17;
  m.seed = 0xFFFFFFFFFFFFFFFFULL;  // the full uint64 range survives JSON
  m.data_label = "built-in corpus";
  m.stages = {{0, "stage-000.safetensors", kShaA}, {1, "stage-001.safetensors", kShaB}};
  m.provenance = {"pd2bw", "0.1.0", "abc123", "pd2bw train --plan plan.json", ""};
  return m;
}

void check_same(const ex::CheckpointManifest& a, const ex::CheckpointManifest& b) {
  CHECK(a.plan_sha256 == b.plan_sha256);
  CHECK(a.profile_sha256 == b.profile_sha256);
  CHECK(a.schedule == b.schedule);
  CHECK(a.dtype == b.dtype);
  CHECK(a.depth == b.depth);
  CHECK(a.width == b.width);
  CHECK(a.step == b.step);
  CHECK(a.seed == b.seed);
  CHECK(a.data_label == b.data_label);
  REQUIRE(a.stages.size() == b.stages.size());
  for (std::size_t i = 0; i < a.stages.size(); ++i) {
    CHECK(a.stages[i].stage == b.stages[i].stage);
    CHECK(a.stages[i].file == b.stages[i].file);
    CHECK(a.stages[i].sha256 == b.stages[i].sha256);
  }
  CHECK(a.provenance.command_line == b.provenance.command_line);
  CHECK(a.provenance.git_sha == b.provenance.git_sha);
}

void expect_manifest_error(const nlohmann::ordered_json& doc, const char* pointer) {
  CAPTURE(pointer);
  try {
    (void)ex::parse_manifest(doc.dump(), "m.json");
    FAIL("expected SchemaError");
  } catch (const pd2bw::SchemaError& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.rfind("m.json: " + std::string(pointer), 0) == 0);
  }
}

}  // namespace

TEST_CASE("safetensors: round trip of F32, F64, I64 and an empty tensor with metadata") {
  TempDir dir("ckpt");
  const std::string path = dir.file("t.safetensors");
  write_sample(path);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  CHECK(no_temporary_beside(path));
  const ex::SafetensorsFile f = ex::read_safetensors(path);
  CHECK(f.metadata == std::map<std::string, std::string>{{"step", "12"}, {"format", "pt"}, {"a key", "a value"}});
  REQUIRE(f.tensors.size() == 4);
  CHECK(f.tensors.at("blocks.0.w").shape == std::vector<int64_t>{2, 3});
  CHECK(f.tensors.at("blocks.0.w").dtype == "F32");
  std::vector<float> f32(6);
  std::vector<double> f64(3);
  std::vector<int64_t> i64(4);
  f.copy_to<float>("blocks.0.w", f32);
  f.copy_to<double>("adam.m", f64);
  f.copy_to<int64_t>("step", i64);
  CHECK(std::memcmp(f32.data(), kF32.data(), sizeof(float) * 6) == 0);  // bitwise, -0.0 included
  CHECK(f64 == kF64);
  CHECK(i64 == kI64);
  std::vector<float> none;
  f.copy_to<float>("empty", std::span<float>(none));
  CHECK(f.tensors.at("empty").shape == std::vector<int64_t>{0, 4});
}

TEST_CASE("safetensors: header layout is the standard one, bytes are deterministic") {
  TempDir dir("ckpt");
  const std::string a = dir.file("a.safetensors");
  const std::string b = dir.file("b.safetensors");
  write_sample(a);
  write_sample(b);
  const std::string bytes = read_bytes(a);
  CHECK(bytes == read_bytes(b));
  write_sample(a);  // overwriting an existing file works and yields the same bytes
  CHECK(read_bytes(a) == bytes);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)])) << (8 * i);
  CHECK(n % 8 == 0);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header["__metadata__"]["format"] == "pt");
  CHECK(header["blocks.0.w"]["data_offsets"] == nlohmann::json::array({0, 24}));
  CHECK(header["adam.m"]["data_offsets"] == nlohmann::json::array({24, 48}));
  CHECK(bytes.size() == 8 + n + 24 + 24 + 32);
  CHECK(bytes.substr(8, 15) == "{\"__metadata__\"");
}

TEST_CASE("safetensors: writer rejects malformed views") {
  TempDir dir("ckpt");
  const std::string path = dir.file("bad.safetensors");
  const std::vector<float> v = {1, 2, 3};
  CHECK_THROWS_AS((void)ex::make_tensor_view<float>("x", {2, 2}, v), pd2bw::Error);
  const ex::TensorView x = ex::make_tensor_view<float>("x", {3}, v);
  CHECK_THROWS_AS(ex::write_safetensors(path, {x, x}, {}), pd2bw::Error);
  ex::TensorView bad = x;
  bad.dtype = "BF16";
  CHECK_THROWS_AS(ex::write_safetensors(path, {bad}, {}), pd2bw::Error);
  bad = x;
  bad.shape = {4};
  CHECK_THROWS_AS(ex::write_safetensors(path, {bad}, {}), pd2bw::Error);
  CHECK_THROWS_AS(ex::write_safetensors(dir.file("no/such/dir/x.safetensors"), {x}, {}), pd2bw::Error);
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("safetensors: every kind of corruption -> SchemaError naming the file") {
  TempDir dir("ckpt");
  const std::string good_path = dir.file("good.safetensors");
  write_sample(good_path);
  const std::string good = read_bytes(good_path);
  const std::string path = dir.file("bad.safetensors");
  std::string flipped = good;
  flipped[5] = '\x7f';  // header length now far beyond the file
  std::string shorter = good;
  shorter[0] = static_cast<char>(shorter[0] - 8);  // header cut inside the JSON
  std::string bad_json = good;
  bad_json[8] = '[';
  expect_schema_error(path, good.substr(0, good.size() - 1), "truncated data");
  expect_schema_error(path, good.substr(0, 5), "shorter than the length field");
  expect_schema_error(path, good + "xyz", "trailing garbage");
  expect_schema_error(path, flipped, "header length beyond the file");
  expect_schema_error(path, shorter, "header length too short");
  expect_schema_error(path, bad_json, "bad JSON");
  expect_schema_error(path, handmade("[1, 2]", 0), "header not an object");
  const char* const a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  expect_schema_error(path, handmade(std::string("{") + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                      "overlapping offsets");
  expect_schema_error(path, handmade(std::string("{") + a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16),
                      "gap between tensors");
  expect_schema_error(path, handmade(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8), "offset out of range");
  expect_schema_error(path, handmade(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "shape mismatch");
  expect_schema_error(path, handmade(R"({"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}})", 8), "unknown dtype");
  expect_schema_error(path, handmade(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "negative dim");
  expect_schema_error(path, handmade(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "reversed offsets");
  expect_schema_error(path, handmade(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8), "unknown key");
  expect_schema_error(path, handmade(std::string("{") + a + "," + a + "}", 8), "duplicate tensor");
  expect_schema_error(path, handmade(R"({"__metadata__":{"k":1}})", 0), "non-string metadata");
  CHECK_THROWS_AS((void)ex::read_safetensors(dir.file("absent.safetensors")), pd2bw::UsageError);
  CHECK_NOTHROW((void)ex::read_safetensors(good_path));
  CHECK_NOTHROW((void)ex::read_safetensors((write_bytes(path, handmade("{}", 0)), path)));  // no tensors at all
}

TEST_CASE("safetensors: copy_to checks name, dtype and element count") {
  TempDir dir("ckpt");
  const std::string path = dir.file("t.safetensors");
  write_sample(path);
  const ex::SafetensorsFile f = ex::read_safetensors(path);
  std::vector<double> d6(6);
  std::vector<float> f5(5);
  std::vector<float> f6(6);
  std::vector<int64_t> i4(4);
  CHECK_THROWS_AS(f.copy_to<double>("blocks.0.w", d6), pd2bw::SchemaError);  // F32 stored
  CHECK_THROWS_AS(f.copy_to<float>("blocks.0.w", f5), pd2bw::SchemaError);   // 6 stored
  CHECK_THROWS_AS(f.copy_to<float>("missing", f6), pd2bw::SchemaError);
  CHECK_THROWS_AS(f.copy_to<int64_t>("adam.m", i4), pd2bw::SchemaError);
  try {
    f.copy_to<double>("blocks.0.w", d6);
  } catch (const pd2bw::SchemaError& e) {
    const std::string what = e.what();
    CHECK(what.find(path) != std::string::npos);
    CHECK(what.find("blocks.0.w") != std::string::npos);
  }
}

TEST_CASE("manifest: round trip, determinism and stage file names") {
  const ex::CheckpointManifest m = sample_manifest();
  const std::string text = ex::dump_manifest(m);
  CHECK(text == ex::dump_manifest(m));
  CHECK(text.back() == '\n');
  CHECK(text.find("\"schema\": \"pd2bw.checkpoint\"") != std::string::npos);
  CHECK(text.find("\"schema_version\": \"1.0.0\"") != std::string::npos);
  check_same(ex::parse_manifest(text, "m.json"), m);
  CHECK(ex::dump_manifest(ex::parse_manifest(text, "m.json")) == text);
  CHECK(ex::stage_file_name(0) == "stage-000.safetensors");
  CHECK(ex::stage_file_name(12) == "stage-012.safetensors");
  CHECK(ex::stage_file_name(1234) == "stage-1234.safetensors");
}

TEST_CASE("manifest: strict parsing names the JSON pointer") {
  const auto good = nlohmann::ordered_json::parse(ex::dump_manifest(sample_manifest()));
  auto doc = good;
  doc.erase("step");
  expect_manifest_error(doc, "/step: missing");
  doc = good;
  doc["extra"] = 1;
  expect_manifest_error(doc, "/extra: unknown key");
  doc = good;
  doc["depth"] = "2";
  expect_manifest_error(doc, "/depth");
  doc = good;
  doc["step"] = 1.5;
  expect_manifest_error(doc, "/step");
  doc = good;
  doc["seed"] = -1;
  expect_manifest_error(doc, "/seed");
  doc = good;
  doc["schema"] = "pd2bw.plan";
  expect_manifest_error(doc, "/schema");
  doc = good;
  doc["schema_version"] = "2.0.0";
  expect_manifest_error(doc, "/schema_version");
  doc = good;
  doc["schedule"] = "1f1b";
  expect_manifest_error(doc, "/schedule");
  doc = good;
  doc["dtype"] = "fp16";  // float, double and bf16 are the dtypes a run computes in
  expect_manifest_error(doc, "/dtype");
  doc = good;
  doc["plan_sha256"] = "ABC";
  expect_manifest_error(doc, "/plan_sha256");
  doc = good;
  doc["stages"][1]["file"] = "../escape.safetensors";
  expect_manifest_error(doc, "/stages/1/file");
  doc = good;
  doc["stages"][1]["stage"] = 5;
  expect_manifest_error(doc, "/stages/1/stage");
  doc = good;
  doc["stages"][0].erase("sha256");
  expect_manifest_error(doc, "/stages/0/sha256: missing");
  doc = good;
  doc["stages"].erase(1);
  expect_manifest_error(doc, "/stages");
  doc = good;
  doc["provenance"]["who"] = "me";
  expect_manifest_error(doc, "/provenance/who: unknown key");
  CHECK_THROWS_AS((void)ex::parse_manifest("{\"schema\": ", "m.json"), pd2bw::SchemaError);
  CHECK_THROWS_AS((void)ex::parse_manifest(R"({"step": 1, "step": 2})", "m.json"), pd2bw::SchemaError);
  ex::CheckpointManifest bad = sample_manifest();
  bad.depth = 3;
  CHECK_THROWS_AS((void)ex::dump_manifest(bad), pd2bw::SchemaError);
}

TEST_CASE("checkpoint directory: manifest written last, stage hashes verified") {
  TempDir tmp("ckpt");
  const std::string dir = tmp.file("run/step-17");
  CHECK_THROWS_AS((void)ex::read_checkpoint_manifest(dir), pd2bw::UsageError);  // no directory yet
  fs::create_directories(dir);
  CHECK_THROWS_AS((void)ex::read_checkpoint_manifest(dir), pd2bw::UsageError);  // no manifest yet
  ex::CheckpointManifest m = sample_manifest();
  for (ex::CheckpointStage& s : m.stages) {
    write_sample(ex::stage_file_path(dir, s));
    s.sha256 = ex::sha256_file(ex::stage_file_path(dir, s));
  }
  ex::write_manifest(dir, m);
  CHECK_FALSE(fs::exists(tmp.file("run/step-17/manifest.json.tmp")));
  CHECK(no_temporary_beside(tmp.file("run/step-17/manifest.json")));
  const ex::CheckpointManifest back = ex::read_checkpoint_manifest(dir);
  check_same(back, m);
  for (const ex::CheckpointStage& s : back.stages) CHECK_NOTHROW(ex::verify_stage_file(dir, s));
  // Flip one byte of stage 1: its hash no longer matches.
  std::string bytes = read_bytes(ex::stage_file_path(dir, back.stages[1]));
  bytes.back() = static_cast<char>(bytes.back() ^ 1);
  write_bytes(ex::stage_file_path(dir, back.stages[1]), bytes);
  try {
    ex::verify_stage_file(dir, back.stages[1]);
    FAIL("expected SchemaError");
  } catch (const pd2bw::SchemaError& e) {
    CHECK(std::string(e.what()).find("corrupt checkpoint") != std::string::npos);
  }
  fs::remove(ex::stage_file_path(dir, back.stages[0]));
  CHECK_THROWS_AS(ex::verify_stage_file(dir, back.stages[0]), pd2bw::UsageError);
  // A corrupt manifest is a SchemaError naming manifest.json.
  write_bytes(tmp.file("run/step-17/manifest.json"), "{");
  try {
    (void)ex::read_checkpoint_manifest(dir);
    FAIL("expected SchemaError");
  } catch (const pd2bw::SchemaError& e) {
    CHECK(std::string(e.what()).find("manifest.json") != std::string::npos);
  }
  // write_manifest creates missing directories.
  ex::write_manifest(tmp.file("fresh/dir"), m);
  CHECK(fs::exists(tmp.file("fresh/dir/manifest.json")));
}
