// Exact results of the schedule generator's chunked and zero-bubble schedules (the properties over many
// cases are in test_schedule_chunks.cpp):
//  - the replay's steady step with F = B = W = 1 is the papers' (1F1B, interleaved, ZB-H1, ZB-H2, ZB-V);
//  - the op lists of interleaved d = 2, v = 2, m = 4, written out by hand from Megatron-LM's rule;
//  - chunk and microbatch counts a schedule does not allow are usage errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "pd2bw/pipeline/shape.hpp"
#include "pd2bw/planner/schedule.hpp"
#include "schedule_checks.hpp"

using namespace pd2bw::planner;
using namespace pd2bw::testing;
using pd2bw::schemas::Schedule;

namespace {

std::string name(Schedule s) {
  return std::string(pd2bw::schemas::to_string(s));
}

// The steady step of `c` replayed with durations `t`, free communication and updates, over four
// steps: the time between the last two updates, on the position where it is longest. No barrier: each
// position starts its next step right after its update.
int64_t steady_step(const ScheduleCase& c, const Durations& t) {
  const int64_t steps = 4;
  const auto r = replay(c.kind, c.d, position_lists(c, steps, 1, false), t);
  REQUIRE(r.finished);
  int64_t most = 0;
  for (const auto& u : r.updates) {
    REQUIRE(u.size() == static_cast<size_t>(steps));
    most = std::max(most, u[steps - 1] - u[steps - 2]);
  }
  return most;
}

// F and a fused backward of the given lengths on every chunk, B = W = 1.
Durations fused(int64_t chunks, int64_t f, int64_t b) {
  Durations t = Durations::unit(chunks);
  std::fill(t.forward.begin(), t.forward.end(), f);
  std::fill(t.backward.begin(), t.backward.end(), b);
  return t;
}

}  // namespace

TEST_CASE("chunked generator: the papers' steady steps (F = B = W = 1 per chunk, fused backward 1)") {
  for (int64_t d = 1; d <= 6; ++d)
    for (int64_t m = 1; m <= 3 * d + 1; ++m) {
      CAPTURE(d);
      CAPTURE(m);
      const Durations unit = Durations::unit(d), unit2 = Durations::unit(2 * d);
      // ZB-H1 (Qi et al., table 1): the deferred W's fill all but (d - 1)(F + B - W) of 1F1B's bubble.
      if (m >= d) CHECK(steady_step({Schedule::zb_h1, d, 1, m}, unit) == 3 * m + (d - 1));
      // ZB-H2 and ZB-V: no bubble, 3 m per chunk, exactly when m >= 2 d - 1 (the paper states m >= 2 d
      // for ZB-H2; its schedule is already full at 2 d - 1); a bubble below that.
      const int64_t h2 = steady_step({Schedule::zb_h2, d, 1, m}, unit),
                    zv = steady_step({Schedule::zb_v, d, 2, m}, unit2);
      CHECK(h2 >= 3 * m);
      CHECK(zv >= 6 * m);
      CHECK((h2 == 3 * m) == (m >= 2 * d - 1));
      CHECK((zv == 6 * m) == (m >= 2 * d - 1));
      // 1F1B: d - 1 forwards and d - 1 backwards of bubble per step; interleaved (Narayanan et al.
      // 2021): the same bubble in chunk units, so flush's divided by v, behind v m chunk forwards and
      // backwards. Exact for unequal F and B too.
      for (const auto& [f, b] : {std::pair<int64_t, int64_t>{1, 1}, {1, 2}, {2, 1}}) {
        CAPTURE(f);
        CAPTURE(b);
        CHECK(steady_step({Schedule::flush, d, 1, m}, fused(d, f, b)) == (m + d - 1) * (f + b));
        if (m % d == 0)
          for (int64_t v : {2, 3}) {
            CAPTURE(v);
            CHECK(steady_step({Schedule::interleaved, d, v, m}, fused(d * v, f, b)) == (v * m + d - 1) * (f + b));
          }
      }
    }
}

