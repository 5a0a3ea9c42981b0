// Property tests of the zb-h1 schedule generator over many (d, m, steps, stage): every microbatch gets
// its forward, its B (backward_input) and its W (backward_weight), in that order and once each; at most
// d - i microbatches sit between forward and B at stage i (as 1F1B); W's wait behind their B's by at
// most the stage's deferral; all of a step's W's precede its update and no op of the next step runs
// before it; Recompute comes right before each B; sends and receives pair up; a replay with equal stages
// gives ZB-H1's bubble. Plus the exact op lists of d = 2, m = 4, written out by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/pipeline/shape.hpp"
#include "pd2bw/planner/schedule.hpp"
#include "schedule_checks.hpp"

using namespace pd2bw::planner;
using pd2bw::schemas::Schedule;

namespace {

using Key = std::pair<int64_t, int64_t>;  // (step, microbatch)

struct Peaks {
  int64_t activations = 0;  // between forward and B
  int64_t waiting_w = 0;    // between B and W
};

Peaks check_stage(int64_t d, int64_t m, int64_t steps, int64_t stage, bool recompute, const std::vector<Op>& ops) {
  std::map<Key, int> fwd, bin, bw;
  Peaks peak;
  int64_t acts = 0, waiting = 0, updates = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const Key key{op.step, op.microbatch};
    CHECK(op.kind != OpKind::backward);                 // zb-h1 never runs a fused backward
    if (op.microbatch >= 0) CHECK(op.step == updates);  // nothing of step j + 1 before update j
    if (op.kind == OpKind::forward) {
      CHECK(fwd[key]++ == 0);
      peak.activations = std::max(peak.activations, ++acts);
    }
    if (op.kind == OpKind::backward_input) {
      CHECK(fwd.count(key) == 1);
      CHECK(bin[key]++ == 0);
      --acts;
      peak.waiting_w = std::max(peak.waiting_w, ++waiting);
      if (recompute) {
        REQUIRE(i > 0);
        CHECK(ops[i - 1].kind == OpKind::recompute);
        CHECK(ops[i - 1].microbatch == op.microbatch);
      }
    }
    if (op.kind == OpKind::backward_weight) {
      CHECK(bin.count(key) == 1);  // its B came first
      CHECK(bw[key]++ == 0);
      --waiting;
    }
    if (op.kind == OpKind::recompute) CHECK(recompute);
    if (op.kind == OpKind::forward || op.kind == OpKind::backward_input || op.kind == OpKind::backward_weight ||
        op.kind == OpKind::recompute)
      CHECK(op.version == op.step);  // one version, as flush
    if (op.kind == OpKind::update) {
      CHECK(waiting == 0);  // the step's W's are all done
      CHECK(acts == 0);
      CHECK(op.version == ++updates);
    }
  }
  CHECK(updates == steps);
  CHECK(static_cast<int64_t>(bw.size()) == m * steps);
  (void)stage;
  (void)d;
  return peak;
}

std::vector<std::string> names(const std::vector<Op>& ops) {
  std::vector<std::string> out;
  for (const Op& op : ops) out.push_back(std::string(to_string(op.kind)) + std::to_string(op.microbatch));
  return out;
}

// A free-communication replay of every stage's list with integer durations: a forward waits for the
// previous stage's forward of its microbatch, a B (or a fused backward, lasting B + W) for the next
// stage's, every op for the one before it on its stage. Returns the step's makespan.
int64_t replay(Schedule kind, int64_t d, int64_t m, int64_t f, int64_t b, int64_t w) {
  std::vector<std::vector<Op>> lists;
  for (int64_t i = 0; i < d; ++i) lists.push_back(stage_ops({kind, d, m, 1, 1}, i, false));
  std::map<std::tuple<int64_t, OpKind, int64_t>, int64_t> done;  // (stage, kind, microbatch) -> end
  std::vector<size_t> pos(static_cast<size_t>(d), 0);
  std::vector<int64_t> clock(static_cast<size_t>(d), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t i = 0; i < d; ++i) {
      auto& at = pos[static_cast<size_t>(i)];
      while (at < lists[static_cast<size_t>(i)].size()) {
        const Op& op = lists[static_cast<size_t>(i)][at];
        const bool bwd = op.kind == OpKind::backward || op.kind == OpKind::backward_input;
        int64_t ready = clock[static_cast<size_t>(i)], length = 0;
        if (op.kind == OpKind::forward || bwd) {
          const auto dep = op.kind == OpKind::forward ? std::make_tuple(i - 1, OpKind::forward, op.microbatch)
                                                      : std::make_tuple(i + 1, op.kind, op.microbatch);
          const bool needs = op.kind == OpKind::forward ? i > 0 : i + 1 < d;
          if (needs && done.count(dep) == 0) break;
          if (needs) ready = std::max(ready, done.at(dep));
          length = op.kind == OpKind::forward ? f : op.kind == OpKind::backward ? b + w : b;
        }
        if (op.kind == OpKind::backward_weight) length = w;
        clock[static_cast<size_t>(i)] = ready + length;
        done[{i, op.kind, op.microbatch}] = ready + length;
        ++at;
        progress = true;
      }
    }
  }
  return *std::max_element(clock.begin(), clock.end());
}

}  // namespace

