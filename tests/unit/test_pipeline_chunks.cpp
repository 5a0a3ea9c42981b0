// The schedules new to the runtime: interleaved (v >= 2 model chunks per rank, looped), zb-h2 (one chunk,
// split backward, the deeper warm-up) and zb-v (two chunks per rank in a V, split backward). All compute
// Flush's math, so each run must equal, bit for bit, Flush run with every model chunk as a stage of its
// own (same layer bounds, d v ranks per replica) and the sequential reference: losses, final weights and
// optimizer moments, in double and in float, with recompute, with replicas (one allreduce per chunk),
// with tied embeddings (the embedding and the head on chunks of two ranks or of one), under global-norm
// clipping, when a step is skipped for a non-finite loss, and across a save and a resume (ThreadsJob's
// restore, and train()'s checkpoints of a chunked plan).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "pd2bw/pipeline/schedule.hpp"
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

// The losses of two runs, bit for bit (NaN included), key by key.
bool same_losses(const Losses& a, const Losses& b) {
  if (a.by_key.size() != b.by_key.size()) return false;
  for (auto i = a.by_key.begin(), j = b.by_key.begin(); i != a.by_key.end(); ++i, ++j)
    if (i->first != j->first || std::memcmp(&i->second, &j->second, sizeof(double)) != 0) return false;
  return true;
}

// The tiny GPT (vocab 11, seq 5, d_model 8, 2 heads) with at least d v - 2 blocks, cut evenly into d v
// chunks of schedule s (v per rank), w replicas on ranks p w + r, b = 2.
PipelineConfig chunked(Schedule s, int64_t d, int64_t v, int64_t m, int64_t w, bool recompute = false) {
  PipelineConfig c;
  const int64_t n = d * v;
  c.model = {11, 5, 8, 2, std::max<int64_t>(3, n - 1), false};
  c.schedule = s;
  c.depth = d;
  c.chunks = v;
  c.width = w;
  c.microbatches = m;
  c.microbatch_size = 2;
  c.seq = 5;
  const int64_t layers = c.model.layer_count();
  for (int64_t i = 0; i <= n; ++i) c.bounds.push_back(i * layers / n);
  c.recompute.assign(static_cast<size_t>(n), recompute);
  for (int64_t p = 0; p < d; ++p) {
    c.ranks.emplace_back();
    for (int64_t r = 0; r < w; ++r) c.ranks.back().push_back(p * w + r);
  }
  c.optimizer.lr = {1e-2, 1e-3, 1, 4};
  return c;
}

// The same model chunks as the stages of Flush: d v stages, one rank per stage and replica.
PipelineConfig as_flush(PipelineConfig c) {
  const int64_t n = c.chunks_total();
  c.schedule = Schedule::flush;
  c.depth = n;
  c.chunks = 1;
  c.ranks.clear();
  for (int64_t i = 0; i < n; ++i) {
    c.ranks.emplace_back();
    for (int64_t r = 0; r < c.width; ++r) c.ranks.back().push_back(i * c.width + r);
  }
  return c;
}

// Chunk `chunk`'s final weights against the reference's layers (and the head's copy of a tied table
// against the reference's token table).
template <typename T>
bool equals_reference(std::span<const T> have, Reference<T>& ref, const PipelineConfig& c, int64_t chunk) {
  const auto i = static_cast<size_t>(chunk);
  const auto want = ref.current(c.bounds[i], c.bounds[i + 1]);
  if (have.size() < want.size() || !same_bits<T>(have.first(want.size()), want)) return false;
  if (have.size() == want.size()) return true;
  const auto table = static_cast<size_t>(c.model.vocab * c.model.d_model);
  const auto wte = ref.current(0, 1);
  return have.size() == want.size() + table &&
         same_bits<T>(have.subspan(want.size()), std::span<const T>(wte).first(table));
}

