// The simulator on the chunked and zero-bubble schedules (interleaved 1F1B, zb-h2, zb-v) against the
// papers' closed forms with equal chunks and no communication (Narayanan et al. 2021 for interleaved;
// Qi et al. 2024 for zb-h2 and zb-v), a hand-computed zb-v timeline whose turn between the two chunks of
// one rank costs nothing, each rank's memory peak against pipeline::stash_walk / stash_peak plus the
// static terms, and the trace and picture of a chunked run against the generator's op lists. The same
// from a cost model and from a plan (make_sim_input, plan_model) is in test_simulator_chunks_model.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/pipeline/stash.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "pd2bw/planner/timeline.hpp"
#include "random_instances.hpp"

using namespace pd2bw::planner;
using pd2bw::schemas::Schedule;
namespace pipeline = pd2bw::pipeline;

namespace {

// d positions of v chunks each, every chunk with forward f, B b and W w (ms; the backward is b + w, or b
// when the schedule does not split it), transfers p and allreduce a; memory different for every chunk so
// a term charged to the wrong chunk shows.
SimInput chunked_input(Schedule kind, int64_t d, int64_t v, int64_t m, double f, double b, double w,
                       double p = 0.0, int64_t width = 1, double a = 0.0) {
  SimInput in;
  in.spec = {kind, d, m, 3, width, v};
  const bool split = pipeline::splits_backward(kind);
  for (int64_t c = 0; c < d * v; ++c) {
    SimStage st;
    st.forward_ms = f;
    st.backward_ms = b + (split ? w : 0.0);
    st.weight_ms = split ? w : 0.0;
    st.allreduce_ms = width > 1 ? a : 0.0;
    st.update_ms = 0.0;
    st.weights_bytes = 100 + c;
    st.fixed_bytes = 10 + 3 * c;
    st.stash_bytes = 1000 + 17 * c;
    st.weight_grad_bytes = split ? 300 + 5 * c : 0;
    in.stages.push_back(st);
  }
  for (int64_t i = 0; i < d; ++i) {
    in.ranks.push_back({});
    for (int64_t r = 0; r < width; ++r) in.ranks.back().push_back(i * width + r);
  }
  in.boundary_ms.assign(static_cast<size_t>(width), std::vector<double>(static_cast<size_t>(d * v - 1), p));
  return in;
}

void set_recompute(SimInput& in, int64_t position) {
  for (int64_t c : pipeline::chunks_at(in.spec.kind, in.spec.depth, in.spec.chunks, position)) {
    auto& st = in.stages[static_cast<size_t>(c)];
    st.recompute = true;
    st.recompute_ms = 0.5 * st.forward_ms;
    st.recompute_stash_bytes = st.stash_bytes;
    st.stash_bytes = 40 + c;  // what a recomputing chunk keeps: its input
  }
}

// The reference: the rank's static terms plus the stash walk's peak with each chunk's bytes.
int64_t reference_peak(const SimInput& in, int64_t position) {
  const auto walk = pipeline::stash_walk(in.spec, position, in.stages[static_cast<size_t>(position)].recompute);
  int64_t statics = 0;
  std::vector<pipeline::ChunkStashBytes> bytes;
  for (int64_t c : walk.chunks) {
    const auto& st = in.stages[static_cast<size_t>(c)];
    statics += st.fixed_bytes + st.weights_bytes;
    bytes.push_back({st.stash_bytes, st.recompute_stash_bytes, st.weight_grad_bytes});
  }
  return statics + pipeline::stash_peak(walk, bytes);
}

}  // namespace

