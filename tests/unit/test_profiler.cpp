// Tests of the profiler library: one small run_profile checked for its layer list, timing order,
// stash sizes (computed = the layer's Stash::bytes(), measured near it), parameter sizes, link curves
// and progress reports; option validation; the link message grid.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/device.hpp"
#include "pd2bw/executor/layers.hpp"
#include "pd2bw/profiler/profiler.hpp"
#include "pd2bw/schemas/profile.hpp"
#include "profiler_test_util.hpp"

namespace ex = pd2bw::executor;
namespace pf = pd2bw::profiler;
using pd2bw::test::small_profile_options;

namespace {

ex::ModelConfig config_of(const pf::ProfileOptions& o) {
  return {.vocab = o.vocab, .seq_len = o.seq_len, .d_model = o.d_model, .heads = o.heads, .blocks = o.blocks,
          .tie_embeddings = o.tie_embeddings};
}

// Stash::bytes() of a real forward of layer `layer` at microbatch b (the shape decides the size).
int64_t stash_bytes_of(const ex::ModelConfig& cfg, int64_t layer, int64_t b) {
  const int64_t n = b * cfg.seq_len;
  std::vector<float> x(static_cast<size_t>(n * cfg.d_model), 0.1f), y(x.size());
  std::vector<int32_t> ids(static_cast<size_t>(n), 1);
  switch (ex::layer_kind(cfg, layer)) {
    case ex::LayerKind::embedding: {
      ex::HostEmbedding<float> e(cfg, 1);
      ex::HostEmbedding<float>::Stash s;
      e.forward(e.params().data(), ids.data(), b, cfg.seq_len, s, y.data());
      return s.bytes();
    }
    case ex::LayerKind::block: {
      ex::HostBlock<float> blk(cfg, layer - 1, 1);
      ex::HostBlock<float>::Stash s;
      blk.forward(blk.params().data(), x.data(), b, cfg.seq_len, s, y.data());
      return s.bytes();
    }
    case ex::LayerKind::head: {
      ex::HostHead<float> h(cfg, 1);
      ex::HostHead<float>::Stash s;
      h.forward(h.params().data(), nullptr, x.data(), ids.data(), b, cfg.seq_len, s);
      return s.bytes();
    }
  }
  return -1;
}

struct Run {
  pd2bw::schemas::Profile profile;
  std::vector<double> fractions;
};

const Run& small_run() {
  static const Run run = [] {
    Run r;
    r.profile = pf::run_profile(small_profile_options(), [&r](double f, const std::string&) { r.fractions.push_back(f); });
    return r;
  }();
  return run;
}

}  // namespace

TEST_CASE("run_profile lists embedding, every block and head with their parameter sizes") {
  const pf::ProfileOptions o = small_profile_options();
  const ex::ModelConfig cfg = config_of(o);
  const auto& p = small_run().profile;
  REQUIRE(p.layers.size() == 4);
  const std::vector<std::string> names{"embedding", "block.0", "block.1", "head"};
  const std::vector<std::string> kinds{"embedding", "block", "block", "head"};
  for (size_t i = 0; i < p.layers.size(); ++i) {
    CAPTURE(i);
    CHECK(p.layers[i].name == names[i]);
    CHECK(p.layers[i].kind == kinds[i]);
    const int64_t numel = ex::layout_numel(ex::layer_layout(cfg, static_cast<int64_t>(i)));
    CHECK(p.layers[i].param_bytes == numel * 4);
    CHECK(p.layers[i].optimizer_bytes == numel * 8);
  }
  CHECK(p.model.kind == "gpt");
  CHECK(p.model.blocks == 2);
  CHECK(p.model.dtype == pd2bw::schemas::DType::fp32);
  CHECK(p.microbatch_sizes == std::vector<int64_t>{1, 2});
  CHECK(p.device.name == "cpu");
  CHECK(p.device.memory_bytes > 0);
  CHECK(p.provenance.tool == "pd2bw profile");
  CHECK(p.provenance.notes.find("block.0..block.1") != std::string::npos);
}

