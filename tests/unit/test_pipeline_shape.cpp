// The pipeline library's shape rules and memory model: PipelineShape::validate names each inconsistency,
// the placement rule and in-flight counts match hand-written tables, a plan's shape reads back, and one
// stage of each schedule costs what the closed form of DESIGN.md section 5 says, term by term.
#include <doctest/doctest.h>

#include <functional>

#include "pd2bw/error.hpp"
#include "pd2bw/pipeline/memory.hpp"
#include "pd2bw/pipeline/schedule.hpp"
#include "pd2bw/pipeline/shape.hpp"

using namespace pd2bw;
using namespace pd2bw::pipeline;

namespace {

// 2bw, d = 3, w = 2, m = 4, b = 2 over 7 layers, replicas inner.
PipelineShape good_shape() {
  PipelineShape s;
  s.schedule = Schedule::two_bw;
  s.depth = 3;
  s.width = 2;
  s.microbatches = 4;
  s.microbatch_size = 2;
  s.bounds = {0, 2, 5, 7};
  s.recompute = {true, false, false};
  s.ranks = {{0, 1}, {2, 3}, {4, 5}};
  return s;
}

void refused(const std::function<void(PipelineShape&)>& change, const char* message) {
  PipelineShape s = good_shape();
  change(s);
  CAPTURE(message);
  CHECK_THROWS_WITH_AS(s.validate(7), doctest::Contains(message), UsageError);
}

}  // namespace

TEST_CASE("validate accepts a consistent shape and names each inconsistency") {
  CHECK_NOTHROW(good_shape().validate(7));
  refused([](PipelineShape& s) { s.depth = 0; }, "pipeline needs d, w, m, b >= 1 (got d=0 w=2 m=4 b=2)");
  refused([](PipelineShape& s) { s.width = 0; }, "(got d=3 w=0 m=4 b=2)");
  refused([](PipelineShape& s) { s.microbatches = 0; }, "(got d=3 w=2 m=0 b=2)");
  refused([](PipelineShape& s) { s.microbatch_size = 0; }, "(got d=3 w=2 m=4 b=0)");
  refused([](PipelineShape& s) { s.microbatches = 2; }, "2bw needs m >= d (got m=2 d=3)");
  refused([](PipelineShape& s) { s.bounds = {0, 2, 7}; }, "stage bounds must run from 0 to the model's 7 layers in 3 stages");
  refused([](PipelineShape& s) { s.bounds = {1, 2, 5, 7}; }, "stage bounds must run from 0");
  refused([](PipelineShape& s) { s.bounds = {0, 2, 5, 6}; }, "stage bounds must run from 0");
  refused([](PipelineShape& s) { s.bounds = {0, 2, 2, 7}; }, "stage 1 holds no layers");
  refused([](PipelineShape& s) { s.bounds = {0, 5, 2, 7}; }, "stage 1 holds no layers");
  refused([](PipelineShape& s) { s.recompute = {true, false}; }, "one recompute flag per stage is needed");
  refused([](PipelineShape& s) { s.ranks.pop_back(); }, "the rank table needs one row per stage");
  refused([](PipelineShape& s) { s.ranks[1] = {2}; }, "the rank table needs one rank per replica");
  refused([](PipelineShape& s) { s.ranks[2] = {4, 6}; }, "rank 6 is out of range or repeated");
  refused([](PipelineShape& s) { s.ranks[2] = {4, -1}; }, "rank -1 is out of range or repeated");
  refused([](PipelineShape& s) { s.ranks[2] = {4, 3}; }, "rank 3 is out of range or repeated");
  // Flush and GPipe run with fewer microbatches than stages.
  for (Schedule k : {Schedule::flush, Schedule::gpipe}) {
    PipelineShape s = good_shape();
    s.schedule = k;
    s.microbatches = 1;
    CHECK_NOTHROW(s.validate(7));
  }
}

