// Property tests of the schedule generator's chunked and zero-bubble schedules (interleaved, zb-h2, zb-v),
// with flush, gpipe and zb-h1 through the same checks, over many (d, v, m, steps, position, recompute,
// width):
//  - every (step, chunk, microbatch) gets one forward and one backward (B and W when split), in that
//    order, on the position that holds the chunk; versions equal the step; a Recompute right before each
//    backward; one allreduce per chunk (width > 1) and one update per step, after all of the step's ops;
//  - each chunk's backwards and W's run in ascending microbatch order;
//  - sends and receives pair up, zb-v's hand-over on one position included (schedule_checks.hpp), and a
//    replay (each position runs its list in order, a receive waits for its message, a send never
//    blocks) finishes for unit and random durations;
//  - the activations a position holds at once: Megatron's warm-up count + 1 (interleaved), min(2 (d - i)
//    - 1, m) (zb-h2), at most 1F1B's 2 d chunk halves (zb-v);
//  - the replay's steady step with F = B = W = 1 is the papers' (1F1B, interleaved, ZB-H1, ZB-H2, ZB-V);
//  - the op lists of interleaved d = 2, v = 2, m = 4, written out by hand from Megatron-LM's rule;
//  - chunk and microbatch counts a schedule does not allow are usage errors.
// The stash walk's tests are in test_stash_walk.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "pd2bw/pipeline/shape.hpp"
#include "pd2bw/planner/schedule.hpp"
#include "schedule_checks.hpp"

using namespace pd2bw::planner;
using namespace pd2bw::testing;
using pd2bw::pipeline::chunks_at;
using pd2bw::schemas::Schedule;

