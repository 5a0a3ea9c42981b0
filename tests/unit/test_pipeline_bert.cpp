// BERT through the pipeline runtime, against the sequential reference bit for bit: 2BW over d = 2 and 4
// (post-LN and pre-LN, with padded rows and ignored targets) is the delayed rule W(j+1) = W(j) -
// update(g(W(j-1))); Flush, GPipe and zb-h1 equal plain minibatch training. The tied decoder sits on
// the last stage, apart from the word table on the first, so the tied gradient is summed across them. A
// sequence longer than the position table is refused.
#include <doctest/doctest.h>

#include "pd2bw/error.hpp"
#include "pipeline_reference.hpp"

using namespace pd2bw;
using namespace pd2bw::executor;
using pd2bw::testing::check_pipeline_equal;
using schemas::Schedule;

namespace {

// The tiny pipeline of pipeline_reference.hpp with a bert model (vocab 11, seq 5, d_model 8, 2 heads,
// 3 blocks; tied, as bert always is) of the given layer-norm placement.
PipelineConfig bert_pipeline(Schedule s, int64_t d, int64_t m, int64_t w, int recompute, LnPlacement ln) {
  PipelineConfig c = pd2bw::testing::tiny_pipeline(s, d, m, w, recompute);
  c.model.family = ModelFamily::bert;
  c.model.tie_embeddings = true;
  c.model.ln = ln;
  c.validate();
  return c;
}

}  // namespace

TEST_CASE("bert: 2BW pipelined equals the sequential delayed rule bit for bit (d = 2 and 4, post- and pre-LN)") {
  for (LnPlacement ln : {LnPlacement::post, LnPlacement::pre})
    for (int64_t d : {2, 4})
      for (int64_t w : {1, 2}) {
        CAPTURE(static_cast<int>(ln));
        CAPTURE(d);
        CAPTURE(w);
        check_pipeline_equal<double>(bert_pipeline(Schedule::two_bw, d, d + 1, w, d == 4 ? 2 : 0, ln), 3);
      }
  check_pipeline_equal<float>(bert_pipeline(Schedule::two_bw, 2, 3, 1, 0, LnPlacement::post), 3);
}

TEST_CASE("bert: Flush, GPipe and zb-h1 equal plain minibatch training") {
  for (Schedule s : {Schedule::flush, Schedule::gpipe, Schedule::zb_h1})
    for (int64_t d : {2, 3}) {
      CAPTURE(static_cast<int>(s));
      CAPTURE(d);
      check_pipeline_equal<double>(bert_pipeline(s, d, 3, s == Schedule::zb_h1 ? 1 : 2, 0, LnPlacement::post), 3);
    }
  check_pipeline_equal<double>(bert_pipeline(Schedule::zb_h1, 2, 4, 2, 0, LnPlacement::pre), 3);
}

TEST_CASE("bert: the padded rows and ignored targets of the test data are really there") {
  const pd2bw::testing::HashSource data(11, 2, 5, true);
  std::vector<int32_t> tokens(10), targets(10), types(10), lengths(2);
  int64_t ignored = 0, padded = 0;
  for (int64_t step = 0; step < 3; ++step) {
    data.fill(step, 0, 0, tokens.data(), targets.data());
    REQUIRE(data.fill_segments(step, 0, 0, types.data(), lengths.data()));
    for (int32_t t : targets) ignored += t == kIgnoreTarget ? 1 : 0;
    for (int32_t l : lengths) padded += l < 5 ? 1 : 0;
  }
  CHECK(ignored > 0);
  CHECK(ignored < 30);
  CHECK(padded > 0);
}

TEST_CASE("bert: a sequence longer than the position table is refused before anything runs") {
  ModelConfig m = ModelConfig::of(ModelFamily::bert);
  m.vocab = 11;
  m.seq_len = 5;
  m.d_model = 8;
  m.heads = 2;
  m.blocks = 1;
  const HostEmbedding<double> embedding(m, 1);
  EmbeddingStash stash;
  std::vector<int32_t> tokens(6, 1), types(6, 0);
  std::vector<double> out(6 * 8);
  CHECK_THROWS_WITH_AS(embedding.forward(embedding.params().data(), tokens.data(), 1, 6, stash, out.data(), types.data()),
                       doctest::Contains("0 < seq <= 5"), pd2bw::UsageError);
  PipelineConfig c = bert_pipeline(Schedule::two_bw, 2, 3, 1, 0, LnPlacement::post);
  c.seq = c.model.seq_len + 1;
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("outside 1..5"), pd2bw::UsageError);
}
