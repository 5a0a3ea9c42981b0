// Tests of the Backend seam: the bf16 value type (round to nearest even, NaN, infinities, signed zeros,
// overflow), copy's casts between f32, f64 and bf16, the caching arena's statistics and reuse, and the
// registry. Every cpu-backend op in bf16 against fp32, and the dtype rules of mixed precision, are tested in
// test_backend_bf16.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "executor_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/device.hpp"

using namespace pd2bw::executor;
using pd2bw::test::random_values;

namespace {

uint16_t bits_of(float f) { return bf16(f).bits; }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
float widen(bf16 h) { return static_cast<float>(h); }

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