TEST_CASE("interleaved: equal chunks idle (d - 1)(F + B) / v per step, 1/v of flush's bubble") {
  for (int64_t d : {1, 2, 4})
    for (int64_t v : {2, 3})
      for (int64_t m : {d, 2 * d, 3 * d}) {
        CAPTURE(d);
        CAPTURE(v);
        CAPTURE(m);
        const double F = 1.2, B = 2.6;  // one stage's times; each of its v chunks takes 1/v of them
        const SimResult r = simulate_steady(chunked_input(Schedule::interleaved, d, v, m, F / v, B / v, 0.0));
        const double ideal = static_cast<double>(m) * (F + B), idle = static_cast<double>(d - 1) * (F + B) / static_cast<double>(v);
        CHECK(r.steady);
        CHECK(r.step_ms == doctest::Approx(ideal + idle).epsilon(1e-12));
        CHECK(r.step_ms / ideal - 1.0 == doctest::Approx(static_cast<double>(d - 1) / static_cast<double>(v * m)).epsilon(1e-9));
        CHECK(r.bubble_fraction == doctest::Approx(idle / (ideal + idle)).epsilon(1e-9));
        CHECK(r.imbalance_fraction == doctest::Approx(0.0));
        REQUIRE(r.stages.size() == static_cast<size_t>(d));  // one result per rank position
        // Flush of the same stages idles v times as long.
        const SimResult flush = simulate_steady(chunked_input(Schedule::flush, d, 1, m, F, B, 0.0));
        CHECK(flush.step_ms - ideal == doctest::Approx(static_cast<double>(v) * idle).epsilon(1e-9));
      }
}

TEST_CASE("zb-h1 and zb-h2: (d - 1)(F + B - W) against no bubble with F = B = W and m >= 2d") {
  for (int64_t d = 2; d <= 5; ++d)
    for (int64_t m : {2 * d, 2 * d + 1, 3 * d}) {
      CAPTURE(d);
      CAPTURE(m);
      const double t = 0.8, work = static_cast<double>(m) * 3.0 * t;
      const SimResult h1 = simulate_steady(chunked_input(Schedule::zb_h1, d, 1, m, t, t, t));
      CHECK(h1.step_ms == doctest::Approx(work + static_cast<double>(d - 1) * t).epsilon(1e-12));
      const SimResult h2 = simulate_steady(chunked_input(Schedule::zb_h2, d, 1, m, t, t, t));
      CHECK(h2.steady);
      CHECK(h2.step_ms == doctest::Approx(work).epsilon(1e-12));
      CHECK(h2.bubble_fraction == doctest::Approx(0.0));
    }
}

TEST_CASE("zb-v: no bubble with F = B = W per chunk and m >= 2d - 1") {
  for (int64_t d = 2; d <= 4; ++d)
    for (int64_t m : {2 * d - 1, 2 * d, 3 * d + 1}) {
      CAPTURE(d);
      CAPTURE(m);
      const double t = 0.7;
      const SimResult r = simulate_steady(chunked_input(Schedule::zb_v, d, 2, m, t, t, t));
      CHECK(r.steady);
      CHECK(r.step_ms == doctest::Approx(static_cast<double>(m) * 2.0 * 3.0 * t).epsilon(1e-12));
      CHECK(r.bubble_fraction == doctest::Approx(0.0));
    }
}

