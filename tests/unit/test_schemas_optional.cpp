// Tests of the formats' optional keys and the schema version each one stamps: a bert model block's
// ln and tied embeddings, a profile's GPU measurements (1.1) and split backward (1.2), a zb-h1 plan (1.2).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"
#include "schema_samples.hpp"
#include "schema_test_util.hpp"

namespace s = pd2bw::schemas;
using nlohmann::json;
using pd2bw::testing::check_prefix;
using pd2bw::testing::sample_cluster;
using pd2bw::testing::sample_plan;
using pd2bw::testing::sample_profile;
using pd2bw::testing::schema_error_of;

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