TEST_CASE(
    "zb-h1 generator: the deferred W's fill the bubble, (d - 1)(F + B - W) instead of 1F1B's (d - 1)(F + B + W)") {
  // ZB-H1's bubble (Qi et al., table 1) for equal stages with W <= F and W <= B; Flush replayed by the same
  // harness shows 1F1B's.
  for (int64_t d = 2; d <= 5; ++d)
    for (int64_t m = d; m <= 2 * d + 1; ++m)
      for (const auto& [f, b, w] :
           {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {2, 2, 1}, {3, 2, 1}, {2, 3, 2}, {3, 3, 3}}) {
        CAPTURE(d);
        CAPTURE(m);
        CAPTURE(f);
        CAPTURE(b);
        CAPTURE(w);
        CHECK(replay(Schedule::zb_h1, d, m, f, b, w) == m * (f + b + w) + (d - 1) * (f + b - w));
        CHECK(replay(Schedule::flush, d, m, f, b, w) == m * (f + b + w) + (d - 1) * (f + b + w));
      }
}

TEST_CASE("zb-h1 generator: properties over many (d, m, steps)") {
  int64_t checked = 0;
  for (int64_t d = 1; d <= 6; ++d)
    for (int64_t m = 1; m <= 10; ++m)
      for (int64_t steps = 1; steps <= 3; ++steps)
        for (const bool recompute : {false, true}) {
          CAPTURE(d);
          CAPTURE(m);
          CAPTURE(steps);
          CAPTURE(recompute);
          std::vector<std::vector<Op>> all;
          for (int64_t i = 0; i < d; ++i) {
            all.push_back(stage_ops({Schedule::zb_h1, d, m, steps, 1 + i % 2}, i, recompute));
            const Peaks p = check_stage(d, m, steps, i, recompute, all.back());
            CHECK(p.activations == std::min(d - i, m));
            CHECK(p.activations == pd2bw::pipeline::in_flight(Schedule::zb_h1, d, m, i));
            // W trails B by the stage's deferral; for one moment after a B, one more waits.
            CHECK(p.waiting_w == pd2bw::pipeline::deferred_weight_grads(Schedule::zb_h1, m, i) + 1);
            ++checked;
          }
          pd2bw::testing::check_pairing(all);
        }
  CHECK(checked > 300);
}

TEST_CASE("zb-h1 generator: the op lists of d = 2, m = 4, written out") {
  // Stage 0 defers nothing: each B is followed by its W. Stage 1 (the last) runs W of k after B of
  // k + 1, and the last W fills the drain.
  const std::vector<std::string> stage0 = {
      "forward0",        "send_activation0", "forward1",       "send_activation1", "recv_gradient0",
      "backward_input0", "backward_weight0", "forward2",       "send_activation2", "recv_gradient1",
      "backward_input1", "backward_weight1", "forward3",       "send_activation3", "recv_gradient2",
      "backward_input2", "backward_weight2", "recv_gradient3", "backward_input3",  "backward_weight3",
      "update-1"};
  const std::vector<std::string> stage1 = {
      "recv_activation0", "forward0",        "backward_input0", "send_gradient0",   "recv_activation1",
      "forward1",         "backward_input1", "send_gradient1",  "backward_weight0", "recv_activation2",
      "forward2",         "backward_input2", "send_gradient2",  "backward_weight1", "recv_activation3",
      "forward3",         "backward_input3", "send_gradient3",  "backward_weight2", "backward_weight3",
      "update-1"};
  CHECK(names(stage_ops({Schedule::zb_h1, 2, 4, 1, 1}, 0, false)) == stage0);
  CHECK(names(stage_ops({Schedule::zb_h1, 2, 4, 1, 1}, 1, false)) == stage1);
  // With recompute, each B is preceded by its Recompute (after the gradient arrives).
  const auto r = names(stage_ops({Schedule::zb_h1, 2, 4, 1, 2}, 0, true));
  const std::vector<std::string> head = {"forward0",       "send_activation0", "forward1",        "send_activation1",
                                         "recv_gradient0", "recompute0",       "backward_input0", "backward_weight0"};
  CHECK(std::vector<std::string>(r.begin(), r.begin() + 8) == head);
  CHECK(r[r.size() - 2] == "allreduce-1");
}

TEST_CASE(
    "zb-h1 generator: bad specs are usage errors; m < d is allowed (the W's of a short step wait for its last B)") {
  CHECK_THROWS_AS(stage_ops({Schedule::zb_h1, 3, 0, 1, 1}, 0, false), pd2bw::UsageError);
  CHECK_THROWS_AS(stage_ops({Schedule::zb_h1, 3, 3, 1, 1}, 3, false), pd2bw::UsageError);
  const std::vector<std::string> last = {"recv_activation0", "forward0",         "backward_input0", "send_gradient0",
                                         "recv_activation1", "forward1",         "backward_input1", "send_gradient1",
                                         "backward_weight0", "backward_weight1", "update-1"};
  CHECK(names(stage_ops({Schedule::zb_h1, 4, 2, 1, 1}, 3, false)) == last);
}
