// The pipeline runtime against the sequential reference, bit for bit: 2BW over d in {2,3,4},
// m in {d, d+1, 2d}, w in {1,2}, with and without recompute, in double and in float; Flush and GPipe
// equal plain minibatch training; d = 1 2BW equals the delayed rule; at most two weight versions are
// ever allocated per 2BW stage; resuming from a stopped run continues bit-identically.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <mutex>

#include "pd2bw/error.hpp"
#include "pipeline_reference.hpp"

using namespace pd2bw;
using namespace pd2bw::executor;
using pd2bw::testing::HashSource;
using pd2bw::testing::Reference;
using schemas::Schedule;

namespace {

using Losses = pd2bw::testing::RecordedLosses;
using pd2bw::testing::same_bits;

PipelineConfig make_config(Schedule s, int64_t d, int64_t m, int64_t w, int recompute_pattern) {
  return pd2bw::testing::tiny_pipeline(s, d, m, w, recompute_pattern);
}

template <typename T>
void check_equal(const PipelineConfig& c, int64_t steps) {
  pd2bw::testing::check_pipeline_equal<T>(c, steps);
}

}  // namespace

TEST_CASE("2BW pipelined equals the sequential delayed rule bit for bit (double)") {
  int64_t runs = 0;
  for (int64_t d = 2; d <= 4; ++d)
    for (int64_t m : {d, d + 1, 2 * d})
      for (int64_t w = 1; w <= 2; ++w)
        for (int pattern = 0; pattern <= 2; pattern += 2) {
          CAPTURE(d);
          CAPTURE(m);
          CAPTURE(w);
          CAPTURE(pattern);
          check_equal<double>(make_config(Schedule::two_bw, d, m, w, pattern), 3);
          ++runs;
        }
  CHECK(runs == 36);
}

TEST_CASE("2BW pipelined equals the sequential rule in float too (fixed reduction order)") {
  for (int64_t d : {2, 4}) check_equal<float>(make_config(Schedule::two_bw, d, d + 1, 2, 1), 3);
}

TEST_CASE("Flush and GPipe equal plain minibatch training; d = 1 2BW is the delayed rule") {
  for (Schedule s : {Schedule::flush, Schedule::gpipe})
    for (int64_t d : {1, 2, 3})
      for (int64_t w : {1, 2}) {
        CAPTURE(d);
        CAPTURE(w);
        check_equal<double>(make_config(s, d, 3, w, d == 3 ? 2 : 0), 3);
      }
  check_equal<double>(make_config(Schedule::two_bw, 1, 2, 1, 0), 4);
  check_equal<double>(make_config(Schedule::two_bw, 1, 3, 2, 1), 3);
}

TEST_CASE("SGD with momentum and global-norm clipping across stages and replicas") {
  auto c = make_config(Schedule::two_bw, 3, 4, 2, 2);
  c.optimizer.kind = schemas::Optimizer::sgd;
  c.optimizer.clip_norm = 0.05;  // small enough to bind on every step
  check_equal<double>(c, 3);
  c.optimizer.kind = schemas::Optimizer::adamw;
  check_equal<double>(c, 3);
}

TEST_CASE("tied embeddings: on one stage, and split over stages with the gradients summed across them") {
  for (Schedule s : {Schedule::two_bw, Schedule::flush})
    for (int64_t d : {1, 2, 3})
      for (int64_t w : {1, 2}) {
        CAPTURE(d);
        CAPTURE(w);
        auto c = make_config(s, d, 4, w, d == 3 ? 2 : 0);
        c.model.tie_embeddings = true;
        c.optimizer.clip_norm = d == 2 ? 0.05 : 0.0;
        check_equal<double>(c, 3);
      }
}

TEST_CASE("resuming after k steps continues bit-identically") {
  const auto c = make_config(Schedule::two_bw, 3, 4, 2, 2);
  const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
  ThreadsJob<double> whole(c);
  Losses all;
  whole.run(data, 0, 5, &all);
  ThreadsJob<double> first(c), second(c);
  Losses parts;
  first.run(data, 0, 2, &parts);
  for (int64_t r = 0; r < first.ranks(); ++r) {
    auto& a = first.worker(r);
    second.worker(r).restore(2, a.weights(1), a.weights(2), a.moment1(), a.moment2());
  }
  second.run(data, 2, 3, &parts);
  CHECK(parts.by_key == all.by_key);
  for (int64_t r = 0; r < whole.ranks(); ++r) {
    const auto x = whole.worker(r).weights(5);
    CHECK(same_bits<double>(second.worker(r).weights(5), std::vector<double>(x.begin(), x.end())));
  }
}

TEST_CASE("a failing rank stops the job with its error instead of hanging") {
  auto c = make_config(Schedule::flush, 2, 2, 1, 0);
  const HashSource bad(c.model.vocab + 5, c.microbatch_size, c.seq);  // tokens out of the vocabulary
  ThreadsJob<double> job(c);
  CHECK_THROWS_AS(job.run(bad, 0, 1, nullptr), pd2bw::Error);
  c.bounds = {0, 5, 5};
  CHECK_THROWS_AS(ThreadsJob<double>{c}, pd2bw::UsageError);
}
