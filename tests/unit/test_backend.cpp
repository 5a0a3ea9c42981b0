// Tests of the Backend seam: the bf16 value type (round to nearest even, NaN, infinities, signed zeros,
// overflow), every cpu-backend op in bf16 against the same op in fp32 on the same bf16-representable
// inputs, copy's casts between f32, f64 and bf16, the dtype rules of mixed precision, the caching arena's
// statistics and reuse, and the registry.
//
// Tolerance of the bf16-vs-fp32 comparisons. The cpu backend runs a bf16 op by widening its inputs to
// fp32 exactly, running the fp32 reference op and rounding the compute-dtype outputs to bf16 once. On
// inputs that are already bf16 values both runs therefore compute the same fp32 numbers, and a bf16
// output differs from the fp32 one only by that final rounding: bf16 keeps 8 significant bits, so
// |bf16(x) - x| <= 2^-8 |x| (half an ulp). Outputs are checked against exactly that bound (plus 1e-37
// for subnormal results). Parameter gradients, per-row statistics and the loss stay fp32 (f64 for the
// loss) in place in both runs, computed by the same code from the same values: they must be equal.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "executor_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/device.hpp"

using namespace pd2bw::executor;
using pd2bw::test::random_ids;
using pd2bw::test::random_values;

namespace {

uint16_t bits_of(float f) { return bf16(f).bits; }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
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

// ---- the bf16 value type ------------------------------------------------------------------------------

TEST_CASE("bf16 rounds to nearest, ties to even, in both directions and both signs") {
  CHECK(bits_of(from_bits(0x3f808000u)) == 0x3f80);  // 1 + 2^-8: tie, 0x3f80 is even: down
  CHECK(bits_of(from_bits(0x3f818000u)) == 0x3f82);  // tie above the odd 0x3f81: up
  CHECK(bits_of(from_bits(0xbf808000u)) == 0xbf80);
  CHECK(bits_of(from_bits(0xbf818000u)) == 0xbf82);
  CHECK(bits_of(from_bits(0x3f808001u)) == 0x3f81);  // just above a tie: up
  CHECK(bits_of(from_bits(0x3f817fffu)) == 0x3f81);  // just below a tie: down
  CHECK(bits_of(from_bits(0x3f80ffffu)) == 0x3f81);
  CHECK(bits_of(from_bits(0x00008000u)) == 0x0000);  // subnormal tie, even
  CHECK(bits_of(from_bits(0x00018000u)) == 0x0002);
  CHECK(bits_of(from_bits(0x7f7f7fffu)) == 0x7f7f);  // below the overflow tie: the largest bf16
}

TEST_CASE("bf16 values round-trip exactly; NaN, infinities and signed zeros are kept; overflow gives inf") {
  int64_t checked = 0;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = from_bits(b << 16);
    if (std::isnan(f)) continue;
    if (bits_of(f) != b) {
      FAIL("bf16 0x" << std::hex << b << " does not round-trip");
      break;
    }
    ++checked;
  }
  CHECK(checked == 65536 - 2 * 127);  // every pattern but the NaNs (exponent all ones, mantissa != 0)
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu}) {
    CAPTURE(nan);
    CHECK(std::isnan(widen(bf16(from_bits(nan)))));  // a payload only in the low bits must not become inf
  }
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(bits_of(inf) == 0x7f80);
  CHECK(bits_of(-inf) == 0xff80);
  CHECK(bits_of(0.0F) == 0x0000);
  CHECK(bits_of(-0.0F) == 0x8000);
  CHECK(std::signbit(widen(bf16(-0.0F))));
  CHECK(bits_of(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(bits_of(-std::numeric_limits<float>::max()) == 0xff80);
  CHECK(widen(bf16(1.0F)) == 1.0F);
  CHECK(bf16(3.0F) == bf16(3.0F));
}

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

// ---- copy's casts -------------------------------------------------------------------------------------

TEST_CASE("copy casts f32, f64 and bf16 into each other with round to nearest even") {
  auto be = make_backend("cpu");
  const auto values = random_values<double>(64, 71, 100.0);
  std::vector<float> f(values.size()), f_back(values.size());
  std::vector<double> d_back(values.size());
  std::vector<bf16> h(values.size()), h_back(values.size());
  const auto n = static_cast<int64_t>(values.size());
  be->copy(view_of(values.data(), n), view_of(f.data(), n));
  be->copy(view_of(f.data(), n), view_of(h.data(), n));
  for (size_t i = 0; i < f.size(); ++i) {
    CHECK(f[i] == static_cast<float>(values[i]));
    CHECK(h[i] == bf16(f[i]));
  }
  be->copy(view_of(h.data(), n), view_of(f_back.data(), n));
  be->copy(view_of(h.data(), n), view_of(d_back.data(), n));
  be->copy(view_of(d_back.data(), n), view_of(h_back.data(), n));
  for (size_t i = 0; i < f.size(); ++i) {
    CHECK(f_back[i] == widen(h[i]));  // widening is exact
    CHECK(d_back[i] == static_cast<double>(widen(h[i])));
    CHECK(h_back[i] == h[i]);  // and narrows back exactly
  }
  be->copy(view_of(f.data(), n), view_of(d_back.data(), n));
  for (size_t i = 0; i < f.size(); ++i) CHECK(d_back[i] == static_cast<double>(f[i]));
}

TEST_CASE("copy from double to bf16 rounds the double once, not through float") {
  // A double just off a bf16 midpoint rounds to a float on the midpoint; rounding that float again
  // (ties to even) would go the wrong way. The nearest bf16 of the double is wanted.
  auto be = make_backend("cpu");
  const double up = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);        // above the 1 | 1+2^-7 midpoint
  const double down = 1.0 + 3 * std::ldexp(1.0, -8) - std::ldexp(1.0, -30);  // below the 1+2^-7 | 1+2^-6 one
  const double exact = 1.0 + std::ldexp(1.0, -7);
  const std::vector<double> src = {up, -up, down, -down, exact, 1.5, -0.0};
  std::vector<bf16> dst(src.size());
  be->copy(view_of(src.data(), 7), view_of(dst.data(), 7));
  CHECK(dst[0].bits == 0x3f81);
  CHECK(dst[1].bits == 0xbf81);
  CHECK(dst[2].bits == 0x3f81);
  CHECK(dst[3].bits == 0xbf81);
  CHECK(dst[4].bits == 0x3f81);
  CHECK(dst[5].bits == 0x3fc0);
  CHECK(dst[6].bits == 0x8000);
  const std::vector<double> special = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                                       1e300, std::numeric_limits<double>::denorm_min()};
  std::vector<bf16> out(special.size());
  be->copy(view_of(special.data(), 4), view_of(out.data(), 4));
  CHECK(out[0].bits == 0x7f80);
  CHECK(std::isnan(widen(out[1])));
  CHECK(out[2].bits == 0x7f80);
  CHECK(out[3].bits == 0x0000);
}

