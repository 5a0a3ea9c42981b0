// Property tests of the schedule generator over many (schedule, d, m, steps): every microbatch is
// forwarded then backwarded on every stage, stage order and send/receive pairing hold, in-flight
// microbatches and live weight versions stay within the schedule's bounds, and versions follow the rule.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "pd2bw/error.hpp"
#include "pd2bw/planner/schedule.hpp"
#include "schedule_checks.hpp"

using namespace pd2bw::planner;
using pd2bw::schemas::Schedule;

namespace {

struct Case {
  Schedule kind;
  int64_t d, m, steps;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (Schedule k : {Schedule::two_bw, Schedule::flush, Schedule::gpipe})
    for (int64_t d = 1; d <= 6; ++d)
      for (int64_t m = 1; m <= 9; ++m)
        for (int64_t steps = 1; steps <= 4; ++steps)
          if (k != Schedule::two_bw || m >= d) out.push_back({k, d, m, steps});
  return out;
}

using Key = std::pair<int64_t, int64_t>;  // (step, microbatch)

// Checks one stage's list on its own; returns the peak in-flight count and the peak of live versions
// (a version is live from its creation until its last reader, and the newest is always live).
std::pair<int64_t, int64_t> check_stage(const Case& c, int64_t stage, const std::vector<Op>& ops) {
  std::map<Key, int> fwd, bwd;
  int64_t in_flight = 0, peak = 0, updates = 0;
  std::map<int64_t, size_t> last_reader;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const Key key{op.step, op.microbatch};
    if (op.kind == OpKind::forward) {
      CHECK(fwd[key]++ == 0);
      peak = std::max(peak, ++in_flight);
      CHECK(op.version == version_for_step(c.kind, op.step));
      CHECK(op.version <= updates);  // the version exists already
    }
    if (op.kind == OpKind::backward) {
      CHECK(fwd.count(key) == 1);  // forward came first
      CHECK(bwd[key]++ == 0);
      --in_flight;
      CHECK(op.version == version_for_step(c.kind, op.step));
    }
    if (op.kind == OpKind::update) CHECK(op.version == ++updates);
    if (op.kind == OpKind::forward || op.kind == OpKind::backward || op.kind == OpKind::recompute)
      last_reader[op.version] = i;
  }
  CHECK(updates == c.steps);
  CHECK(static_cast<int64_t>(fwd.size()) == c.m * c.steps);
  CHECK(static_cast<int64_t>(bwd.size()) == c.m * c.steps);
  // Live versions at each update: versions whose last reader is later, plus the new one.
  int64_t live_peak = 1, seen_updates = 0;
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == OpKind::update) {
      ++seen_updates;
      int64_t live = 1;
      for (const auto& [v, last] : last_reader)
        if (v < seen_updates && last > i) ++live;
      live_peak = std::max(live_peak, live);
    }
  (void)stage;
  return {peak, live_peak};
}


}  // namespace

TEST_CASE("schedule generator: properties over many (schedule, d, m, steps)") {
  int64_t checked = 0;
  for (const Case& c : cases()) {
    CAPTURE(std::string(pd2bw::schemas::to_string(c.kind)));
    CAPTURE(c.d);
    CAPTURE(c.m);
    CAPTURE(c.steps);
    std::vector<std::vector<Op>> all;
    for (int64_t i = 0; i < c.d; ++i) {
      const ScheduleSpec spec{c.kind, c.d, c.m, c.steps, 1};
      all.push_back(stage_ops(spec, i, i % 2 == 1));
      const auto [in_flight, versions] = check_stage(c, i, all.back());
      const int64_t bound = c.kind == Schedule::gpipe ? c.m : std::min(c.d - i, c.m);
      CHECK(in_flight == bound);
      CHECK(versions <= (c.kind == Schedule::two_bw ? 2 : 1));
      if (c.kind == Schedule::two_bw && c.steps >= 2) CHECK(versions == 2);
      ++checked;
    }
    pd2bw::testing::check_pairing(all);
  }
  CHECK(checked > 1000);
}

TEST_CASE("schedule generator: op order inside a stage") {
  // Stage 1 of 3, flush, m = 3: warm-up of one forward, then 1F1B, then the update.
  const auto ops = stage_ops({Schedule::flush, 3, 3, 1, 2}, 1, true);
  std::vector<std::string> names;
  for (const Op& op : ops) names.push_back(std::string(to_string(op.kind)) + std::to_string(op.microbatch));
  const std::vector<std::string> want = {
      "recv_activation0", "forward0",      "send_activation0", "recv_activation1", "forward1",
      "send_activation1", "recv_gradient0", "recompute0",      "backward0",        "send_gradient0",
      "recv_activation2", "forward2",      "send_activation2", "recv_gradient1",    "recompute1",
      "backward1",        "send_gradient1", "recv_gradient2",   "recompute2",       "backward2",
      "send_gradient2",   "allreduce-1",   "update-1"};
  CHECK(names == want);
}

TEST_CASE("schedule generator: 2bw version rule and update placement") {
  const auto ops = stage_ops({Schedule::two_bw, 2, 2, 3, 1}, 0, false);
  std::vector<std::tuple<int64_t, int64_t, int64_t>> fwd;  // (step, microbatch, version)
  for (const Op& op : ops)
    if (op.kind == OpKind::forward) fwd.emplace_back(op.step, op.microbatch, op.version);
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> want = {{0, 0, 0}, {0, 1, 0}, {1, 0, 0},
                                                                   {1, 1, 0}, {2, 0, 1}, {2, 1, 1}};
  CHECK(fwd == want);
  // No flush: stage 0 forwards step 1's first microbatch before step 0's update.
  size_t first_update = 0, step1_forward = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::update && first_update == 0) first_update = i;
    if (ops[i].kind == OpKind::forward && ops[i].step == 1 && step1_forward == 0) step1_forward = i;
  }
  CHECK(step1_forward < first_update);
}

TEST_CASE("schedule generator: bad specs are usage errors") {
  CHECK_THROWS_AS(stage_ops({Schedule::two_bw, 4, 3, 1, 1}, 0, false), pd2bw::UsageError);
  CHECK_THROWS_AS(stage_ops({Schedule::flush, 2, 2, 1, 1}, 2, false), pd2bw::UsageError);
  CHECK_THROWS_AS(stage_ops({Schedule::gpipe, 2, 0, 1, 1}, 0, false), pd2bw::UsageError);
}
