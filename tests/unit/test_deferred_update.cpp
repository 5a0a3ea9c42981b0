// 2BW's update settles late (stage_math.cpp): a rank sends its share of the step's health at its end of
// the step and applies the update only before the first op that reads the new version (without a master
// copy, the gradient parked in the free version's buffer meanwhile), or, with bf16 compute over float
// masters, before the next op that adds to the gradients. Neither may change a bit. The float and double
// runs are held to the sequential reference by test_pipeline.cpp; here the bf16 runs, which that
// reference does not cover, are held to the same model on one stage (no clipping: its sum of squares
// is taken in another order over one stage than over several).
#include <doctest/doctest.h>

#include <cstring>

#include "pipeline_reference.hpp"

using namespace pd2bw;
using namespace pd2bw::executor;
using pd2bw::testing::HashSource;
using schemas::Schedule;

namespace {

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Run {
  std::unique_ptr<ThreadsJob<float>> job;
  pd2bw::testing::RecordedLosses losses;
};

std::unique_ptr<Run> train(const PipelineConfig& c, int64_t steps) {
  const HashSource data(c.model.vocab, c.microbatch_size, c.seq, c.model.is_bert());
  auto r = std::make_unique<Run>();
  r->job = std::make_unique<ThreadsJob<float>>(c);
  r->job->run(data, 0, steps, &r->losses);
  return r;
}

}  // namespace

TEST_CASE("2BW with bf16 compute: d stages equal one stage bit for bit (losses, both versions, moments)") {
  const int64_t steps = 5;
  for (int64_t d : {2, 3}) {
    for (int64_t w : {1, 2}) {
      CAPTURE(d);
      CAPTURE(w);
      PipelineConfig one = pd2bw::testing::tiny_pipeline(Schedule::two_bw, 1, d + 1, w, 0);
      PipelineConfig many = pd2bw::testing::tiny_pipeline(Schedule::two_bw, d, d + 1, w, 0);
      one.compute = many.compute = DType::bf16;
      const auto a = train(one, steps), b = train(many, steps);
      CHECK(a->losses.by_key == b->losses.by_key);
      // Each stage's weights are its layers' slice of the one stage's, in the same layout order.
      for (const int64_t v : {steps - 1, steps}) {
        CAPTURE(v);
        const auto whole = a->job->worker(0).weights(v);
        const std::vector<float> all(whole.begin(), whole.end());
        size_t at = 0;
        for (int64_t i = 0; i < d; ++i) {
          const auto part = b->job->worker(i * w).weights(v);
          REQUIRE(at + part.size() <= all.size());
          CHECK(same_bits(part, std::span<const float>(all).subspan(at, part.size())));
          at += part.size();
        }
        CHECK(at == all.size());
      }
      const auto m1 = a->job->worker(0).moment1();
      const std::vector<float> all_m1(m1.begin(), m1.end());
      size_t at = 0;
      for (int64_t i = 0; i < d; ++i) {
        const auto part = b->job->worker(i * w).moment1();
        CHECK(same_bits(part, std::span<const float>(all_m1).subspan(at, part.size())));
        at += part.size();
      }
    }
  }
}