TEST_CASE("the placement rule and the in-flight counts") {
  using Table = std::vector<std::vector<int64_t>>;
  CHECK(rank_table(Placement::replicas_inner, 3, 2) == Table{{0, 1}, {2, 3}, {4, 5}});
  CHECK(rank_table(Placement::stages_inner, 3, 2) == Table{{0, 3}, {1, 4}, {2, 5}});
  CHECK(rank_table(Placement::stages_inner, 1, 3) == Table{{0, 1, 2}});
  CHECK_THROWS_AS(rank_table(Placement::replicas_inner, 0, 2), UsageError);
  for (Placement p : {Placement::replicas_inner, Placement::stages_inner}) {
    PipelineShape s = good_shape();
    s.ranks = rank_table(p, s.depth, s.width);
    CHECK_NOTHROW(s.validate(7));
  }

  const std::vector<int64_t> two_bw{4, 3, 2, 1}, flush_short{2, 2, 2, 1};
  for (int64_t i = 0; i < 4; ++i) {
    CHECK(in_flight(Schedule::two_bw, 4, 6, i) == two_bw[static_cast<size_t>(i)]);
    CHECK(in_flight(Schedule::flush, 4, 2, i) == flush_short[static_cast<size_t>(i)]);
    CHECK(in_flight(Schedule::gpipe, 4, 5, i) == 5);
  }
  CHECK(good_shape().in_flight(0) == 3);
  CHECK(pipeline_factor(Schedule::two_bw, 4, 6) == 6);
  CHECK(pipeline_factor(Schedule::flush, 4, 6) == 9);
  CHECK(pipeline_factor(Schedule::gpipe, 4, 6) == 9);
  CHECK(min_microbatches(Schedule::two_bw, 5) == 5);
  CHECK(min_microbatches(Schedule::flush, 5) == 1);

  const ScheduleSpec spec = schedule_spec(good_shape(), 3);
  CHECK(spec.kind == Schedule::two_bw);
  CHECK((spec.depth == 3 && spec.microbatches == 4 && spec.steps == 3 && spec.width == 2));
}

TEST_CASE("a plan's shape reads back") {
  schemas::Plan plan;
  plan.schedule = Schedule::flush;
  plan.depth = 2;
  plan.width = 2;
  plan.microbatches_per_step = 3;
  plan.microbatch_size = 4;
  plan.stages.resize(2);
  plan.stages[0] = {0, 0, 3, true, {0, 2}};
  plan.stages[1] = {1, 3, 5, false, {1, 3}};
  const PipelineShape s = shape_of(plan);
  CHECK(s.schedule == Schedule::flush);
  CHECK((s.depth == 2 && s.width == 2 && s.microbatches == 3 && s.microbatch_size == 4));
  CHECK(s.bounds == std::vector<int64_t>{0, 3, 5});
  CHECK(s.recompute == std::vector<bool>{true, false});
  CHECK(s.ranks == rank_table(Placement::stages_inner, 2, 2));
  CHECK_NOTHROW(s.validate(5));
}