TEST_CASE("run_profile times and sizes every layer at every microbatch size") {
  const ex::ModelConfig cfg = config_of(small_profile_options());
  const auto& p = small_run().profile;
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const auto& layer = p.layers[i];
    REQUIRE(layer.per_microbatch.size() == 2);
    for (const auto& t : layer.per_microbatch) {
      CAPTURE(layer.name);
      CAPTURE(t.microbatch);
      CHECK(t.fwd_ms_min > 0);
      CHECK(t.fwd_ms_min <= t.fwd_ms);
      CHECK(t.fwd_ms <= t.fwd_ms_p90);
      CHECK(t.bwd_ms_min > 0);
      CHECK(t.bwd_ms_min <= t.bwd_ms);
      CHECK(t.bwd_ms <= t.bwd_ms_p90);
      CHECK(t.recompute_ms > 0);
      CHECK(t.stash_bytes_computed == stash_bytes_of(cfg, static_cast<int64_t>(i), t.microbatch));
      // The arena sees exactly the stash's buffers: nothing else a forward allocates stays alive.
      CHECK(t.stash_bytes == t.stash_bytes_computed);
      const int64_t act = t.microbatch * cfg.seq_len * cfg.d_model * 4;
      CHECK(t.input_bytes == (layer.kind == "embedding" ? t.microbatch * cfg.seq_len * 4 : act));
      CHECK(t.output_bytes == (layer.kind == "head" ? 4 : act));
    }
  }
  // Every block copies the one measured block.
  CHECK(p.layers[1].per_microbatch[1].fwd_ms == p.layers[2].per_microbatch[1].fwd_ms);
}

TEST_CASE("run_profile times the backward's halves apart and sizes what B leaves for W") {
  const ex::ModelConfig cfg = config_of(small_profile_options());
  const auto& p = small_run().profile;
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const auto& layer = p.layers[i];
    for (const auto& t : layer.per_microbatch) {
      CAPTURE(layer.name);
      CAPTURE(t.microbatch);
      CHECK(t.split);
      CHECK(t.bwd_weight_ms > 0);
      const int64_t n = t.microbatch * cfg.seq_len, act = n * cfg.d_model * 4;
      if (layer.kind == "embedding") {
        CHECK(t.bwd_input_ms == 0);  // no input gradient: the whole backward is W
        CHECK(t.bwd_weight_stash_bytes == t.stash_bytes);
      } else if (layer.kind == "block") {
        CHECK(t.bwd_input_ms > 0);
        // B frees qkv (N, 3C), the (B, H, S, S) probabilities and fc (N, 4C), and keeps 11 (N, C)
        // output gradients (dy, dfc 4, dln2, dx1, dqkv 3, dln1) for W.
        const int64_t freed = 7 * act + t.microbatch * cfg.heads * cfg.seq_len * cfg.seq_len * 4;
        CHECK(t.bwd_weight_stash_bytes == t.stash_bytes - freed + 11 * act);
      } else {
        CHECK(t.bwd_input_ms > 0);
        CHECK(t.bwd_weight_stash_bytes == t.stash_bytes - 2 * n * 4 + act);  // targets and lse out, dln in
      }
    }
  }
}

TEST_CASE("run_profile measures the node links on ascending message sizes") {
  const auto& p = small_run().profile;
  REQUIRE(p.links.size() == 1);
  const auto& l = p.links[0];
  CHECK(l.level == "node");
  CHECK(l.allreduce_ranks == small_profile_options().link_ranks);
  const std::vector<int64_t> sizes{4096, 16384, 65536, 262144};
  for (const auto* curve : {&l.p2p_curve, &l.allreduce_curve}) {
    REQUIRE(curve->size() == sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      CHECK((*curve)[i].bytes == sizes[i]);
      CHECK((*curve)[i].ms > 0);
    }
  }
  CHECK(l.p2p_latency_ms == l.p2p_curve.front().ms);
  CHECK(l.p2p_gbps == doctest::Approx(262144 / (l.p2p_curve.back().ms * 1e-3) / 1e9));
  const double r = static_cast<double>(l.allreduce_ranks);
  CHECK(l.allreduce_busbw_gbps ==
        doctest::Approx(2 * (r - 1) / r * 262144 / (l.allreduce_curve.back().ms * 1e-3) / 1e9));
}

