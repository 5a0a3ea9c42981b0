// zb-h1 in the pipeline runtime: the same synchronous math as Flush with the backward split into B and
// W, so its losses and final weights equal Flush's bit for bit (and the sequential reference's), on the
// CPU in double, over d in {2, 3, 4}, m in {d, 2d}, w in {1, 2}, with and without recompute; with tied
// embeddings (the head's and the embedding's W adding into one table when they share a stage); in
// float; and resuming from restored state continues bit-identically.
#include <doctest/doctest.h>

#include <cstring>

#include "pipeline_reference.hpp"

using namespace pd2bw;
using namespace pd2bw::executor;
using pd2bw::testing::HashSource;
using pd2bw::testing::Reference;
using schemas::Schedule;

namespace {

using Losses = pd2bw::testing::RecordedLosses;

template <typename T>
bool same_bits(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Trains `steps` steps under zb-h1 and under flush from the same config; every loss and every rank's
// final weights and moments must carry the same bits, and the losses must be the reference's.
template <typename T>
void check_zb_equals_flush(PipelineConfig c, int64_t steps) {
  const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
  c.schedule = Schedule::zb_h1;
  ThreadsJob<T> zb(c);
  Losses zb_losses;
  zb.run(data, 0, steps, &zb_losses);
  c.schedule = Schedule::flush;
  ThreadsJob<T> flush(c);
  Losses flush_losses;
  flush.run(data, 0, steps, &flush_losses);
  REQUIRE(!zb_losses.by_key.empty());
  CHECK(zb_losses.by_key == flush_losses.by_key);
  Reference<T> ref(c);
  for (int64_t j = 0; j < steps; ++j) CHECK(zb_losses.of_step(j) == ref.step(data));
  for (int64_t r = 0; r < zb.ranks(); ++r) {
    auto& a = zb.worker(r);
    auto& b = flush.worker(r);
    CHECK(a.versions_allocated() == 1);
    CHECK(same_bits<T>(a.weights(steps), b.weights(steps)));
    CHECK(same_bits<T>(a.moment1(), b.moment1()));
    CHECK(same_bits<T>(a.moment2(), b.moment2()));
  }
}

}  // namespace

TEST_CASE("zb-h1 equals Flush bit for bit (double, d 2..4, m in {d, 2d}, w in {1, 2}, recompute or not)") {
  int64_t runs = 0;
  for (int64_t d = 2; d <= 4; ++d)
    for (int64_t m : {d, 2 * d})
      for (int64_t w = 1; w <= 2; ++w)
        for (int pattern : {0, 1, 2}) {
          CAPTURE(d);
          CAPTURE(m);
          CAPTURE(w);
          CAPTURE(pattern);
          check_zb_equals_flush<double>(pd2bw::testing::tiny_pipeline(Schedule::flush, d, m, w, pattern), 3);
          ++runs;
        }
  CHECK(runs == 36);
}

TEST_CASE("zb-h1 equals Flush with tied embeddings, on one stage and split over stages, and in float") {
  for (int64_t d : {1, 2, 3}) {
    CAPTURE(d);
    auto c = pd2bw::testing::tiny_pipeline(Schedule::flush, d, 4, 2, d == 3 ? 2 : 0);
    c.model.tie_embeddings = true;
    c.optimizer.clip_norm = d == 2 ? 0.05 : 0.0;
    check_zb_equals_flush<double>(c, 3);
  }
  check_zb_equals_flush<float>(pd2bw::testing::tiny_pipeline(Schedule::flush, 3, 4, 2, 1), 3);
}

TEST_CASE("zb-h1 with fewer microbatches than stages equals Flush too") {
  for (int64_t m : {1, 2}) check_zb_equals_flush<double>(pd2bw::testing::tiny_pipeline(Schedule::flush, 4, m, 1, 2), 2);
}

TEST_CASE("zb-h1 resuming after k steps continues bit-identically") {
  const auto c = pd2bw::testing::tiny_pipeline(Schedule::zb_h1, 3, 3, 2, 2);
  const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
  ThreadsJob<double> whole(c);
  Losses all;
  whole.run(data, 0, 4, &all);
  ThreadsJob<double> first(c), second(c);
  Losses parts;
  first.run(data, 0, 2, &parts);
  for (int64_t r = 0; r < first.ranks(); ++r) {
    auto& a = first.worker(r);
    second.worker(r).restore(2, {}, a.weights(2), a.moment1(), a.moment2());
  }
  second.run(data, 2, 2, &parts);
  CHECK(parts.by_key == all.by_key);
  for (int64_t r = 0; r < whole.ranks(); ++r)
    CHECK(same_bits<double>(second.worker(r).weights(4), whole.worker(r).weights(4)));
}

TEST_CASE("the stash a deferred W keeps is counted in the stage's arena") {
  // The last of two stages defers each W behind the next microbatch's B, so it holds one microbatch's
  // W stash while the next runs: its arena peaks above Flush's, whose backward frees everything at once.
  auto c = pd2bw::testing::tiny_pipeline(Schedule::flush, 2, 4, 1, 0);
  const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
  ThreadsJob<double> flush(c);
  flush.run(data, 0, 1, nullptr);
  c.schedule = Schedule::zb_h1;
  ThreadsJob<double> zb(c);
  zb.run(data, 0, 1, nullptr);
  CHECK(zb.worker(1).peak_bytes() > flush.worker(1).peak_bytes());
  CHECK(zb.worker(1).memory().current_bytes == flush.worker(1).memory().current_bytes);  // all freed after W
}