TEST_CASE("copy rejects different lengths and int32 <-> float") {
  auto be = make_backend("cpu");
  std::vector<float> f(4);
  std::vector<bf16> h(3);
  std::vector<int32_t> ids(4);
  CHECK_THROWS_AS(be->copy(view_of(f.data(), 4), view_of(h.data(), 3)), pd2bw::UsageError);
  CHECK_THROWS_AS(be->copy(view_of(ids.data(), 4), view_of(f.data(), 4)), pd2bw::UsageError);
  CHECK_THROWS_AS(be->copy(view_of(f.data(), 4), view_of(ids.data(), 4)), pd2bw::UsageError);
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

// ---- the caching arena --------------------------------------------------------------------------------

TEST_CASE("arena: current and peak bytes follow alloc and release exactly; peak resets") {
  auto be = make_backend("cpu");
  const MemoryStats fresh = be->memory();
  CHECK(fresh.current_bytes == 0);
  CHECK(fresh.peak_bytes == 0);
  CHECK(fresh.reserved_bytes == 0);
  CHECK(fresh.fresh_allocations == 0);
  Buffer a = be->alloc(DType::f32, 10);  // 40 bytes
  Buffer b = be->alloc(DType::bf16, 7);  // 14 bytes
  CHECK(a.bytes() == 40);
  CHECK(b.bytes() == 14);
  CHECK(be->memory().current_bytes == 54);
  CHECK(be->memory().peak_bytes == 54);
  CHECK(be->memory().fresh_allocations == 2);
  CHECK(be->memory().reserved_bytes >= 54);
  a.reset();
  CHECK(a.empty());
  CHECK(be->memory().current_bytes == 14);
  CHECK(be->memory().peak_bytes == 54);
  {
    Buffer c = be->alloc(DType::f64, 100);  // 800 bytes
    CHECK(be->memory().current_bytes == 814);
    CHECK(be->memory().peak_bytes == 814);
  }
  CHECK(be->memory().current_bytes == 14);
  CHECK(be->memory().peak_bytes == 814);
  be->reset_peak();
  CHECK(be->memory().peak_bytes == 14);
  Buffer d = be->alloc(DType::i32, 3);
  CHECK(be->memory().peak_bytes == 26);
  Buffer moved = std::move(d);  // a move hands the block over; nothing is released
  CHECK(d.empty());             // NOLINT(bugprone-use-after-move)
  CHECK(be->memory().current_bytes == 26);
  moved = be->alloc(DType::f32, 1);  // assignment releases the old block
  CHECK(be->memory().current_bytes == 18);
  CHECK(be->alloc(DType::f32, 0).empty());
  CHECK(be->memory().current_bytes == 18);
  CHECK_THROWS_AS(be->alloc(DType::f32, -1), pd2bw::UsageError);
}

TEST_CASE("arena: a released block is reused for the same size; a steady loop takes nothing more") {
  auto be = make_backend("cpu");
  void* first = nullptr;
  {
    Buffer a = be->alloc(DType::f32, 1000);
    first = a.data<void>();
  }
  Buffer again = be->alloc(DType::f32, 1000);
  CHECK(again.data<void>() == first);
  CHECK(be->memory().fresh_allocations == 1);
  again.reset();
  const auto step = [&] {  // the shapes of one microbatch: a few sizes and dtypes, some alive together
    Buffer x = be->alloc(DType::bf16, 33 * 24);
    Buffer y = be->alloc(DType::f32, 33 * 24);
    Buffer z = be->alloc(DType::bf16, 33 * 24);
    { Buffer scratch = be->alloc(DType::f32, 7); }
    Buffer w = be->alloc(DType::f32, 1000);
  };
  step();
  const MemoryStats settled = be->memory();
  for (int i = 0; i < 50; ++i) step();
  const MemoryStats after = be->memory();
  CHECK(after.fresh_allocations == settled.fresh_allocations);
  CHECK(after.reserved_bytes == settled.reserved_bytes);
  CHECK(after.current_bytes == 0);
  CHECK(after.peak_bytes == settled.peak_bytes);
  CHECK(settled.peak_bytes == 2 * 33 * 24 * 2 + 33 * 24 * 4 + 1000 * 4);
  // A different size is not served from the cache.
  Buffer other = be->alloc(DType::f32, 5000);
  CHECK(be->memory().fresh_allocations == after.fresh_allocations + 1);
}

TEST_CASE("arena: each backend instance has its own; the default backend is shared") {
  auto a = make_backend("cpu"), b = make_backend("cpu");
  Buffer x = a->alloc(DType::f32, 16);
  CHECK(a->memory().current_bytes == 64);
  CHECK(b->memory().current_bytes == 0);
  CHECK(&default_backend() == &default_backend());
  CHECK(default_backend().name() == "cpu");
}

// ---- the registry -------------------------------------------------------------------------------------

TEST_CASE("registry: cpu first, unknown names are refused with the list, names cannot be taken twice") {
  const auto names = backend_names();
  REQUIRE_FALSE(names.empty());
  CHECK(names.front() == "cpu");
  CHECK(make_backend("cpu")->name() == "cpu");
  try {
    make_backend("nope");
    FAIL("make_backend accepted an unknown name");
  } catch (const pd2bw::UsageError& e) {
    const std::string what = e.what();
    CHECK(what.find("nope") != std::string::npos);
    CHECK(what.find("cpu") != std::string::npos);
  }
  CHECK_THROWS_AS(register_backend("cpu", [] { return make_backend("cpu"); }), pd2bw::UsageError);
  register_backend("cpu-again", [] { return make_backend("cpu"); });
  CHECK(backend_names().back() == "cpu-again");
  CHECK(backend_names().front() == "cpu");
  CHECK(make_backend("cpu-again")->name() == "cpu");
  CHECK_THROWS_AS(register_backend("cpu-again", [] { return make_backend("cpu"); }), pd2bw::UsageError);
}

TEST_CASE("registry: cuda is listed exactly when built, and without a usable device it is refused, not a crash") {
  const auto names = backend_names();
  const bool built = std::find(names.begin(), names.end(), "cuda") != names.end();
  std::string why;
  const bool available = backend_available("cuda", &why);
  CHECK(backend_available("cpu"));
  if (!built) {
    CHECK_FALSE(available);
    CHECK_THROWS_AS(make_backend("cuda"), pd2bw::UsageError);
    return;
  }
  if (available) {  // a GPU machine
    CHECK(make_backend("cuda")->name() == "cuda");
    CHECK(device_info("cuda").memory_bytes > 0);
    return;
  }
  CHECK(why.rfind("no CUDA device: ", 0) == 0);
  try {
    make_backend("cuda");
    FAIL("the cuda backend was made without a device");
  } catch (const pd2bw::UsageError& e) {
    CHECK(std::string(e.what()).rfind("no CUDA device: ", 0) == 0);
    CHECK_FALSE(e.hint().empty());
  }
  CHECK_THROWS_AS(device_info("cuda"), pd2bw::UsageError);
  CHECK(device_info("cpu").memory_bytes > 0);
  CHECK(peak_tflops("NVIDIA H200", "bf16") > 900);
  CHECK(peak_tflops("a toaster", "bf16") == 0);
}