TEST_CASE("zb-v: the turn between the two chunks of a rank costs nothing") {
  // d = 2, m = 1: position 0 holds chunks 0 and 3, position 1 chunks 1 and 2. By hand, with transfers p
  // that hold both ends: position 0 runs F0 and sends (f + p); position 1 receives, runs F1, hands over
  // to itself, runs F2 and sends (3f + 2p); position 0 receives, runs F3 and B3 and sends the gradient
  // (4f + b + 3p), then W3; position 1 receives, runs B2, W2, B1, sends (4f + 3b + w + 4p), W1; position
  // 0 receives, runs B0 and W0: the step ends at 4 (f + b + p) + 2 w, and the next one repeats it. A
  // turn that cost p each way would add at least 2 p.
  const double f = 1.0, b = 1.25, w = 0.5, p = 0.3;
  SimInput in = chunked_input(Schedule::zb_v, 2, 2, 1, f, b, w, p);
  const SimResult r = simulate_steady(in, true);
  CHECK(r.first_step_ms == doctest::Approx(4 * (f + b + p) + 2 * w).epsilon(1e-12));
  CHECK(r.step_ms == doctest::Approx(4 * (f + b + p) + 2 * w).epsilon(1e-12));
  int64_t local = 0, remote = 0;
  for (const auto& e : r.events) {
    if (e.kind != OpKind::send_activation && e.kind != OpKind::recv_activation && e.kind != OpKind::send_gradient &&
        e.kind != OpKind::recv_gradient)
      continue;
    const bool turn = (e.kind == OpKind::send_activation && e.chunk == 1) ||
                      (e.kind == OpKind::recv_activation && e.chunk == 2) ||
                      (e.kind == OpKind::send_gradient && e.chunk == 2) || (e.kind == OpKind::recv_gradient && e.chunk == 1);
    CHECK(e.end_ms - e.start_ms == doctest::Approx(turn ? 0.0 : p));
    if (turn) CHECK(e.stage == 1);
    ++(turn ? local : remote);
  }
  const auto steps = static_cast<int64_t>(r.step_end_ms.size());
  CHECK(local == 4 * steps);
  CHECK(remote == 8 * steps);
  // Whatever the input says about the turn, it stays local.
  in.boundary_ms[0][1] = 100.0;
  CHECK(simulate_steady(in).step_ms == doctest::Approx(r.step_ms).epsilon(1e-12));
}

TEST_CASE("a rank's memory peak is its chunks' static terms plus the stash walk's peak") {
  struct Case {
    Schedule kind;
    int64_t v;
  };
  int64_t checked = 0;
  for (const Case k : {Case{Schedule::interleaved, 2}, Case{Schedule::interleaved, 3}, Case{Schedule::zb_v, 2},
                       Case{Schedule::zb_h2, 1}})
    for (int64_t d = 2; d <= 4; ++d)
      for (int64_t m : {d, 2 * d, 3 * d})
        for (int64_t redo = -1; redo < d; ++redo) {  // -1: nobody recomputes, else that position does
          CAPTURE(pd2bw::schemas::to_string(k.kind));
          CAPTURE(d);
          CAPTURE(m);
          CAPTURE(redo);
          SimInput in = chunked_input(k.kind, d, k.v, m, 1.0, 1.5, 0.75, 0.1);
          if (redo >= 0) set_recompute(in, redo);
          const SimResult r = simulate(in);
          REQUIRE(r.stages.size() == static_cast<size_t>(d));
          for (int64_t i = 0; i < d; ++i) {
            const auto& s = r.stages[static_cast<size_t>(i)];
            CHECK(s.peak_bytes == reference_peak(in, i));
            CHECK(s.peak_in_flight == pipeline::in_flight(k.kind, d, m, i, k.v));
            CHECK(s.max_live_versions == 1);
            ++checked;
          }
          if (k.kind == Schedule::zb_h2 && redo < 0) {  // position 0 holds 2d - 1 activations at its peak
            const auto& st = in.stages[0];
            const int64_t held = std::min(2 * d - 1, m);
            CHECK(r.stages[0].peak_in_flight == held);
            CHECK(r.stages[0].peak_bytes == st.fixed_bytes + st.weights_bytes + held * st.stash_bytes);
          }
        }
  CHECK(checked > 100);
}

