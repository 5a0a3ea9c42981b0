// Reading JSON takes time linear in the text (issue 28: nlohmann's callback parser scanned an array's
// members after each object in it ended, so a 20k-stage plan took 30 s under ASan). The checks compare
// the time of an input with that of one four times as large (best of several runs, so a busy machine
// slows both): linear reading gives a ratio near 4, the quadratic one near 16.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "pd2bw/error.hpp"
#include "pd2bw/schemas/validate.hpp"
#include "schema_test_util.hpp"

namespace s = pd2bw::schemas;
using pd2bw::testing::schema_error_of;

namespace {

// A plan-like document with `n` small objects in one array, then a key no plan has (so validation stops
// right after the text is read).
std::string wide_document(int n) {
  std::string text = R"({"schema": "pd2bw.plan", "stages": [)";
  for (int i = 0; i < n; ++i) text += i ? R"(, {"index": 1, "layers": [0, 1]})" : R"({"index": 1, "layers": [0, 1]})";
  return text + "]}";
}

// The same depth-wise: `n` nested arrays, each holding an object and the next array.
std::string deep_document(int n) {
  std::string text = R"({"schema": "pd2bw.plan", "stages": )";
  for (int i = 0; i < n; ++i) text += R"([{"a": 1}, )";
  text += "0";
  for (int i = 0; i < n; ++i) text += "]";
  return text + "}";
}

// Best of `runs` wall-clock seconds of validating `text` (which fails: the document is not a plan).
double seconds_to_read(const std::string& text, int runs = 3) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string err = schema_error_of([&] { (void)s::validate_document(text); });
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    CHECK(err.find("<no error>") == std::string::npos);
  }
  return best;
}

void check_linear(std::string (*make)(int), int n) {
  const std::string small = make(n), large = make(4 * n);
  seconds_to_read(small, 1);  // warm the allocator
  const double t1 = seconds_to_read(small), t4 = seconds_to_read(large);
  INFO("n = " << n << ": " << t1 << " s; 4n: " << t4 << " s (ratio " << t4 / t1 << ")");
  // Linear is ~4x; quadratic ~16x. Below 2 ms the clock and the allocator dominate: nothing to compare.
  CHECK((t4 < 0.002 || t4 < 9.0 * t1));
}

}  // namespace

TEST_CASE("reading a long array of objects takes linear time") { check_linear(wide_document, 20000); }

TEST_CASE("reading deeply nested arrays of objects takes linear time") { check_linear(deep_document, 5000); }