// Trains `steps` steps under c's chunked schedule and under Flush on its chunks; the losses must be the
// same and the reference's, and every chunk's final weights and moments Flush's and the reference's
// (with bf16 compute, which the reference does not model, Flush's alone).
template <typename T>
void check_chunked(const PipelineConfig& c, int64_t steps) {
  const bool reference = !c.compute.has_value();
  const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
  ThreadsJob<T> job(c);
  Losses losses;
  job.run(data, 0, steps, &losses);
  const PipelineConfig f = as_flush(c);
  ThreadsJob<T> flush(f);
  Losses flush_losses;
  flush.run(data, 0, steps, &flush_losses);
  REQUIRE(losses.by_key.size() == static_cast<size_t>(steps * c.microbatches * c.width));
  CHECK(losses.by_key == flush_losses.by_key);
  Reference<T> ref(c);
  for (int64_t j = 0; j < steps && reference; ++j) CHECK(losses.of_step(j) == ref.step(data));
  int64_t seen = 0;
  for (int64_t r = 0; r < job.ranks(); ++r) {
    auto& wk = job.worker(r);
    CHECK(wk.chunks() == pipeline::chunks_at(c.schedule, c.depth, c.chunks, wk.stage()));
    CHECK(wk.versions_allocated() == 1);
    for (const int64_t chunk : wk.chunks()) {
      CAPTURE(chunk);
      ++seen;
      auto& fw = flush.worker(f.ranks[static_cast<size_t>(chunk)][static_cast<size_t>(wk.replica())]);
      REQUIRE(fw.stage() == chunk);
      CHECK(same_bits<T>(wk.weights(steps, chunk), fw.weights(steps)));
      CHECK(same_bits<T>(wk.moment1(chunk), fw.moment1()));
      CHECK(same_bits<T>(wk.moment2(chunk), fw.moment2()));
      if (reference) CHECK(equals_reference<T>(wk.weights(steps, chunk), ref, c, chunk));
    }
  }
  CHECK(seen == c.chunks_total() * c.width);
}

}  // namespace

TEST_CASE("interleaved equals Flush on its chunks and the sequential reference (double)") {
  const struct {
    int64_t d, v, m;
  } cases[] = {{2, 2, 2}, {2, 2, 4}, {2, 2, 6}, {4, 2, 4}, {4, 2, 8}, {2, 3, 4}, {3, 2, 3}, {1, 2, 1}, {1, 3, 2}};
  for (const auto& k : cases) {
    CAPTURE(k.d);
    CAPTURE(k.v);
    CAPTURE(k.m);
    check_chunked<double>(chunked(Schedule::interleaved, k.d, k.v, k.m, 1), 3);
  }
}

TEST_CASE("zb-h2 equals Flush and the sequential reference (double, d 2..4, m below, at and above 2d - 1)") {
  for (int64_t d : {2, 3, 4})
    for (int64_t m : {int64_t{1}, d, 2 * d + 1}) {
      CAPTURE(d);
      CAPTURE(m);
      check_chunked<double>(chunked(Schedule::zb_h2, d, 1, m, 1), 3);
    }
}

TEST_CASE("zb-v equals Flush on its chunks and the sequential reference (double, d 1..4)") {
  for (int64_t d : {1, 2, 3, 4})
    for (int64_t m : {int64_t{1}, d, 2 * d + 1}) {
      CAPTURE(d);
      CAPTURE(m);
      check_chunked<double>(chunked(Schedule::zb_v, d, 2, m, 1), 3);
    }
}

TEST_CASE("in float, with recompute, and with replicas (an allreduce per chunk)") {
  for (Schedule s : {Schedule::interleaved, Schedule::zb_h2, Schedule::zb_v}) {
    CAPTURE(schemas::to_string(s));
    const int64_t v = s == Schedule::zb_h2 ? 1 : 2;
    check_chunked<float>(chunked(s, 2, v, 4, 1), 3);
    check_chunked<float>(chunked(s, 4, v, 4, 1), 2);
    check_chunked<double>(chunked(s, 2, v, 4, 1, true), 3);
    check_chunked<double>(chunked(s, 2, v, 2, 2), 3);
    check_chunked<float>(chunked(s, 2, v, 4, 2, true), 2);
  }
  check_chunked<double>(chunked(Schedule::interleaved, 2, 3, 2, 2, true), 2);
}