namespace {

std::vector<std::string> names(const std::vector<Op>& ops) {
  std::vector<std::string> out;
  for (const Op& op : ops) {
    std::string s(to_string(op.kind));
    if (op.chunk >= 0) s += " c" + std::to_string(op.chunk);
    if (op.microbatch >= 0) s += " m" + std::to_string(op.microbatch);
    out.push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("interleaved generator: the op lists of d = 2, v = 2, m = 4, written out from Megatron-LM's rule") {
  // Position 0 holds chunks 0 and 2, position 1 chunks 1 and 3. Megatron's k-th forward on a rank runs
  // its local chunk (k mod d v) / d on microbatch (k / d v) d + k mod d: F c0 m0, c0 m1, c2 m0, c2 m1,
  // c0 m2, c0 m3, c2 m2, c2 m3 on position 0; its k-th backward the same with the local chunks
  // reversed: c2 m0, c2 m1, c0 m0, c0 m1, c2 m2, c2 m3, c0 m2, c0 m3. m != d, so position i warms up
  // with 2 (d - i - 1) + (v - 1) d forwards: 4 on position 0, 2 on position 1; then each forward is
  // followed by a backward, and the remaining backwards drain. A forward of chunk c > 0 receives first, a
  // forward of c < 3 sends after; a backward of c < 3 receives first, of c > 0 sends after.
  // clang-format off
  const std::vector<std::string> pos0 = {
      "forward c0 m0", "send_activation c0 m0",  // warm-up
      "forward c0 m1", "send_activation c0 m1",
      "recv_activation c2 m0", "forward c2 m0", "send_activation c2 m0",
      "recv_activation c2 m1", "forward c2 m1", "send_activation c2 m1",
      "forward c0 m2", "send_activation c0 m2",  // 1F1B
      "recv_gradient c2 m0", "backward c2 m0", "send_gradient c2 m0",
      "forward c0 m3", "send_activation c0 m3",
      "recv_gradient c2 m1", "backward c2 m1", "send_gradient c2 m1",
      "recv_activation c2 m2", "forward c2 m2", "send_activation c2 m2",
      "recv_gradient c0 m0", "backward c0 m0",
      "recv_activation c2 m3", "forward c2 m3", "send_activation c2 m3",
      "recv_gradient c0 m1", "backward c0 m1",
      "recv_gradient c2 m2", "backward c2 m2", "send_gradient c2 m2",  // drain
      "recv_gradient c2 m3", "backward c2 m3", "send_gradient c2 m3",
      "recv_gradient c0 m2", "backward c0 m2",
      "recv_gradient c0 m3", "backward c0 m3",
      "update"};
  const std::vector<std::string> pos1 = {
      "recv_activation c1 m0", "forward c1 m0", "send_activation c1 m0",  // warm-up
      "recv_activation c1 m1", "forward c1 m1", "send_activation c1 m1",
      "recv_activation c3 m0", "forward c3 m0",  // 1F1B
      "backward c3 m0", "send_gradient c3 m0",
      "recv_activation c3 m1", "forward c3 m1",
      "backward c3 m1", "send_gradient c3 m1",
      "recv_activation c1 m2", "forward c1 m2", "send_activation c1 m2",
      "recv_gradient c1 m0", "backward c1 m0", "send_gradient c1 m0",
      "recv_activation c1 m3", "forward c1 m3", "send_activation c1 m3",
      "recv_gradient c1 m1", "backward c1 m1", "send_gradient c1 m1",
      "recv_activation c3 m2", "forward c3 m2",
      "backward c3 m2", "send_gradient c3 m2",
      "recv_activation c3 m3", "forward c3 m3",
      "backward c3 m3", "send_gradient c3 m3",
      "recv_gradient c1 m2", "backward c1 m2", "send_gradient c1 m2",  // drain
      "recv_gradient c1 m3", "backward c1 m3", "send_gradient c1 m3",
      "update"};
  // m = d: Megatron warms up with all m v forwards, then runs all backwards.
  const std::vector<std::string> all_warm = {
      "forward c0 m0", "send_activation c0 m0",
      "forward c0 m1", "send_activation c0 m1",
      "recv_activation c2 m0", "forward c2 m0", "send_activation c2 m0",
      "recv_activation c2 m1", "forward c2 m1", "send_activation c2 m1",
      "recv_gradient c2 m0", "backward c2 m0", "send_gradient c2 m0",
      "recv_gradient c2 m1", "backward c2 m1", "send_gradient c2 m1",
      "recv_gradient c0 m0", "backward c0 m0",
      "recv_gradient c0 m1", "backward c0 m1",
      "update"};
  // clang-format on
  CHECK(names(stage_ops({Schedule::interleaved, 2, 4, 1, 1, 2}, 0, false)) == pos0);
  CHECK(names(stage_ops({Schedule::interleaved, 2, 4, 1, 1, 2}, 1, false)) == pos1);
  CHECK(names(stage_ops({Schedule::interleaved, 2, 2, 1, 1, 2}, 0, false)) == all_warm);
  // With recompute and two replicas: a Recompute after each gradient arrives, the chunks' allreduces
  // (model order) before the update.
  const auto r = names(stage_ops({Schedule::interleaved, 2, 4, 1, 2, 2}, 1, true));
  CHECK(std::vector<std::string>(r.begin() + 8, r.begin() + 10) ==
        std::vector<std::string>{"recompute c3 m0", "backward c3 m0"});
  CHECK(std::vector<std::string>(r.end() - 3, r.end()) ==
        std::vector<std::string>{"allreduce c1", "allreduce c3", "update"});
}

TEST_CASE("chunked generator: chunks and microbatch counts the schedules do not allow are usage errors") {
  const auto refused = [](ScheduleSpec s, int64_t stage) {
    CAPTURE(name(s.kind));
    CAPTURE(s.depth);
    CAPTURE(s.microbatches);
    CAPTURE(s.chunks);
    CHECK_THROWS_AS(stage_ops(s, stage, false), pd2bw::UsageError);
    CHECK_THROWS_AS(pd2bw::pipeline::StageOpStream(s, stage, false), pd2bw::UsageError);
  };
  refused({Schedule::interleaved, 2, 4, 1, 1, 1}, 0);  // interleaved needs v >= 2
  refused({Schedule::zb_v, 2, 4, 1, 1, 3}, 0);         // zb-v holds exactly 2
  refused({Schedule::zb_v, 2, 4, 1, 1, 1}, 0);
  refused({Schedule::zb_h2, 2, 4, 1, 1, 2}, 0);  // the others hold 1
  refused({Schedule::flush, 2, 4, 1, 1, 2}, 0);
  refused({Schedule::interleaved, 4, 6, 1, 1, 2}, 0);  // m not a multiple of d
  refused({Schedule::interleaved, 4, 2, 1, 1, 2}, 0);  // m < d
  refused({Schedule::interleaved, 3, 0, 1, 1, 2}, 0);
  refused({Schedule::interleaved, 2, 4, 1, 1, 2}, 2);  // position out of range
  refused({Schedule::zb_v, 3, 4, 1, 1, 2}, -1);
  // The smallest allowed ones run.
  CHECK_NOTHROW(stage_ops({Schedule::interleaved, 4, 4, 1, 1, 2}, 3, false));
  CHECK_NOTHROW(stage_ops({Schedule::zb_v, 4, 1, 1, 1, 2}, 3, false));
  CHECK_NOTHROW(stage_ops({Schedule::zb_h2, 4, 1, 1, 1, 1}, 0, false));
}