namespace {

std::string name(Schedule s) {
  return std::string(pd2bw::schemas::to_string(s));
}

struct Held {
  int64_t activations = 0;  // most microbatches between forward and backward (or B), all chunks together
  int64_t with_w = 0;       // most of those plus the B's whose W has not run
};

using Key = std::tuple<int64_t, int64_t, int64_t>;  // (step, chunk, microbatch)

// What one position's list has done so far in the current step, by chunk.
struct StepState {
  std::map<int64_t, int64_t> next_f, next_b, next_w;  // the next microbatch of each kind: ascending order
  std::set<int64_t> reduced;                          // chunks allreduced
};

// Checks an update: one per step, after every op of the step.
void check_update(const ScheduleCase& c, int64_t width, const std::vector<int64_t>& held, const Op& op,
                  int64_t& updates, StepState& st) {
  const bool split = pd2bw::schemas::splits_backward(c.kind);
  CHECK(op.chunk == -1);
  CHECK(op.microbatch == -1);
  CHECK(op.step == updates);
  CHECK(op.version == ++updates);  // version = step + 1
  CHECK(static_cast<int64_t>(st.reduced.size()) == (width > 1 ? c.v : 0));
  for (int64_t ch : held) {
    CHECK(st.next_f[ch] == c.m);
    CHECK(st.next_b[ch] == c.m);
    CHECK(st.next_w[ch] == (split ? c.m : 0));
  }
  st = StepState{};
}

// Moves `chunk`'s cursor of one kind on and says whether `microbatch` was the one due (ascending order).
bool in_turn(std::map<int64_t, int64_t>& next, int64_t chunk, int64_t microbatch) {
  return microbatch == next[chunk]++;
}

// Checks position `pos`'s list on its own (a synchronous schedule) and returns what it held at most.
// CHEAP_CHECK is CHECK on failure only: these loops test millions of ops.
Held check_position(const ScheduleCase& c, int64_t steps, int64_t width, bool recompute, int64_t pos,
                    const std::vector<Op>& ops) {
  const bool split = pd2bw::schemas::splits_backward(c.kind);
  const int64_t total = c.d * c.v;
  const auto held = chunks_at(c.kind, c.d, c.v, pos);
  REQUIRE(static_cast<int64_t>(held.size()) == c.v);
  for (int64_t ch : held) CHECK(pd2bw::schemas::chunk_position(c.kind, c.d, ch) == pos);
  const std::set<int64_t> mine(held.begin(), held.end());
  std::map<Key, size_t> fwd, bwd, wgt, recv_act, send_act, recv_grad, send_grad;
  const auto record = [](std::map<Key, size_t>& seen, const Key& k, size_t at) {
    const bool fresh = seen.emplace(k, at).second;  // once per (step, chunk, microbatch)
    CHEAP_CHECK(fresh);
  };
  StepState st;
  int64_t updates = 0, acts = 0, waiting = 0;
  Held most;
  for (size_t at = 0; at < ops.size(); ++at) {
    const Op& op = ops[at];
    const Key key{op.step, op.chunk, op.microbatch};
    CAPTURE(at);
    if (op.kind == OpKind::update) {
      CHECK(acts == 0);
      CHECK(waiting == 0);
      check_update(c, width, held, op, updates, st);
      continue;
    }
    CHEAP_CHECK(op.step == updates);  // nothing of step j + 1 before update j, nothing of step j after it
    if (mine.count(op.chunk) == 0) FAIL("chunk " << op.chunk << " is not held here");
    if (op.kind == OpKind::allreduce) {
      CHECK(width > 1);
      CHECK(op.microbatch == -1);
      CHECK(st.reduced.insert(op.chunk).second);
      CHECK((split ? st.next_w : st.next_b)[op.chunk] == c.m);  // after every gradient of the chunk
      continue;
    }
    CHEAP_CHECK(st.reduced.count(op.chunk) == 0);
    if (op.microbatch < 0 || op.microbatch >= c.m) FAIL("microbatch " << op.microbatch << " out of range");
    const bool computes = op.kind == OpKind::forward || op.kind == OpKind::recompute || op.kind == OpKind::backward ||
                          op.kind == OpKind::backward_input || op.kind == OpKind::backward_weight;
    CHEAP_CHECK(op.version == (computes ? op.step : 0));  // synchronous: step j reads the weights of j updates
    const bool first = op.chunk == 0, last = op.chunk + 1 == total;
    switch (op.kind) {
      case OpKind::recv_activation:
        CHEAP_CHECK(!first);
        CHEAP_CHECK(fwd.count(key) == 0);
        record(recv_act, key, at);
        break;
      case OpKind::forward: {
        const bool due = in_turn(st.next_f, op.chunk, op.microbatch);
        CHEAP_CHECK(due);
        CHEAP_CHECK(recv_act.count(key) == (first ? 0u : 1u));  // its input arrived before
        record(fwd, key, at);
        ++acts;
        break;
      }
      case OpKind::send_activation:
        CHEAP_CHECK(!last);
        CHEAP_CHECK(fwd.count(key) == 1);
        record(send_act, key, at);
        break;
      case OpKind::recv_gradient:
        CHEAP_CHECK(!last);
        CHEAP_CHECK(bwd.count(key) == 0);
        record(recv_grad, key, at);
        break;
      case OpKind::recompute:  // right before its backward, after the forward
        CHEAP_CHECK(recompute);
        CHEAP_CHECK(fwd.count(key) == 1);
        if (at + 1 == ops.size()) FAIL("a recompute ends the list");
        CHEAP_CHECK(ops[at + 1].kind == (split ? OpKind::backward_input : OpKind::backward));
        CHEAP_CHECK(Key{ops[at + 1].step, ops[at + 1].chunk, ops[at + 1].microbatch} == key);
        break;
      case OpKind::backward:
      case OpKind::backward_input: {
        const bool due = in_turn(st.next_b, op.chunk, op.microbatch);
        CHEAP_CHECK(due);
        CHEAP_CHECK(op.kind == (split ? OpKind::backward_input : OpKind::backward));
        CHEAP_CHECK(fwd.count(key) == 1);
        CHEAP_CHECK(recv_grad.count(key) == (last ? 0u : 1u));
        CHEAP_CHECK((at > 0 && ops[at - 1].kind == OpKind::recompute) == recompute);
        record(bwd, key, at);
        --acts;
        if (split) ++waiting;
        break;
      }
      case OpKind::backward_weight: {
        const bool due = in_turn(st.next_w, op.chunk, op.microbatch);
        CHEAP_CHECK(due);
        CHEAP_CHECK(split);
        CHEAP_CHECK(bwd.count(key) == 1);
        record(wgt, key, at);
        --waiting;
        break;
      }
      case OpKind::send_gradient:
        CHEAP_CHECK(!first);
        CHEAP_CHECK(bwd.count(key) == 1);
        record(send_grad, key, at);
        break;
      default:
        FAIL("unexpected op " << to_string(op.kind));
    }
    most.activations = std::max(most.activations, acts);
    most.with_w = std::max(most.with_w, acts + waiting);
  }
  CHECK(updates == steps);
  const auto n = static_cast<size_t>(steps * c.m);
  const auto inner = [&](bool input) {  // chunks with an input from (or an output to) another chunk
    return static_cast<size_t>(
        std::count_if(held.begin(), held.end(), [&](int64_t ch) { return input ? ch > 0 : ch + 1 < total; }));
  };
  CHECK(fwd.size() == n * held.size());
  CHECK(bwd.size() == n * held.size());
  CHECK(wgt.size() == (split ? n * held.size() : 0));
  CHECK(recv_act.size() == n * inner(true));
  CHECK(send_grad.size() == n * inner(true));
  CHECK(send_act.size() == n * inner(false));
  CHECK(recv_grad.size() == n * inner(false));
  return most;
}

}  // namespace

