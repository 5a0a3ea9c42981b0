// The ops BERT added to the cpu backend through the Backend interface (make_backend("cpu")): attention under
// a key padding mask and the erf GELU in f64 are the reference ops of test_executor_ops_bert.cpp, and f32
// and bf16 are close to them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "executor_test_util.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/ops.hpp"

namespace ex = pd2bw::executor;
namespace cpu = pd2bw::executor::cpu;
using pd2bw::test::random_values;
using Vec = std::vector<double>;
using Ids = std::vector<int32_t>;

namespace {

constexpr int64_t kB = 3, kT = 6, kC = 8, kH = 2;
constexpr int64_t kQkv = kB * kT * 3 * kC, kOut = kB * kT * kC, kProbs = kB * kH * kT * kT;
const Ids kLengths = {kT, 1, 4};  // a full sequence, a single token, a padded one

template <typename S>
std::vector<S> to_dtype(const Vec& v) {
  std::vector<S> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = S(static_cast<float>(v[i]));  // exact: v is bf16-representable
  return out;
}
template <typename S>
Vec to_double(const std::vector<S>& v) {
  Vec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(static_cast<float>(v[i]));
  if constexpr (std::is_same_v<S, double>) out = v;
  return out;
}
// Values in [-scale, scale) rounded to bf16, so f64, f32 and bf16 runs read the same numbers.
Vec bf16_values(int64_t n, uint64_t seed, double scale) {
  Vec v = random_values(n, seed, scale);
  for (double& x : v) x = static_cast<float>(ex::bf16(static_cast<float>(x)));
  return v;
}

// Every |have - want| <= rel |want| + abs_frac max|want|.
void close(const Vec& have, const Vec& want, double rel, double abs_frac) {
  double top = 0, worst = 0;
  for (const double w : want) top = std::max(top, std::abs(w));
  bool ok = true;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(have[i] - want[i]), bound = rel * std::abs(want[i]) + abs_frac * top;
    worst = std::max(worst, err / bound);
    ok = ok && err <= bound;
  }
  INFO("worst error / bound = " << worst);
  CHECK(ok);
}

struct AttnRun {
  Vec out, probs, dqkv;
};
template <typename S>
AttnRun backend_attention(ex::Backend& be, const Vec& qkv, const Vec& dout) {
  const std::vector<S> q = to_dtype<S>(qkv), d = to_dtype<S>(dout);
  std::vector<S> out(kOut), probs(kProbs), dqkv(kQkv);
  const ex::AttentionStash st = be.attention_stash(ex::dtype_of<S>(), kB, kT, kH);
  REQUIRE((st.dtype == ex::dtype_of<S>() && st.numel == kProbs));
  const auto mask = ex::AttentionMask::bidirectional(ex::view_of(kLengths.data(), kB));
  be.attention_forward(ex::view_of(q.data(), kQkv), ex::view_of(out.data(), kOut), ex::view_of(probs.data(), kProbs),
                       kB, kT, kC, kH, mask);
  be.attention_backward(ex::view_of(d.data(), kOut), ex::view_of(q.data(), kQkv), ex::view_of(out.data(), kOut),
                        ex::view_of(probs.data(), kProbs), ex::view_of(dqkv.data(), kQkv), kB, kT, kC, kH, mask);
  return {to_double(out), to_double(probs), to_double(dqkv)};
}

}  // namespace

TEST_CASE("backend: masked attention in f64 is the reference op; f32 and bf16 are close to it") {
  const auto be = ex::make_backend("cpu");
  const Vec qkv = bf16_values(kQkv, 151, 1.5), dout = bf16_values(kOut, 152, 1.0);
  const AttnRun f64 = backend_attention<double>(*be, qkv, dout);
  Vec out(kOut), probs(kProbs), dqkv(kQkv);
  cpu::attention_forward(qkv.data(), out.data(), probs.data(), kB, kT, kC, kH, false, kLengths.data());
  cpu::attention_backward(dout.data(), qkv.data(), probs.data(), dqkv.data(), kB, kT, kC, kH, false, kLengths.data());
  CHECK(f64.out == out);  // the mask's causal flag and lengths reach the op
  CHECK(f64.probs == probs);
  CHECK(f64.dqkv == dqkv);
  // f32: the same formula in single precision.
  const AttnRun f32 = backend_attention<float>(*be, qkv, dout);
  close(f32.out, f64.out, 1e-5, 1e-6);
  close(f32.dqkv, f64.dqkv, 1e-5, 1e-6);
  // bf16: fp32 arithmetic on the same inputs, outputs rounded once (2^-8 relative); the backward reads the
  // bf16-rounded probabilities, so its error is a few roundings of the largest terms: 1% of the largest.
  const AttnRun h = backend_attention<ex::bf16>(*be, qkv, dout);
  close(h.out, f64.out, std::ldexp(1.0, -8), 1e-5);
  close(h.dqkv, f64.dqkv, 0.0, 1e-2);
  for (int64_t row = 0; row < kB * kH * kT; ++row)
    for (int64_t j = kLengths[row / (kH * kT)]; j < kT; ++j) REQUIRE(h.probs[row * kT + j] == 0.0);
}

TEST_CASE("backend: erf GELU in f64 is the reference op (not tanh's); f32 and bf16 are close to it") {
  const auto be = ex::make_backend("cpu");
  const int64_t n = 64;
  Vec x = bf16_values(n, 161, 4.0);
  x[0] = 1.0;
  x[1] = -1.0;
  x[2] = 0.0;
  const Vec dy = bf16_values(n, 162, 1.0);
  Vec y_ref(n), dx_ref(n), y_tanh(n);
  cpu::gelu_erf_forward(x.data(), y_ref.data(), n);
  cpu::gelu_erf_backward(dy.data(), x.data(), dx_ref.data(), n);
  cpu::gelu_forward(x.data(), y_tanh.data(), n);
  const auto run = [&]<typename S>(S /*tag*/) {
    const std::vector<S> xs = to_dtype<S>(x), ds = to_dtype<S>(dy);
    std::vector<S> y(n), dx(n);
    be->gelu_forward(ex::view_of(xs.data(), n), ex::view_of(y.data(), n), n, ex::GeluKind::erf);
    be->gelu_backward(ex::view_of(ds.data(), n), ex::view_of(xs.data(), n), ex::view_of(dx.data(), n), n,
                      ex::GeluKind::erf);
    return std::pair{to_double(y), to_double(dx)};
  };
  const auto [y64, dx64] = run(0.0);
  CHECK(y64 == y_ref);
  CHECK(dx64 == dx_ref);
  CHECK(y64[0] == doctest::Approx(0.8413447460685429).epsilon(1e-15));
  CHECK(y64 != y_tanh);
  const auto [y32, dx32] = run(0.0F);
  close(y32, y_ref, 1e-6, 1e-7);
  close(dx32, dx_ref, 1e-6, 1e-7);
  const auto [yh, dxh] = run(ex::bf16{});
  close(yh, y_ref, std::ldexp(1.0, -8), 1e-6);
  close(dxh, dx_ref, std::ldexp(1.0, -8), 1e-6);
}
