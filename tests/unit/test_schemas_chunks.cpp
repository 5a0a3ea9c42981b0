// Tests of the plan format's chunks per rank (schema version 1.3): chunked plans (interleaved, zb-v) and
// the zb-h2 value round-trip byte for byte, older plans still read with one chunk per rank, plans of one
// chunk per rank are written as before, and each rule of a chunked plan rejects with its JSON pointer.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/validate.hpp"
#include "schema_test_util.hpp"

namespace s = pd2bw::schemas;
using nlohmann::json;
using pd2bw::testing::check_prefix;
using pd2bw::testing::schema_error_of;

namespace {

constexpr int64_t kLimit = int64_t{1} << 20;  // the device's memory
constexpr int64_t kReserve = 1000;

// A chunk's memory: a share of its rank's, the reserve on the rank's first chunk only.
s::MemoryBreakdown chunk_memory(bool first) {
  s::MemoryBreakdown m{100, 0, 100, 200, 300, 10, first ? kReserve : 0, 0, kLimit, first ? "reserve" : "stash"};
  m.total_bytes = m.weights_bytes + m.master_bytes + m.grads_bytes + m.optimizer_bytes + m.stash_bytes + m.comm_bytes +
                  m.reserve_bytes;
  return m;
}

// A consistent plan of `schedule` with d positions, v chunks per rank, w replicas (replicas inner: position
// p replica r is rank p w + r), m = 2 d, b = 1, two layers per chunk. Positions alternate recompute; the
// last chunk is the bottleneck (an index >= d when v > 1).
s::Plan chunked_plan(s::Schedule schedule, int64_t d, int64_t v, int64_t w) {
  s::Plan p;
  p.provenance = {"pd2bw", "0.1.0", "abc123", "pd2bw plan", "made in a unit test"};
  p.profile_sha256 = s::sha256_hex("profile");
  p.model = {"gpt", "gpt-tiny", 2 * d * v - 2, 64, 4, 32, 100, s::DType::fp32};
  p.num_layers = 2 * d * v;
  p.cluster.device = {"cpu", kLimit};
  p.cluster.levels = {{"node", d * w, 12.5, 0.002, 10.0}};
  p.schedule = schedule;
  p.microbatch_size = 1;
  p.microbatches_per_step = 2 * d;
  p.depth = d;
  p.width = w;
  p.chunks_per_rank = v;
  p.global_batch = 2 * d * w;
  p.reserve_bytes = kReserve;
  for (int64_t c = 0; c < d * v; ++c) {
    const int64_t position = s::chunk_position(schedule, d, c);
    s::StagePlan st;
    st.index = c;
    st.layer_begin = 2 * c;
    st.layer_end = 2 * c + 2;
    st.recompute = position % 2 == 1;
    for (int64_t r = 0; r < w; ++r) st.ranks.push_back(position * w + r);
    st.in_flight = 1 + c % 3;
    st.compute_ms = 1.25;
    st.p2p_ms = 0.0625;
    st.allreduce_ms = 0.5;
    st.step_ms = 3.0 + static_cast<double>(c) * 0.25;
    st.memory = chunk_memory(c < d);
    p.stages.push_back(st);
  }
  for (int64_t k = 0; k < d * w; ++k) p.ranks.push_back({k, k / w, k % w, 0, k});
  p.predictions = {20.0, 100.0, 3200.0, d * v - 1, 0.125, 0.0, "reserve"};
  p.alternatives = {{s::Schedule::flush, 1, 2 * d, d, w, s::Placement::stages_inner, 25.0, 80.0, "flush is slower"}};
  return p;
}

s::Plan interleaved_plan() {
  return chunked_plan(s::Schedule::interleaved, 2, 2, 2);
}
s::Plan zb_v_plan() {
  return chunked_plan(s::Schedule::zb_v, 2, 2, 1);
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// The text of `plan` with `edit` applied to its JSON.
std::string edited(const s::Plan& plan, const std::function<void(json&)>& edit) {
  json j = json::parse(s::dump_plan(plan));
  edit(j);
  return j.dump(2);
}

void rejects(const s::Plan& plan, const std::function<void(json&)>& edit, const std::string& prefix) {
  check_prefix(schema_error_of([&] { (void)s::parse_plan(edited(plan, edit)); }), prefix);
}

// The hint of the SchemaError that parsing `text` throws.
std::string hint_of(const std::string& text) {
  try {
    (void)s::parse_plan(text);
  } catch (const pd2bw::SchemaError& e) {
    return e.hint();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("chunk_position and chunks_allowed follow the papers' placements") {
  // Megatron's loop: chunk c on c mod d. ZB-V: down the positions, then back up.
  const std::vector<int64_t> loop = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  const std::vector<int64_t> vee = {0, 1, 2, 3, 3, 2, 1, 0};
  for (int64_t c = 0; c < 12; ++c) CHECK(s::chunk_position(s::Schedule::interleaved, 4, c) == loop[c]);
  for (int64_t c = 0; c < 8; ++c) CHECK(s::chunk_position(s::Schedule::zb_v, 4, c) == vee[c]);
  for (int64_t c = 0; c < 4; ++c) CHECK(s::chunk_position(s::Schedule::flush, 4, c) == c);
  CHECK_FALSE(s::chunks_allowed(s::Schedule::interleaved, 1));
  CHECK(s::chunks_allowed(s::Schedule::interleaved, 5));
  CHECK(s::chunks_allowed(s::Schedule::zb_v, 2));
  CHECK_FALSE(s::chunks_allowed(s::Schedule::zb_v, 3));
  CHECK_FALSE(s::chunks_allowed(s::Schedule::zb_h2, 2));
}

TEST_CASE("interleaved and zb-v plans round-trip byte for byte as 1.3.0") {
  struct Case {
    s::Schedule schedule;
    int64_t d, v, w;
  };
  for (const Case& c : {Case{s::Schedule::interleaved, 2, 2, 2}, Case{s::Schedule::interleaved, 3, 3, 1},
                        Case{s::Schedule::zb_v, 2, 2, 1}, Case{s::Schedule::zb_v, 3, 2, 2}}) {
    CAPTURE(s::to_string(c.schedule));
    CAPTURE(c.d);
    CAPTURE(c.v);
    const s::Plan plan = chunked_plan(c.schedule, c.d, c.v, c.w);
    const std::string text = s::dump_plan(plan);
    CHECK(has(text, "\"schema_version\": \"1.3.0\""));
    CHECK(has(text, "\"chunks_per_rank\": " + std::to_string(c.v)));
    const s::Plan back = s::parse_plan(text);
    CHECK(s::dump_plan(back) == text);
    CHECK(back.schedule == c.schedule);
    CHECK(back.chunks_per_rank == c.v);
    REQUIRE(back.stages.size() == plan.stages.size());
    for (std::size_t k = 0; k < plan.stages.size(); ++k) {
      CHECK(back.stages[k].ranks == plan.stages[k].ranks);
      CHECK(back.stages[k].recompute == plan.stages[k].recompute);
      CHECK(back.stages[k].memory.reserve_bytes == plan.stages[k].memory.reserve_bytes);
    }
    CHECK(back.predictions.bottleneck_stage == c.d * c.v - 1);  // names a chunk, beyond the positions
  }
  const s::ValidationReport report = s::validate_document(s::dump_plan(interleaved_plan()));
  CHECK(report.schema_version == "1.3.0");
  CHECK(has(report.summary, "schedule interleaved (2 chunks per rank), depth 2 x width 2"));
  CHECK_FALSE(has(s::validate_document(s::dump_plan(chunked_plan(s::Schedule::flush, 2, 1, 2))).summary, "chunks"));
  // The V, spelled out: with d = 2 chunk 3 sits on position 0 (the loop would put it on position 1).
  const json j = json::parse(s::dump_plan(zb_v_plan()));
  CHECK(j["stages"][3]["ranks"] == json::array({0}));
  CHECK(j["stages"][2]["ranks"] == json::array({1}));
}

TEST_CASE("older plans read with one chunk per rank; plans of one chunk per rank are written as before") {
  s::Plan plan = chunked_plan(s::Schedule::flush, 2, 1, 2);
  const std::string text = s::dump_plan(plan);
  CHECK_FALSE(has(text, "chunks_per_rank"));
  CHECK(has(text, "\"schema_version\": \"1.0.0\""));
  for (const std::string version : {"1.0.0", "1.1.0", "1.2.0"}) {
    CAPTURE(version);
    json j = json::parse(text);
    j["schema_version"] = version;
    const s::Plan back = s::parse_plan(j.dump(2));
    CHECK(back.chunks_per_rank == 1);
    CHECK(back.alternatives[0].chunks_per_rank == 1);
    CHECK(back.stages.size() == 2);
  }
  // A 1.2 zb-h1 plan.
  plan.schedule = s::Schedule::zb_h1;
  const std::string zb = s::dump_plan(plan);
  CHECK(has(zb, "\"schema_version\": \"1.2.0\""));
  CHECK(s::parse_plan(zb).chunks_per_rank == 1);
  // An explicit 1 reads, and is not written back.
  json j = json::parse(zb);
  j["chunks_per_rank"] = 1;
  j["alternatives"][0]["chunks_per_rank"] = 1;
  CHECK(s::dump_plan(s::parse_plan(j.dump(2))) == zb);
}

TEST_CASE("zb-h2 is a 1.3 value; a chunked alternative makes a plan 1.3 and reads back") {
  s::Plan plan = chunked_plan(s::Schedule::zb_h2, 2, 1, 2);
  const std::string text = s::dump_plan(plan);
  CHECK(has(text, "\"schema_version\": \"1.3.0\""));
  CHECK_FALSE(has(text, "chunks_per_rank"));
  CHECK(s::parse_plan(text).schedule == s::Schedule::zb_h2);
  CHECK(s::dump_plan(s::parse_plan(text)) == text);
  CHECK(s::parse_schedule("zb-h2", "/schedule") == s::Schedule::zb_h2);

  plan = chunked_plan(s::Schedule::flush, 2, 1, 2);
  plan.alternatives.push_back({s::Schedule::interleaved, 1, 4, 2, 2, s::Placement::replicas_inner, 30.0, 66.5,
                               "interleaved is slower here", 3});
  plan.alternatives.push_back(
      {s::Schedule::zb_v, 1, 4, 2, 2, s::Placement::replicas_inner, 31.0, 64.5, "so is zb-v", 2});
  const std::string alt = s::dump_plan(plan);
  CHECK(has(alt, "\"schema_version\": \"1.3.0\""));
  const s::Plan back = s::parse_plan(alt);
  CHECK(back.chunks_per_rank == 1);
  CHECK(back.alternatives[1].chunks_per_rank == 3);
  CHECK(back.alternatives[2].chunks_per_rank == 2);
  CHECK(s::dump_plan(back) == alt);
}

TEST_CASE("a chunked plan's rules name the offending JSON pointer") {
  const s::Plan il = interleaved_plan();  // d = 2, v = 2, w = 2: chunks 0 1 2 3 on positions 0 1 0 1
  const s::Plan zv = zb_v_plan();         // d = 2, v = 2, w = 1: chunks 0 1 2 3 on positions 0 1 1 0
  SUBCASE("chunks per rank the schedule does not allow") {
    rejects(
        zv, [](json& j) { j["chunks_per_rank"] = 3; }, "/chunks_per_rank: zb-v needs chunks_per_rank = 2, got 3");
    rejects(
        il, [](json& j) { j.erase("chunks_per_rank"); }, "/chunks_per_rank: interleaved needs chunks_per_rank >= 2");
    rejects(
        il, [](json& j) { j["schedule"] = "flush"; }, "/chunks_per_rank: flush needs chunks_per_rank = 1, got 2");
    rejects(
        il, [](json& j) { j["chunks_per_rank"] = 0; }, "/chunks_per_rank: must be > 0");
    rejects(
        il, [](json& j) { j["chunks_per_rank"] = 2.0; }, "/chunks_per_rank: expected an integer");
    rejects(
        il, [](json& j) { j["chunks_per_rank"] = int64_t{1} << 40; }, "/chunks_per_rank: must be <= /num_layers");
    rejects(
        il, [](json& j) { j["alternatives"][0]["schedule"] = "interleaved"; },
        "/alternatives/0/chunks_per_rank: interleaved needs chunks_per_rank >= 2, got 1");
    rejects(
        il, [](json& j) { j["alternatives"][0]["chunks_per_rank"] = 2; },
        "/alternatives/0/chunks_per_rank: flush needs chunks_per_rank = 1, got 2");
  }
  SUBCASE("one stage per model chunk, with checked products") {
    rejects(
        il, [](json& j) { j["stages"].erase(3); }, "/stages: has 3 stages but depth x chunks_per_rank = 2 x 2 = 4");
    rejects(
        il, [](json& j) { j["depth"] = int64_t{1} << 62; },
        "/stages: has 4 stages but depth x chunks_per_rank = 4611686018427387904 x 2 overflows");
    // (2^62 + 1) x 4 wraps around to 4, the stages' count, in unchecked arithmetic.
    rejects(
        chunked_plan(s::Schedule::interleaved, 1, 4, 1), [](json& j) { j["depth"] = (int64_t{1} << 62) + 1; },
        "/stages: has 4 stages but depth x chunks_per_rank = 4611686018427387905 x 4 overflows");
    rejects(
        il, [](json& j) { j["stages"][2]["layer_begin"] = 5; }, "/stages/2/layer_begin: expected 4");
    rejects(
        il, [](json& j) { j["predictions"]["bottleneck_stage"] = 4; },
        "/predictions/bottleneck_stage: must name a chunk below depth x chunks_per_rank (4)");
  }
  SUBCASE("interleaved: m at least d and a multiple of d (Megatron's rule)") {
    const auto m_of = [](int64_t m) {
      return [m](json& j) {
        j["microbatches_per_step"] = m;
        j["global_batch"] = m * 2;  // b = 1, w = 2
      };
    };
    rejects(il, m_of(3), "/microbatches_per_step: interleaved needs microbatches_per_step to be a multiple of depth");
    CHECK(has(hint_of(edited(il, m_of(3))), "Megatron"));
    rejects(il, m_of(1), "/microbatches_per_step: interleaved needs microbatches_per_step >= depth (1 < 2)");
    CHECK(has(hint_of(edited(il, m_of(1))), "Megatron"));
    CHECK(s::parse_plan(edited(il, m_of(6))).microbatches_per_step == 6);
    CHECK(s::parse_plan(edited(zv,
                               [](json& j) {  // zb-v takes any m
                                 j["microbatches_per_step"] = 3;
                                 j["global_batch"] = 3;
                               }))
              .microbatches_per_step == 3);
  }
  SUBCASE("the chunks of a position list its ranks; the rank table names positions") {
    rejects(
        il,
        [](json& j) {
          j["stages"][2]["ranks"] = json::array({2, 3});
        },
        "/stages/2/ranks/0: chunk 2 runs on position 0, whose replica 0 is rank 0");
    rejects(
        zv, [](json& j) { j["stages"][3]["ranks"] = json::array({1}); },
        "/stages/3/ranks/0: chunk 3 runs on position 0, whose replica 0 is rank 0");
    rejects(
        il, [](json& j) { j["ranks"][2]["stage"] = 2; }, "/ranks/2/stage: must be < /depth (2)");
  }
  SUBCASE("a rank recomputes all of its chunks or none") {
    rejects(
        il, [](json& j) { j["stages"][2]["recompute"] = true; },
        "/stages/2/recompute: is true but chunk 0, on the same position 0, has false");
    rejects(
        zv, [](json& j) { j["stages"][2]["recompute"] = false; },
        "/stages/2/recompute: is false but chunk 1, on the same position 1, has true");
  }
  SUBCASE("a rank's chunks share one device: one limit, the reserve once, their totals within the limit") {
    rejects(
        il, [](json& j) { j["stages"][3]["memory"]["limit_bytes"] = kLimit / 2; },
        "/stages/3/memory/limit_bytes: is 524288 but chunk 1");
    rejects(
        il, [](json& j) { j["stages"][2]["memory"]["reserve_bytes"] = kReserve; },
        "/stages/2/memory/reserve_bytes: must be 0, got 1000");
    // Chunks 1 and 3 (position 1) each within the limit, together over it by one byte.
    const int64_t base = chunk_memory(true).total_bytes + chunk_memory(false).total_bytes;
    const auto grow = [](json& j, int c, int64_t extra) {
      auto& m = j["stages"][c]["memory"];
      m["stash_bytes"] = m["stash_bytes"].get<int64_t>() + extra;
      m["total_bytes"] = m["total_bytes"].get<int64_t>() + extra;
    };
    const int64_t slack = kLimit - base;
    rejects(
        il,
        [&](json& j) {
          grow(j, 1, slack / 2);
          grow(j, 3, slack - slack / 2 + 1);
        },
        "/stages/3/memory/total_bytes: the chunks of position 1 up to this one need 1048577 bytes together");
    CHECK(s::parse_plan(edited(il,
                               [&](json& j) {
                                 grow(j, 1, slack / 2);
                                 grow(j, 3, slack - slack / 2);
                               }))
              .stages[3]
              .memory.total_bytes <= kLimit);  // exactly at the limit fits
    // Sums past int64 are over any limit, not wrapped around.
    rejects(
        zv, [](json& j) { j["stages"][0]["memory"]["total_bytes"] = INT64_MAX; },
        "/stages/0/memory/total_bytes: the chunks of position 0");
    rejects(
        zv, [](json& j) { j["stages"][3]["memory"]["total_bytes"] = INT64_MAX; },
        "/stages/3/memory/total_bytes: the chunks of position 0 up to this one need 9223372036854775807");
  }
}

TEST_CASE("a plan of one chunk per rank over its limit still reads: `pd2bw validate` reports it") {
  s::Plan plan = chunked_plan(s::Schedule::flush, 2, 1, 2);
  plan.stages[1].memory.stash_bytes += kLimit;
  plan.stages[1].memory.total_bytes += kLimit;
  CHECK(s::parse_plan(s::dump_plan(plan)).stages[1].memory.total_bytes > kLimit);
}
