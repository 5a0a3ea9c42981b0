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
// The papers' steady steps, a hand-written interleaved op list and the refusals are in
// test_schedule_chunks_exact.cpp; the stash walk's tests are in test_stash_walk.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "pd2bw/error.hpp"
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

// A chunked rank lays one step's compute ops out in 32-bit fields: a step too large for them is refused
// with a usage error (not an allocation that fails or fields that wrap).
TEST_CASE("a chunked step too large to lay out is a usage error") {
  using pd2bw::pipeline::ScheduleSpec;
  using pd2bw::pipeline::StageOpStream;
  const int64_t huge = int64_t{1} << 30;  // a multiple of d = 2: 3 m v passes 2^31
  for (const auto kind : {pd2bw::schemas::Schedule::interleaved, pd2bw::schemas::Schedule::zb_v}) {
    CHECK_THROWS_AS(StageOpStream(ScheduleSpec{kind, 2, huge, 1, 1, 2}, 0, false), pd2bw::UsageError);
    CHECK_NOTHROW(StageOpStream(ScheduleSpec{kind, 2, 64, 1, 1, 2}, 1, false));
  }
}