TEST_CASE("bf16 compute over float masters: the losses, each chunk's master weights and moments are Flush's") {
  for (Schedule s : {Schedule::interleaved, Schedule::zb_v}) {
    CAPTURE(schemas::to_string(s));
    PipelineConfig c = chunked(s, 2, 2, 4, 1, s == Schedule::zb_v);
    c.compute = DType::bf16;
    c.model.tie_embeddings = true;
    check_chunked<float>(c, 3);
  }
}

TEST_CASE("tied embeddings: the embedding and the head on chunks of two ranks, or of one; with clipping") {
  // interleaved: chunk 0 on position 0, the last chunk on position d - 1 (on one rank when d = 1); zb-v:
  // both on position 0, as two chunks of one rank.
  const struct {
    Schedule s;
    int64_t d, v, w;
  } cases[] = {{Schedule::interleaved, 2, 2, 1}, {Schedule::interleaved, 2, 2, 2}, {Schedule::interleaved, 1, 2, 2},
               {Schedule::zb_v, 2, 2, 1},        {Schedule::zb_v, 2, 2, 2},        {Schedule::zb_v, 3, 2, 1},
               {Schedule::zb_h2, 3, 1, 2}};
  for (const auto& k : cases)
    for (double clip : {0.0, 0.05}) {
      CAPTURE(schemas::to_string(k.s));
      CAPTURE(k.d);
      CAPTURE(k.w);
      CAPTURE(clip);
      PipelineConfig c = chunked(k.s, k.d, k.v, 2 * k.d, k.w);
      c.model.tie_embeddings = true;
      c.optimizer.clip_norm = clip;
      check_chunked<double>(c, 3);
    }
  PipelineConfig c = chunked(Schedule::zb_v, 2, 2, 4, 2, true);
  c.model.tie_embeddings = true;
  c.optimizer.clip_norm = 0.05;
  check_chunked<float>(c, 2);
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Skips final : public LossSink {
  void on_loss(int64_t step, int64_t replica, int64_t microbatch, double loss) override {
    losses.on_loss(step, replica, microbatch, loss);
  }
  void on_skip(int64_t step, const std::string& why) override {
    const std::lock_guard<std::mutex> lock(mutex);
    skipped.emplace_back(step, why);
  }
  Losses losses;
  std::mutex mutex;
  std::vector<std::pair<int64_t, std::string>> skipped;
};

// Two clean steps, then a NaN planted in replica 0's weights of model chunk `chunk` (on whichever rank
// holds it), then two steps more with skip_nonfinite; returns the job.
void poison_and_skip(ThreadsJob<double>& job, const PipelineConfig& c, int64_t chunk, Skips& skips) {
  const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
  job.run(data, 0, 2, &skips);
  auto& wk = job.worker(c.ranks[static_cast<size_t>(c.position_of(chunk))][0]);
  const int64_t id = c.chunks == 1 ? StageWorker<double>::kOnlyChunk : chunk;
  std::vector<double> cur(wk.weights(2, id).begin(), wk.weights(2, id).end());
  const std::vector<double> m1(wk.moment1(id).begin(), wk.moment1(id).end());
  const std::vector<double> m2(wk.moment2(id).begin(), wk.moment2(id).end());
  cur[cur.size() / 2] = kNaN;
  wk.restore(2, {}, cur, m1, m2, id);
  job.run(data, 2, 2, &skips);
}

}  // namespace