// One middle stage (comm both ways) of 500 parameters: P bytes in the compute dtype, one microbatch's
// stash S = 300, input I = 40, output O = 50, reserve R = 7. Closed form:
// weights = versions P, master = (compute != state) P / compute * state, grads = P / compute * state,
// optimizer = moments * grads, stash = f S (or f I + S recomputing), comm = 2 I + 2 O.
TEST_CASE("the memory model matches the closed form for one stage of each schedule") {
  const int64_t S = 300, I = 40, O = 50, R = 7, L = 1 << 20;
  const int64_t comm = comm_buffer_bytes(1, 4, I, O);
  CHECK(comm == 2 * I + 2 * O);
  CHECK(comm_buffer_bytes(0, 4, I, O) == 2 * O);
  CHECK(comm_buffer_bytes(3, 4, I, O) == 2 * I);
  CHECK(comm_buffer_bytes(0, 1, I, O) == 0);

  struct Case {
    Schedule s;
    Optimizer o;
    int64_t compute_bytes, in_flight;
    bool recompute;
    int64_t weights, master, grads, optimizer, stash;
    const char* dominant;
  };
  // 2bw d = 4 stage 1 m = 4: f = 3; bf16 compute (P = 1000), AdamW: 2 versions, fp32 master.
  // flush d = 4 stage 1 m = 4: f = 3; bf16, SGD, recompute: stash = 3 I + S.
  // gpipe m = 5: f = 5; fp32 compute (P = 2000), AdamW, no master.
  const Case cases[] = {
      {Schedule::two_bw, Optimizer::adamw, 2, in_flight(Schedule::two_bw, 4, 4, 1), false,
       2 * 1000, 2000, 2000, 2 * 2000, 3 * S, "optimizer"},
      {Schedule::flush, Optimizer::sgd, 2, in_flight(Schedule::flush, 4, 4, 1), true,
       1000, 2000, 2000, 2000, 3 * I + S, "master"},
      {Schedule::gpipe, Optimizer::adamw, 4, in_flight(Schedule::gpipe, 4, 5, 1), false,
       2000, 0, 2000, 2 * 2000, 5 * S, "optimizer"},
  };
  for (const Case& c : cases) {
    CAPTURE(schemas::to_string(c.s));
    const int64_t P = 500 * c.compute_bytes;
    const MemoryFactors f = memory_factors(c.s, c.o, c.compute_bytes, 4);
    const StageMemoryInput in{P, S, I, comm, c.in_flight, c.recompute, R};
    const schemas::MemoryBreakdown m = stage_memory(f, in, L);
    CHECK(m.weights_bytes == c.weights);
    CHECK(m.master_bytes == c.master);
    CHECK(m.grads_bytes == c.grads);
    CHECK(m.optimizer_bytes == c.optimizer);
    CHECK(m.stash_bytes == c.stash);
    CHECK(m.comm_bytes == 180);
    CHECK(m.reserve_bytes == R);
    CHECK(m.total_bytes == c.weights + c.master + c.grads + c.optimizer + c.stash + 180 + R);
    CHECK(m.limit_bytes == L);
    CHECK(m.dominant == c.dominant);
    CHECK(f.total(P) == c.weights + c.master + c.grads + c.optimizer);
    // The replay's terms add up to the same peak when every version and in-flight slot is held.
    const StageMemoryTerms t = stage_memory_terms(f, in);
    CHECK(t.version_bytes == P);
    CHECK(t.fixed_bytes == c.master + c.grads + c.optimizer + 180 + R);
    CHECK(t.per_microbatch_bytes == (c.recompute ? I : S));
    CHECK(t.recompute_bytes == (c.recompute ? S : 0));
    CHECK(f.versions * t.version_bytes + t.fixed_bytes + c.in_flight * t.per_microbatch_bytes + t.recompute_bytes ==
          m.total_bytes);
  }
}

TEST_CASE("the executor's form of the model keeps everything in its scalar type") {
  // double everywhere: no master copy; 2bw + AdamW holds 2 versions + grads + 2 moments = 5 copies.
  const MemoryFactors f = memory_factors(Schedule::two_bw, Optimizer::adamw, 8, 8);
  CHECK_FALSE(f.master());
  CHECK(f.total(800) == 5 * 800);
  CHECK(memory_factors(Schedule::gpipe, Optimizer::sgd, 4, 4).total(400) == 3 * 400);
  CHECK_THROWS_AS(memory_factors(Schedule::flush, Optimizer::sgd, 0, 4), UsageError);
}

TEST_CASE("most_params_within: the parameter bytes whose static memory fits are exactly those up to it") {
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ULL + 1442695040888963407ULL; };
  int64_t checked = 0;
  for (const Schedule s : {Schedule::two_bw, Schedule::flush, Schedule::zb_h1})
    for (const Optimizer o : {Optimizer::sgd, Optimizer::adamw})
      for (const int64_t compute_bytes : {1, 2, 4, 8})
        for (int k = 0; k < 200; ++k) {
          const MemoryFactors f = memory_factors(s, o, compute_bytes, 4);
          // Caps from tiny to past where total() saturates.
          const int64_t cap = static_cast<int64_t>(next() >> (1 + next() % 63));
          const int64_t most = f.most_params_within(cap);
          CAPTURE(cap);
          CAPTURE(most);
          if (most < 0) {
            CHECK(f.total(0) > cap);
            continue;
          }
          CHECK(f.total(most) <= cap);
          if (most < INT64_MAX) CHECK(f.total(most + 1) > cap);
          for (int j = 0; j < 8; ++j) {  // and on either side of it
            const int64_t p = static_cast<int64_t>(next() >> 1) % (most / 2 + 1);
            CHECK(f.total(p) <= cap);
            if (most < INT64_MAX - p - 1) CHECK(f.total(most + 1 + p) > cap);
          }
          ++checked;
        }
  CHECK(checked > 2000);
  CHECK(memory_factors(Schedule::flush, Optimizer::sgd, 4, 4).most_params_within(-1) == -1);
}