TEST_CASE("chunked generator: every chunk's ops, once each, in order, on its position; sends pair; no deadlock") {
  // The ascending microbatch order of each chunk's backwards (its W's when split) is what makes these
  // schedules compute flush's math: a chunk's gradient sums its microbatches in the same order.
  Rng rng(20240611);
  int64_t checked = 0;
  for (const ScheduleCase& c : chunked_cases()) {
    CAPTURE(name(c.kind));
    CAPTURE(c.d);
    CAPTURE(c.v);
    CAPTURE(c.m);
    // The chunks of the positions partition 0 .. d v - 1.
    std::vector<int64_t> every;
    for (int64_t i = 0; i < c.d; ++i)
      for (int64_t ch : chunks_at(c.kind, c.d, c.v, i)) every.push_back(ch);
    std::sort(every.begin(), every.end());
    for (int64_t ch = 0; ch < c.d * c.v; ++ch) CHECK(every.at(static_cast<size_t>(ch)) == ch);
    for (int64_t steps = 1; steps <= 3; ++steps)
      for (int64_t width : {1, 2})
        for (bool recompute : {false, true}) {
          CAPTURE(steps);
          CAPTURE(width);
          CAPTURE(recompute);
          const auto all = position_lists(c, steps, width, recompute);
          for (int64_t i = 0; i < c.d; ++i) check_position(c, steps, width, recompute, i, all[static_cast<size_t>(i)]);
          check_chunk_pairing(c.kind, c.d, c.v, all);
          // A static order deadlocks for every duration or for none; both are tried: unit durations and
          // three random draws (per op kind and chunk, with a message latency).
          CHECK(replay(c.kind, c.d, all, Durations::unit(c.d * c.v)).finished);
          for (int draw = 0; draw < 3; ++draw)
            CHECK(replay(c.kind, c.d, all, Durations::random(c.d * c.v, rng)).finished);
          ++checked;
        }
  }
  CHECK(checked > 4000);
}

TEST_CASE("chunked generator: the activations a position holds at once") {
  for (const ScheduleCase& c : chunked_cases()) {
    CAPTURE(name(c.kind));
    CAPTURE(c.d);
    CAPTURE(c.v);
    CAPTURE(c.m);
    const auto all = position_lists(c, 1, 1, false);
    for (int64_t i = 0; i < c.d; ++i) {
      CAPTURE(i);
      const Held h = check_position(c, 1, 1, false, i, all[static_cast<size_t>(i)]);
      CHECK(h.activations == pd2bw::pipeline::in_flight(c.kind, c.d, c.m, i, c.v));
      switch (c.kind) {
        case Schedule::interleaved: {
          // Megatron-LM runs 2 (d - i - 1) + (v - 1) d warm-up forwards (all m v when m = d), then
          // forward-then-backward pairs: the forward of each pair holds one more.
          const int64_t total = c.m * c.v, warm = 2 * (c.d - i - 1) + (c.v - 1) * c.d;
          CHECK(h.activations == (c.m == c.d ? total : std::min(total, warm + 1)));
          break;
        }
        case Schedule::zb_h2:
          CHECK(h.activations == std::min(2 * (c.d - i) - 1, c.m));
          break;
        case Schedule::zb_v:
          // 1F1B's first stage holds d microbatches of a whole stage, 2 d of a chunk (half a stage):
          // ZB-V matches 1F1B's activation memory (Qi et al. 2024, section 4), W's included. Every
          // position reaches it once the step is long enough to have no bubble: its warm-up of
          // 2 (d - i) - 1 forwards of the first chunk and i pairs, then one more forward of the second.
          CHECK(h.activations <= 2 * c.d);
          CHECK(h.with_w <= 2 * c.d);
          if (c.m >= 2 * c.d - 1) CHECK(h.activations == 2 * c.d);
          break;
        case Schedule::gpipe:
          CHECK(h.activations == c.m);
          break;
        default:  // 1F1B
          CHECK(h.activations == std::min(c.d - i, c.m));
          break;
      }
    }
  }
}

namespace {

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
