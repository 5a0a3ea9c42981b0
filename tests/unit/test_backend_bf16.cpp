// Tests of the cpu backend's bf16: every op in bf16 against the same op in fp32 on the same
// bf16-representable inputs, and the dtype rules of mixed precision. The bf16 value type, copy's casts,
// the arena and the registry are tested in test_backend.cpp.
//
// Tolerance of the bf16-vs-fp32 comparisons. The cpu backend runs a bf16 op by widening its inputs to
// fp32 exactly, running the fp32 reference op and rounding the compute-dtype outputs to bf16 once. On
// inputs that are already bf16 values both runs therefore compute the same fp32 numbers, and a bf16
// output differs from the fp32 one only by that final rounding: bf16 keeps 8 significant bits, so
// |bf16(x) - x| <= 2^-8 |x| (half an ulp). Outputs are checked against exactly that bound (plus 1e-37
// for subnormal results). Parameter gradients, per-row statistics and the loss stay fp32 (f64 for the
// loss) in place in both runs, computed by the same code from the same values: they must be equal.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "executor_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/backend.hpp"

using namespace pd2bw::executor;
using pd2bw::test::random_ids;
using pd2bw::test::random_values;

namespace {

float widen(bf16 h) { return static_cast<float>(h); }

// A compute-dtype tensor held twice: as fp32 for the reference run and as bf16 for the bf16 run, both
// holding the same (bf16-representable) values before the op.
struct Dual {
  std::vector<float> f;
  std::vector<bf16> h;
  // n random values in [-scale, scale) rounded to bf16 (seed != 0), or n zeros.
  explicit Dual(int64_t n, uint64_t seed = 0, double scale = 1.0) : f(static_cast<size_t>(n), 0.0F), h(f.size()) {
    if (seed != 0) {
      const auto r = random_values<float>(n, seed, scale);
      for (size_t i = 0; i < f.size(); ++i) h[i] = bf16(r[i]);
    }
    for (size_t i = 0; i < f.size(); ++i) f[i] = widen(h[i]);
  }
  // Makes the bf16 copy the rounding of the fp32 one and the fp32 copy its exact widening: turns an
  // fp32 result into the next op's common input.
  void round_from_f32() {
    for (size_t i = 0; i < f.size(); ++i) f[i] = widen(h[i] = bf16(f[i]));
  }
  View view(DType t) {
    const auto n = static_cast<int64_t>(f.size());
    return t == DType::bf16 ? view_of(h.data(), n) : view_of(f.data(), n);
  }
};

// An fp32 (accumulate-dtype) tensor, one copy per run, both starting from the same values (nonzero, so
// that accumulation is seen).
struct Acc {
  std::vector<float> ref, mixed;
  explicit Acc(int64_t n, uint64_t seed = 0) : ref(seed != 0 ? random_values<float>(n, seed) : std::vector<float>(static_cast<size_t>(n), 0.0F)), mixed(ref) {}
  View view(DType t) {
    auto& v = t == DType::bf16 ? mixed : ref;
    return view_of(v.data(), static_cast<int64_t>(v.size()));
  }
};

// Every bf16 output within 2^-8 relative of the fp32 output (see the header comment).
void check_rounded(const Dual& out, const char* what) {
  INFO(what);
  int64_t bad = 0, worst = -1;
  for (size_t i = 0; i < out.f.size(); ++i) {
    const float want = out.f[i], have = widen(out.h[i]);
    const bool ok = std::isfinite(want) && std::abs(have - want) <= std::ldexp(std::abs(want), -8) + 1e-37F;
    if (!ok && bad++ == 0) worst = static_cast<int64_t>(i);
  }
  INFO("first bad index " << worst << " of " << out.f.size());
  CHECK(bad == 0);
}

// The fp32 tensors of both runs equal bit for bit.
void check_equal(const Acc& a, const char* what) {
  INFO(what);
  REQUIRE(a.ref.size() == a.mixed.size());
  CHECK(std::memcmp(a.ref.data(), a.mixed.data(), a.ref.size() * sizeof(float)) == 0);
}

constexpr DType kRuns[] = {DType::f32, DType::bf16};

struct Shape {
  int64_t b, t, c, h;
  int64_t n() const { return b * t; }
};
// N = B*T in {1, 7, 33}, C in {8, 24} with H dividing C.
const std::vector<Shape> kShapes = {{1, 1, 8, 2}, {1, 7, 24, 3}, {3, 11, 8, 2}, {3, 11, 24, 3}, {7, 1, 24, 4}};

}  // namespace

// ---- ops: bf16 against fp32 ---------------------------------------------------------------------------

