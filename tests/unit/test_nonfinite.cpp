// The non-finite guard of the stage runtime: a NaN planted in one replica's weights reaches the loss and
// the gradient of a 2BW step; by default every rank stops before that step's update with an error that
// names the step, and with skip_nonfinite every rank skips it alike (the next version equals the current
// one bit for bit, the optimizer moments stay) and training goes on. Non-finite weights or moments after
// an update always stop.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "pd2bw/error.hpp"
#include "pipeline_reference.hpp"

using namespace pd2bw;
using testing::HashSource;
using testing::RecordedLosses;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Skips final : public executor::LossSink {
  void on_loss(int64_t, int64_t, int64_t, double) override {}
  void on_skip(int64_t step, const std::string& why) override {
    const std::lock_guard<std::mutex> lock(mutex);
    skipped.push_back({step, why});
  }
  std::mutex mutex;
  std::vector<std::pair<int64_t, std::string>> skipped;
};

struct State {
  std::vector<float> prev, cur, m1, m2;
};

State state_of(executor::StageWorker<float>& w, int64_t steps) {
  State s;
  const auto copy = [](std::span<float> v) { return std::vector<float>(v.begin(), v.end()); };
  s.prev = copy(w.weights(steps - 1));
  s.cur = copy(w.weights(steps));
  s.m1 = copy(w.moment1());
  s.m2 = copy(w.moment2());
  return s;
}

// A 2BW job (d = 2, w = 2) after two clean steps, with a NaN planted in replica 0's stage-0 copy of
// W(1): step 2 runs its forwards on W(1), so its loss and gradient are not finite.
executor::ThreadsJob<float> poisoned_job(bool skip, const HashSource& data, std::vector<State>& before) {
  executor::PipelineConfig c = testing::tiny_pipeline(schemas::Schedule::two_bw, 2, 2, 2, 0);
  c.optimizer.skip_nonfinite = skip;
  c.optimizer.clip_norm = 1.0;
  executor::ThreadsJob<float> job(c);
  job.run(data, 0, 2, nullptr);
  for (int64_t r = 0; r < job.ranks(); ++r) before.push_back(state_of(job.worker(r), 2));
  State planted = before[0];
  planted.prev[3] = kNaN;
  job.worker(0).restore(2, planted.prev, planted.cur, planted.m1, planted.m2);
  return job;
}

// The message of the Error that running step `step` throws ("" when it runs through).
std::string error_of_step(executor::ThreadsJob<float>& job, const HashSource& data, int64_t step) {
  try {
    job.run(data, step, 1, nullptr);
  } catch (const pd2bw::Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("a non-finite loss and gradient stop every rank before the update, naming the step") {
  const HashSource data(11, 2, 5);
  std::vector<State> before;
  executor::ThreadsJob<float> job = poisoned_job(false, data, before);
  const std::string what = error_of_step(job, data, 2);
  INFO(what);
  CHECK(what.rfind("step 3: the loss of 2 microbatches and the gradient norm (stages 0, 1) are not finite", 0) == 0);
  CHECK(what.find("no checkpoint holds this step") != std::string::npos);
  for (int64_t r = 0; r < job.ranks(); ++r) CHECK(job.worker(r).steps_done() == 2);
}

TEST_CASE("skip_nonfinite skips the step on every rank: W(j+1) = W(j), moments kept, training goes on") {
  const HashSource data(11, 2, 5);
  std::vector<State> before;
  executor::ThreadsJob<float> job = poisoned_job(true, data, before);
  Skips skips;
  job.run(data, 2, 1, &skips);
  REQUIRE(skips.skipped.size() == 4);  // once per rank
  for (const auto& [step, why] : skips.skipped) {
    CHECK(step == 2);
    CHECK(why == "the loss of 2 microbatches and the gradient norm (stages 0, 1)");
  }
  for (int64_t r = 0; r < job.ranks(); ++r) {
    auto& w = job.worker(r);
    CHECK(w.steps_done() == 3);
    const auto next = w.weights(3);
    CHECK(std::vector<float>(next.begin(), next.end()) == before[static_cast<size_t>(r)].cur);
    CHECK(std::vector<float>(w.moment1().begin(), w.moment1().end()) == before[static_cast<size_t>(r)].m1);
    CHECK(std::vector<float>(w.moment2().begin(), w.moment2().end()) == before[static_cast<size_t>(r)].m2);
  }
  // Step 3 runs on W(2), which is finite: an ordinary update, the same on both replicas of a stage.
  RecordedLosses losses;
  job.run(data, 3, 1, &losses);
  for (double l : losses.of_step(3)) CHECK(std::isfinite(l));
  for (int64_t r = 0; r < job.ranks(); ++r) CHECK(job.worker(r).steps_done() == 4);
  const auto w0 = job.worker(0).weights(4), w1 = job.worker(1).weights(4);
  CHECK(std::vector<float>(w0.begin(), w0.end()) == std::vector<float>(w1.begin(), w1.end()));
  CHECK(std::vector<float>(w0.begin(), w0.end()) != before[0].cur);
}

TEST_CASE("non-finite weights or moments after an update stop training, also with skip_nonfinite") {
  const HashSource data(11, 2, 5);
  for (const bool in_moments : {false, true}) {
    CAPTURE(in_moments);
    executor::PipelineConfig c = testing::tiny_pipeline(schemas::Schedule::two_bw, 2, 2, 1, 0);
    c.optimizer.skip_nonfinite = true;
    executor::ThreadsJob<float> job(c);
    job.run(data, 0, 2, nullptr);
    State s = state_of(job.worker(1), 2);
    // Stage 1's W(2) or its second moment (an infinite v only zeroes the step, so the weights stay
    // finite): step 2 computes on W(1), so only the update sees either.
    (in_moments ? s.m2 : s.cur)[5] = std::numeric_limits<float>::infinity();
    job.worker(1).restore(2, s.prev, s.cur, s.m1, s.m2);
    const std::string what = error_of_step(job, data, 2);
    INFO(what);
    CHECK(what.rfind(in_moments ? "step 3: stage 1's optimizer state after the update is not finite"
                                : "step 3: stage 1's weights after the update are not finite",
                     0) == 0);
  }
}