TEST_CASE("chunked ops take their own chunk's time: the update sums the rank's, allreduces are per chunk") {
  SimInput in = chunked_input(Schedule::interleaved, 2, 2, 4, 1.0, 2.0, 0.0, 0.2, 2, 0.0);
  for (size_t c = 0; c < in.stages.size(); ++c) {
    in.stages[c].update_ms = 0.25 * static_cast<double>(c + 1);
    in.stages[c].allreduce_ms = 0.5 + static_cast<double>(c);
    in.stages[c].forward_ms = 1.0 + 0.1 * static_cast<double>(c);
  }
  const SimResult r = simulate(in, true);
  int64_t updates = 0, allreduces = 0, forwards = 0;
  for (const auto& e : r.events) {
    const double took = e.end_ms - e.start_ms;
    if (e.kind == OpKind::update) {
      CHECK(e.chunk == -1);
      CHECK(took == doctest::Approx(in.stages[static_cast<size_t>(e.stage)].update_ms +
                                    in.stages[static_cast<size_t>(e.stage + 2)].update_ms));
      ++updates;
    }
    if (e.kind == OpKind::allreduce) {
      CHECK(pd2bw::schemas::chunk_position(Schedule::interleaved, 2, e.chunk) == e.stage);
      CHECK(took == doctest::Approx(in.stages[static_cast<size_t>(e.chunk)].allreduce_ms));
      ++allreduces;
    }
    if (e.kind == OpKind::forward) {
      CHECK(took == doctest::Approx(in.stages[static_cast<size_t>(e.chunk)].forward_ms));
      ++forwards;
    }
  }
  CHECK(updates == 3 * 2 * 2);      // steps x positions x replicas
  CHECK(allreduces == 3 * 4 * 2);   // steps x chunks x replicas
  CHECK(forwards == 3 * 4 * 4 * 2); // steps x chunks x m x replicas
  // What the search may spend on it: no fewer ops than a replay steady at once takes.
  const SimResult s = simulate_steady(in);
  CHECK(s.steady);
  CHECK(s.simulated_ops <= estimated_replay_ops(in));
  CHECK(estimated_replay_ops(in) <= 2 * s.simulated_ops);
}

TEST_CASE("the simulator refuses chunked inputs of the wrong size and ranks that half recompute") {
  SimInput in = chunked_input(Schedule::zb_v, 2, 2, 3, 1.0, 1.0, 1.0);
  SimInput short_of_chunks = in;
  short_of_chunks.stages.pop_back();
  CHECK_THROWS_AS(simulate(short_of_chunks), pd2bw::Error);
  SimInput short_of_links = in;
  short_of_links.boundary_ms[0].pop_back();
  CHECK_THROWS_AS(simulate(short_of_links), pd2bw::Error);
  SimInput half = in;
  half.stages[3].recompute = true;  // chunk 3 shares position 0 with chunk 0
  CHECK_THROWS_AS(simulate(half), pd2bw::Error);
  SimInput both = in;
  both.stages[0].recompute = both.stages[3].recompute = true;
  CHECK_NOTHROW(simulate(both));
}