TEST_CASE("run_profile reports non-decreasing progress ending at 1") {
  const auto& f = small_run().fractions;
  REQUIRE(f.size() > 2);
  CHECK(f.front() >= 0.0);
  for (size_t i = 1; i < f.size(); ++i) CHECK(f[i] >= f[i - 1]);
  CHECK(f.back() == 1.0);
}

TEST_CASE("a tied head counts its copy of the token table and is timed with it") {
  pf::ProfileOptions o = small_profile_options();
  o.tie_embeddings = true;
  o.microbatches = {1};
  o.link_max_bytes = 4096;
  const auto p = pf::run_profile(o, {});
  const ex::ModelConfig cfg = config_of(o);
  const int64_t head_numel = ex::layout_numel(ex::layer_layout(cfg, 3));
  CHECK(p.model.tie_embeddings);
  CHECK(p.layers.back().param_bytes == (head_numel + o.vocab * o.d_model) * 4);
  CHECK(p.layers.back().per_microbatch[0].bwd_ms > 0);
  CHECK(p.links[0].p2p_curve.size() == 1);
}

TEST_CASE("validate_options refuses bad options with a usage error") {
  const auto refuses = [](auto change) {
    pf::ProfileOptions o = small_profile_options();
    change(o);
    CHECK_THROWS_AS(pf::validate_options(o), pd2bw::UsageError);
  };
  refuses([](pf::ProfileOptions& o) { o.heads = 3; });
  refuses([](pf::ProfileOptions& o) { o.d_model = 0; });
  refuses([](pf::ProfileOptions& o) { o.blocks = -1; });
  refuses([](pf::ProfileOptions& o) { o.iters = 0; });
  refuses([](pf::ProfileOptions& o) { o.microbatches = {2, 2}; });
  refuses([](pf::ProfileOptions& o) { o.microbatches = {}; });
  refuses([](pf::ProfileOptions& o) { o.link_ranks = 1; });
  refuses([](pf::ProfileOptions& o) { o.link_max_bytes = 1024; });
  refuses([](pf::ProfileOptions& o) { o.device = "tpu"; });
  refuses([](pf::ProfileOptions& o) { o.dtype = "bf16"; });
  pf::ProfileOptions cuda = small_profile_options();
  cuda.device = "cuda";
  cuda.dtype = "bf16";
  std::string why;
  if (ex::backend_available("cuda", &why))
    CHECK_NOTHROW(pf::validate_options(cuda));
  else  // "no CUDA device: ..." (built, no GPU) or "no backend named 'cuda'" (not built)
    CHECK_THROWS_WITH_AS(pf::validate_options(cuda), doctest::Contains(why.c_str()), pd2bw::UsageError);
  CHECK_NOTHROW(pf::validate_options(small_profile_options()));
}

TEST_CASE("link_message_sizes grows by 4 and ends at the largest size") {
  pf::ProfileOptions o;
  o.link_min_bytes = 4096;
  o.link_max_bytes = 65536;
  CHECK(pf::link_message_sizes(o) == std::vector<int64_t>{4096, 16384, 65536});
  o.link_max_bytes = 100000;
  CHECK(pf::link_message_sizes(o) == std::vector<int64_t>{4096, 16384, 65536, 100000});
  o.link_max_bytes = 4096;
  CHECK(pf::link_message_sizes(o) == std::vector<int64_t>{4096});
}
