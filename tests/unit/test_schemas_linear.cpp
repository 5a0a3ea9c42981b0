// Reading JSON takes time linear in the text (issue 28: nlohmann's callback parser scanned an array's
// members after each object in it ended, so a 20k-stage plan took 1 s in Release and 30 s under ASan,
// growing with the square of the size). The check reads an input so large that the quadratic reader
// needs 40 s in Release and the linear one well under a second, against a bound far from both.
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

void check_linear(std::string (*make)(int), int n, double bound_s) {
  const std::string text = make(n);
  const double t = seconds_to_read(text, 1);
  INFO("n = " << n << " (" << text.size() << " bytes): " << t << " s, bound " << bound_s << " s");
  CHECK(t < bound_s);
}

}  // namespace

// 400k objects (13 MB): the quadratic reader takes about 40 s in Release (10 s at 200k), the linear one
// about 0.6 s (a few seconds under ASan).
TEST_CASE("reading a long array of objects takes linear time") { check_linear(wide_document, 400000, 20.0); }