TEST_CASE("zb-h1's shape: one version, 1F1B's in-flight bound, W's deferred by the stage, the split stash term") {
  for (int64_t i = 0; i < 4; ++i) {
    CHECK(in_flight(Schedule::zb_h1, 4, 6, i) == 4 - i);
    CHECK(deferred_weight_grads(Schedule::zb_h1, 6, i) == i);
    CHECK(deferred_weight_grads(Schedule::zb_h1, 2, i) == std::min<int64_t>(i, 1));
    CHECK(deferred_weight_grads(Schedule::flush, 6, i) == 0);
  }
  CHECK(weight_versions(Schedule::zb_h1) == 1);
  CHECK(pipeline_factor(Schedule::zb_h1, 4, 6) == 9);
  CHECK(min_microbatches(Schedule::zb_h1, 5) == 1);
  // Stage 2 of 4 with m >= d: 2 activations (S = 300 each) and 2 deferred W stashes (G = 120) before a
  // B; after it, 1 activation and 3 W stashes. With recompute: inputs (I = 40) plus one rebuilt stash.
  const int64_t S = 300, I = 40, G = 120;
  CHECK(split_stash_term(4, 6, 2, false, I, S, G) == std::max(2 * S + 2 * G, S + 3 * G));
  CHECK(split_stash_term(4, 6, 2, true, I, S, G) == std::max(2 * I + S + 2 * G, I + 3 * G));
  CHECK(split_stash_term(1, 1, 0, false, I, S, 5 * S) == 5 * S);  // a W stash larger than the stash: after B
  // Against every B of the step, counted from the schedule's rule: before the B of k, min(d - i, m - k)
  // activations and min(k, i) W's.
  for (int64_t d = 1; d <= 6; ++d)
    for (int64_t m = 1; m <= 9; ++m)
      for (int64_t i = 0; i < d; ++i)
        for (const auto& [act, wg] : {std::pair<int64_t, int64_t>{S, G}, {I, G}, {S, 2 * S}})
          for (bool redo : {false, true}) {
            int64_t most = 0;
            for (int64_t k = 0; k < m; ++k) {
              const int64_t a = std::min(d - i, m - k), w = std::min(k, i);
              const int64_t per = redo ? I : act;
              most = std::max({most, a * per + (redo ? act : 0) + w * wg, (a - 1) * per + (w + 1) * wg});
            }
            CAPTURE(d);
            CAPTURE(m);
            CAPTURE(i);
            CHECK(split_stash_term(d, m, i, redo, I, act, wg) == most);
          }
  const MemoryFactors f = memory_factors(Schedule::zb_h1, Optimizer::adamw, 4, 4);
  StageMemoryInput in{2000, S, I, 0, 2, false, 0};
  in.split_backward = true;
  in.weight_grad_bytes = G;
  in.stage = 2;
  in.depth = 4;
  in.microbatches = 6;
  CHECK(stage_memory(f, in, 1 << 20).stash_bytes == split_stash_term(4, 6, 2, false, I, S, G));
  CHECK(stage_memory_terms(f, in).weight_grad_bytes == G);
  in.split_backward = false;
  CHECK(stage_memory(f, in, 1 << 20).stash_bytes == 2 * S);
  CHECK(stage_memory_terms(f, in).weight_grad_bytes == 0);
}