namespace {

std::string op_label(const SimEvent& e) {  // what chrome_trace calls an op, before its chunk
  switch (e.kind) {
    case OpKind::forward: return "F" + std::to_string(e.microbatch);
    case OpKind::backward: return "B" + std::to_string(e.microbatch);
    case OpKind::backward_input: return "B" + std::to_string(e.microbatch) + " (input)";
    case OpKind::backward_weight: return "W" + std::to_string(e.microbatch);
    case OpKind::recompute: return "R" + std::to_string(e.microbatch);
    case OpKind::send_activation: return "send act " + std::to_string(e.microbatch);
    case OpKind::recv_activation: return "recv act " + std::to_string(e.microbatch);
    case OpKind::send_gradient: return "send grad " + std::to_string(e.microbatch);
    case OpKind::recv_gradient: return "recv grad " + std::to_string(e.microbatch);
    case OpKind::allreduce: return "allreduce step " + std::to_string(e.step);
    case OpKind::update: return "update -> v" + std::to_string(e.version);
  }
  return "?";
}

// Every rank's events are its op list from the generator, in order, once each; the trace has one named
// "X" event per op on the rank's process, naming the chunk exactly when v > 1.
void check_trace(const SimInput& in, const SimResult& r) {
  const int64_t d = in.spec.depth, w = in.spec.width;
  size_t matched = 0;
  for (int64_t i = 0; i < d; ++i)
    for (int64_t rep = 0; rep < w; ++rep) {
      const auto ops = stage_ops(in.spec, i, in.stages[static_cast<size_t>(i)].recompute);
      std::vector<SimEvent> mine;
      for (const auto& e : r.events)
        if (e.stage == i && e.replica == rep) mine.push_back(e);
      REQUIRE(mine.size() == ops.size());
      for (size_t k = 0; k < ops.size(); ++k) {
        const bool same = mine[k].kind == ops[k].kind && mine[k].step == ops[k].step &&
                          mine[k].microbatch == ops[k].microbatch && mine[k].chunk == ops[k].chunk &&
                          mine[k].version == ops[k].version;
        CHECK_MESSAGE(same, "position " << i << " replica " << rep << " op " << k << ": " << to_string(ops[k].kind));
        matched += same ? 1 : 0;
      }
    }
  CHECK(matched == r.events.size());
  const auto doc = nlohmann::json::parse(chrome_trace(in, r));
  std::vector<std::string> names;
  for (const auto& ev : doc["traceEvents"]) {
    if (ev["ph"] == "M" && ev["name"] == "process_name") {
      const std::string label = ev["args"]["name"];
      CHECK((label.find("chunks") != std::string::npos) == (in.spec.chunks > 1));
    }
    if (ev["ph"] != "X") continue;
    CHECK(ev["args"].contains("chunk") == (in.spec.chunks > 1));
    names.push_back(std::to_string(ev["pid"].get<int64_t>()) + ": " + ev["name"].get<std::string>() + " @" +
                    std::to_string(ev["args"]["step"].get<int64_t>()));
  }
  std::vector<std::string> want;
  for (const auto& e : r.events) {
    std::string name = op_label(e);
    if (in.spec.chunks > 1 && e.chunk >= 0) name += " c" + std::to_string(e.chunk);
    want.push_back(std::to_string(in.ranks[static_cast<size_t>(e.stage)][static_cast<size_t>(e.replica)]) + ": " + name +
                   " @" + std::to_string(e.step));
  }
  std::sort(names.begin(), names.end());
  std::sort(want.begin(), want.end());
  CHECK(names == want);
  CHECK(chrome_trace_op_events(r) == static_cast<int64_t>(r.events.size()));
}

}  // namespace

TEST_CASE("a chunked trace has every op of every chunk once, and the trace and the picture name chunks") {
  SimInput inter = chunked_input(Schedule::interleaved, 2, 2, 2, 1.0, 2.0, 0.0, 0.2, 2, 0.5);
  set_recompute(inter, 1);
  SimInput zbv = chunked_input(Schedule::zb_v, 2, 2, 3, 1.0, 2.0, 1.0, 0.2);
  SimInput flush = chunked_input(Schedule::flush, 3, 1, 4, 1.0, 2.0, 0.0, 0.2, 2, 0.5);
  for (const SimInput* in : {&inter, &zbv, &flush}) {
    CAPTURE(pd2bw::schemas::to_string(in->spec.kind));
    const SimResult r = simulate(*in, true);
    check_trace(*in, r);
    const std::string svg = gantt_svg(*in, r, {"a simulated run", 16000});
    const bool chunked = in->spec.chunks > 1;
    CHECK((svg.find("chunk") != std::string::npos) == chunked);
    if (!chunked) continue;
    const auto held = pipeline::chunks_at(in->spec.kind, 2, 2, 0);
    CHECK(svg.find("chunks " + std::to_string(held[0]) + ", " + std::to_string(held[1])) != std::string::npos);
    CHECK(svg.find("microbatch 1 chunk " + std::to_string(held[1])) != std::string::npos);       // tooltips
    CHECK(svg.find(">1c" + std::to_string(held[1]) + "<") != std::string::npos);                 // box labels
    // The later chunk's forward boxes: #4c78a8, 40% darker.
    CHECK(svg.find("fill=\"#2e4865\" stroke=\"#fff\"") != std::string::npos);
  }
}