TEST_CASE("linear forward and backward in bf16 agree with fp32") {
  auto be = make_backend("cpu");
  for (const Shape& s : kShapes)
    for (bool bias : {true, false}) {
      const int64_t n = s.n(), in = s.c, out = 3 * s.c;
      CAPTURE(n);
      CAPTURE(in);
      CAPTURE(bias);
      Dual x(n * in, 1), w(out * in, 2, 0.3), b(out, 3), y(n * out), dy(n * out, 4), dx(n * in);
      Acc dw(out * in, 5), db(out, 6);
      for (DType t : kRuns) {
        be->linear_forward(x.view(t), w.view(t), bias ? ConstView(b.view(t)) : ConstView{}, y.view(t), n, in, out);
        be->linear_backward(dy.view(t), x.view(t), w.view(t), dx.view(t), dw.view(t), bias ? db.view(t) : View{}, n, in,
                            out);
      }
      check_rounded(y, "y");
      check_rounded(dx, "dx");
      check_equal(dw, "dweight");
      check_equal(db, "dbias");
    }
}

TEST_CASE("layer norm forward and backward in bf16 agree with fp32") {
  auto be = make_backend("cpu");
  for (const Shape& s : kShapes) {
    const int64_t n = s.n(), c = s.c;
    CAPTURE(n);
    CAPTURE(c);
    Dual x(n * c, 11, 2.0), gamma(c, 12), beta(c, 13), y(n * c), dy(n * c, 14), dx(n * c);
    Acc mean(n), rstd(n), dgamma(c, 15), dbeta(c, 16);
    for (DType t : kRuns) be->layernorm_forward(x.view(t), gamma.view(t), beta.view(t), y.view(t), mean.view(t), rstd.view(t), n, c);
    check_rounded(y, "y");
    check_equal(mean, "mean");
    check_equal(rstd, "rstd");
    for (DType t : kRuns)
      be->layernorm_backward(dy.view(t), x.view(t), gamma.view(t), mean.view(t), rstd.view(t), dx.view(t),
                             dgamma.view(t), dbeta.view(t), n, c);
    check_rounded(dx, "dx");
    check_equal(dgamma, "dgamma");
    check_equal(dbeta, "dbeta");
  }
}

TEST_CASE("GELU forward and backward in bf16 agree with fp32, also in place") {
  auto be = make_backend("cpu");
  for (int64_t n : {1, 7, 33 * 24}) {
    CAPTURE(n);
    Dual x(n, 21, 4.0), y(n), dy(n, 22), dx(n);
    for (DType t : kRuns) {
      be->gelu_forward(x.view(t), y.view(t), n, GeluKind::tanh);
      be->gelu_backward(dy.view(t), x.view(t), dx.view(t), n, GeluKind::tanh);
    }
    check_rounded(y, "y");
    check_rounded(dx, "dx");
    y.round_from_f32();  // the forward's output is the next run's common input
    for (DType t : kRuns) {  // the aliasing the contract allows: y = x, dx = dy
      be->gelu_forward(x.view(t), x.view(t), n, GeluKind::tanh);
      be->gelu_backward(dy.view(t), y.view(t), dy.view(t), n, GeluKind::tanh);
    }
    check_rounded(x, "y in place");
    check_rounded(dy, "dx in place");
  }
}

TEST_CASE("attention forward and backward in bf16 agree with fp32") {
  auto be = make_backend("cpu");
  for (const Shape& s : kShapes) {
    const int64_t n = s.n(), c = s.c;
    CAPTURE(s.b);
    CAPTURE(s.t);
    CAPTURE(c);
    CAPTURE(s.h);
    Dual qkv(n * 3 * c, 31, 2.0), out(n * c), probs(s.b * s.h * s.t * s.t), dout(n * c, 32), dqkv(n * 3 * c);
    for (DType t : kRuns)
      be->attention_forward(qkv.view(t), out.view(t), probs.view(t), s.b, s.t, c, s.h, AttentionMask{});
    check_rounded(out, "out");
    check_rounded(probs, "probs");
    probs.round_from_f32();  // both backward runs read the same saved probabilities
    for (DType t : kRuns)
      be->attention_backward(dout.view(t), qkv.view(t), out.view(t), probs.view(t), dqkv.view(t), s.b, s.t, c, s.h,
                             AttentionMask{});
    check_rounded(dqkv, "dqkv");
  }
}

TEST_CASE("embedding forward and backward in bf16 agree with fp32") {
  auto be = make_backend("cpu");
  const int64_t v = 13, tmax = 12;
  for (const Shape& s : kShapes) {
    const int64_t c = s.c;
    CAPTURE(s.b);
    CAPTURE(s.t);
    CAPTURE(c);
    const auto tokens = random_ids(s.n(), static_cast<int32_t>(v), 41);
    const ConstView ids = view_of(tokens.data(), s.n());
    Dual wte(v * c, 42), wpe(tmax * c, 43), out(s.n() * c), dout(s.n() * c, 44);
    Acc dwte(v * c, 45), dwpe(tmax * c, 46);
    for (DType t : kRuns) {
      be->embedding_forward(ids, wte.view(t), wpe.view(t), out.view(t), s.b, s.t, c, v);
      be->embedding_backward(ids, dout.view(t), dwte.view(t), dwpe.view(t), s.b, s.t, c);
    }
    check_rounded(out, "out");
    check_equal(dwte, "dwte");
    check_equal(dwpe, "dwpe");
  }
}

