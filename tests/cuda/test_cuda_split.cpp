// The split backward on the cuda backend (zb-h1): the layers' B and W halves make the same kernel and
// GEMM calls as the fused backward, so zb-h1 on the GPU gives Flush-on-the-GPU's losses and weights bit
// for bit, and stays within the parity tolerance of the cpu run; the optional halves of linear and
// layer norm backward computed apart give the fused call's bits.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "cuda_test_util.hpp"
#include "pd2bw/executor/layers.hpp"
#include "pipeline_reference.hpp"

using namespace pd2bw::executor;
using pd2bw::schemas::Schedule;
using pd2bw::test::max_norm_error;
using pd2bw::testing::HashSource;
using pd2bw::testing::RecordedLosses;

namespace {

std::vector<float> host_copy(std::span<float> s) {
  return {s.begin(), s.end()};
}

}  // namespace

TEST_CASE("zb-h1 on the GPU equals Flush on the GPU bit for bit, and the cpu within 1e-4") {
  for (const int pattern : {0, 1}) {
    CAPTURE(pattern);
    PipelineConfig c = pd2bw::testing::tiny_pipeline(Schedule::flush, 2, 4, 2, pattern);
    c.model.tie_embeddings = pattern == 1;
    c.optimizer.kind = pd2bw::schemas::Optimizer::sgd;
    const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
    c.backend = "cuda";
    ThreadsJob<float> flush(c);
    RecordedLosses flush_losses;
    flush.run(data, 0, 4, &flush_losses);
    c.schedule = Schedule::zb_h1;
    ThreadsJob<float> zb(c);
    RecordedLosses zb_losses;
    zb.run(data, 0, 4, &zb_losses);
    CHECK(zb_losses.by_key == flush_losses.by_key);
    c.backend = "cpu";
    ThreadsJob<float> cpu(c);
    RecordedLosses cpu_losses;
    cpu.run(data, 0, 4, &cpu_losses);
    for (int64_t r = 0; r < c.ranks_total(); ++r) {
      CAPTURE(r);
      const std::vector<float> a = host_copy(zb.worker(r).weights(4)), b = host_copy(flush.worker(r).weights(4));
      CHECK(a == b);
      CHECK(max_norm_error(a, host_copy(cpu.worker(r).weights(4))) <= 1e-4);
    }
  }
}

TEST_CASE("cuda linear and layer norm backward: the halves computed apart keep the fused call's bits") {
  auto gpu = make_backend("cuda");
  const int64_t n = 37, in = 24, out = 40;
  const auto values = [](int64_t k, uint64_t seed) { return pd2bw::test::random_values<float>(k, seed); };
  const auto up = [&](const std::vector<float>& v) {
    Buffer b = gpu->alloc(DType::f32, static_cast<int64_t>(v.size()));
    gpu->from_host(v.data(), b.view());
    return b;
  };
  const auto down = [&](const Buffer& b) {
    std::vector<float> v(static_cast<size_t>(b.numel()));
    gpu->to_host(b.view(), v.data());
    return v;
  };
  Buffer dy = up(values(n * out, 1)), x = up(values(n * in, 2)), w = up(values(out * in, 3));
  Buffer dx1 = up(std::vector<float>(n * in)), dw1 = up(values(out * in, 4)), db1 = up(values(out, 5));
  Buffer dx2 = up(std::vector<float>(n * in)), dw2 = up(values(out * in, 4)), db2 = up(values(out, 5));
  gpu->linear_backward(dy.view(), x.view(), w.view(), dx1.view(), dw1.view(), db1.view(), n, in, out);
  gpu->linear_backward(dy.view(), x.view(), w.view(), dx2.view(), {}, {}, n, in, out);
  gpu->linear_backward(dy.view(), x.view(), {}, {}, dw2.view(), db2.view(), n, in, out);
  CHECK(down(dx1) == down(dx2));
  CHECK(down(dw1) == down(dw2));
  CHECK(down(db1) == down(db2));

  const int64_t c = 48;
  Buffer ly = up(values(n * c, 6)), lx = up(values(n * c, 7)), gamma = up(values(c, 8)), beta = up(values(c, 9));
  Buffer y = up(std::vector<float>(n * c)), mean = up(std::vector<float>(n)), rstd = up(std::vector<float>(n));
  gpu->layernorm_forward(lx.view(), gamma.view(), beta.view(), y.view(), mean.view(), rstd.view(), n, c);
  Buffer ldx1 = up(std::vector<float>(n * c)), dg1 = up(values(c, 10)), dbeta1 = up(values(c, 11));
  Buffer ldx2 = up(std::vector<float>(n * c)), dg2 = up(values(c, 10)), dbeta2 = up(values(c, 11));
  gpu->layernorm_backward(ly.view(), lx.view(), gamma.view(), mean.view(), rstd.view(), ldx1.view(), dg1.view(),
                          dbeta1.view(), n, c);
  gpu->layernorm_backward(ly.view(), lx.view(), gamma.view(), mean.view(), rstd.view(), ldx2.view(), {}, {}, n, c);
  gpu->layernorm_backward(ly.view(), lx.view(), gamma.view(), mean.view(), rstd.view(), {}, dg2.view(), dbeta2.view(),
                          n, c);
  CHECK(down(ldx1) == down(ldx2));
  CHECK(down(dg1) == down(dg2));
  CHECK(down(dbeta1) == down(dbeta2));
}