TEST_CASE("a non-finite step is skipped alike: the same verdict and state as Flush on the chunks") {
  for (Schedule s : {Schedule::interleaved, Schedule::zb_v}) {
    CAPTURE(schemas::to_string(s));
    PipelineConfig c = chunked(s, 2, 2, 2, 2);
    c.optimizer.skip_nonfinite = true;
    const PipelineConfig f = as_flush(c);
    for (int64_t chunk : {1, 2}) {
      CAPTURE(chunk);
      ThreadsJob<double> job(c), flush(f);
      Skips a, b;
      poison_and_skip(job, c, chunk, a);
      poison_and_skip(flush, f, chunk, b);
      REQUIRE(a.skipped.size() == 2 * static_cast<size_t>(job.ranks()));  // steps 3 and 4, on every rank
      for (Skips* k : {&a, &b}) {  // once per step (the ranks of a step say the same)
        std::sort(k->skipped.begin(), k->skipped.end());
        k->skipped.erase(std::unique(k->skipped.begin(), k->skipped.end()), k->skipped.end());
      }
      CHECK(a.skipped.size() == 2);
      CHECK(a.skipped == b.skipped);
      CHECK(a.skipped.front().second.find("the loss of 2 microbatches") == 0);
      CHECK(same_losses(a.losses, b.losses));
      for (int64_t r = 0; r < job.ranks(); ++r)
        for (const int64_t ch : job.worker(r).chunks()) {
          auto& fw = flush.worker(f.ranks[static_cast<size_t>(ch)][static_cast<size_t>(job.worker(r).replica())]);
          CHECK(same_bits<double>(job.worker(r).weights(4, ch), fw.weights(4)));
          CHECK(same_bits<double>(job.worker(r).moment1(ch), fw.moment1()));
        }
    }
  }
}

TEST_CASE("a chunked run of 2 steps restored into a new job and run 2 more equals one run of 4, bit for bit") {
  for (Schedule s : {Schedule::interleaved, Schedule::zb_h2, Schedule::zb_v}) {
    CAPTURE(schemas::to_string(s));
    PipelineConfig c = chunked(s, 2, s == Schedule::zb_h2 ? 1 : 2, 4, 2, s == Schedule::zb_v);
    c.model.tie_embeddings = true;
    const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
    ThreadsJob<double> whole(c), first(c), second(c);
    Losses all, parts;
    whole.run(data, 0, 4, &all);
    first.run(data, 0, 2, &parts);
    for (int64_t r = 0; r < first.ranks(); ++r)
      for (const int64_t ch : first.worker(r).chunks()) {
        auto& a = first.worker(r);
        second.worker(r).restore(2, {}, a.weights(2, ch), a.moment1(ch), a.moment2(ch), ch);
      }
    second.run(data, 2, 2, &parts);
    CHECK(parts.by_key == all.by_key);
    for (int64_t r = 0; r < whole.ranks(); ++r)
      for (const int64_t ch : whole.worker(r).chunks()) {
        CHECK(same_bits<double>(second.worker(r).weights(4, ch), whole.worker(r).weights(4, ch)));
        CHECK(same_bits<double>(second.worker(r).moment2(ch), whole.worker(r).moment2(ch)));
      }
  }
}

TEST_CASE(
    "a rank of several chunks names the chunk meant; a config whose chunks of a rank recompute apart is refused") {
  const PipelineConfig c = chunked(Schedule::interleaved, 2, 2, 2, 1);
  StageWorker<double> w(c, 1);
  CHECK(w.stage() == 1);
  CHECK(w.chunks() == std::vector<int64_t>{1, 3});
  CHECK_THROWS_AS((void)w.weights(0), Error);     // which of its two chunks?
  CHECK_THROWS_AS((void)w.weights(0, 2), Error);  // chunk 2 is position 0's
  CHECK(w.weights(0, 3).size() == static_cast<size_t>(layout_numel(w.layout(3))));
  PipelineConfig bad = c;
  bad.recompute = {false, false, true, false};  // chunk 2 shares position 0 with chunk 0
  CHECK_THROWS_AS(bad.validate(), UsageError);
}