TEST_CASE("cross-entropy forward and backward in bf16 agree with fp32") {
  auto be = make_backend("cpu");
  for (int64_t n : {1, 7, 33})
    for (int64_t v : {11, 37}) {
      CAPTURE(n);
      CAPTURE(v);
      const auto targets = random_ids(n, static_cast<int32_t>(v), 51);
      const ConstView ids = view_of(targets.data(), n);
      Dual logits(n * v, 52, 5.0), dlogits(n * v);
      Acc lse(n);
      double loss[2] = {0, 0};
      for (DType t : kRuns) {
        double& l = loss[t == DType::bf16 ? 1 : 0];
        be->cross_entropy_forward(logits.view(t), ids, lse.view(t), view_of(&l, 1), n, v);
        be->cross_entropy_backward(logits.view(t), ids, lse.view(t), dlogits.view(t), n, v, 1.0 / 3.0);
      }
      CHECK(loss[1] == loss[0]);
      CHECK(loss[0] > 0);
      check_equal(lse, "lse");
      check_rounded(dlogits, "dlogits");
      for (DType t : kRuns)  // dlogits may alias logits
        be->cross_entropy_backward(logits.view(t), ids, lse.view(t), logits.view(t), n, v, 1.0 / 3.0);
      check_rounded(logits, "dlogits in place");
    }
}

TEST_CASE("add and accumulate in bf16 agree with fp32") {
  auto be = make_backend("cpu");
  for (int64_t n : {1, 7, 33 * 8}) {
    CAPTURE(n);
    Dual a(n, 61), b(n, 62), out(n), acc(n, 63);
    for (DType t : kRuns) {
      be->add(a.view(t), b.view(t), out.view(t), n);
      be->accumulate(acc.view(t), a.view(t), n);
    }
    check_rounded(out, "a + b");
    check_rounded(acc, "acc += a");
    for (DType t : kRuns) be->add(a.view(t), b.view(t), a.view(t), n);  // out may alias a
    check_rounded(a, "a += b by add");
  }
}

// ---- dtype rules --------------------------------------------------------------------------------------

TEST_CASE("bf16 ops take gradients and statistics in fp32 only") {
  auto be = make_backend("cpu");
  const int64_t n = 3, c = 8;
  Dual x(n * c, 81), w(c * c, 82), dy(n * c, 83), dx(n * c), y(n * c), gamma(c, 84), beta(c, 85);
  std::vector<double> dw64(static_cast<size_t>(c * c)), stats64(static_cast<size_t>(n));
  std::vector<float> dw32(static_cast<size_t>(c * c)), stats32(static_cast<size_t>(n));
  std::vector<bf16> dw16(static_cast<size_t>(c * c)), stats16(static_cast<size_t>(n));
  const auto bf = DType::bf16;
  CHECK_THROWS_AS(be->linear_backward(dy.view(bf), x.view(bf), w.view(bf), dx.view(bf), view_of(dw64.data(), c * c), {}, n, c, c),
                  pd2bw::UsageError);
  CHECK_THROWS_AS(be->linear_backward(dy.view(bf), x.view(bf), w.view(bf), dx.view(bf), view_of(dw16.data(), c * c), {}, n, c, c),
                  pd2bw::UsageError);
  CHECK_NOTHROW(be->linear_backward(dy.view(bf), x.view(bf), w.view(bf), dx.view(bf), view_of(dw32.data(), c * c), {}, n, c, c));
  CHECK_THROWS_AS(be->layernorm_forward(x.view(bf), gamma.view(bf), beta.view(bf), y.view(bf), view_of(stats16.data(), n),
                                        view_of(stats16.data(), n), n, c),
                  pd2bw::UsageError);
  CHECK_THROWS_AS(be->layernorm_forward(x.view(bf), gamma.view(bf), beta.view(bf), y.view(bf), view_of(stats64.data(), n),
                                        view_of(stats64.data(), n), n, c),
                  pd2bw::UsageError);
  // Compute-dtype arguments must agree with each other: an fp32 weight under bf16 activations is refused.
  CHECK_THROWS_AS(be->linear_forward(x.view(bf), w.view(DType::f32), {}, y.view(bf), n, c, c), pd2bw::UsageError);
  std::vector<int32_t> ids(static_cast<size_t>(n * c));
  CHECK_THROWS_AS(be->gelu_forward(view_of(ids.data(), n * c), view_of(ids.data(), n * c), n * c, GeluKind::tanh),
                  pd2bw::UsageError);
  CHECK(be->supports(DType::bf16));
  CHECK(be->supports(DType::f32));
  CHECK(be->supports(DType::f64));
  CHECK_FALSE(be->supports(DType::i32));
}
