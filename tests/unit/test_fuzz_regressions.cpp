// Replays every input the fuzzers have ever failed on (fuzz/regressions/<target>/) and the seeds they
// start from (schemas/examples, the writer fixtures) through the fuzz targets' bodies (fuzz/targets.cpp),
// in every build: a target aborts on a broken property, and the sanitizer builds catch the rest.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "targets.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() != ".md") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

void replay(const char* target, const std::vector<fs::path>& inputs) {
  const pd2bw::fuzz::Target run = pd2bw::fuzz::target_named(target);
  const bool known = run != nullptr;
  REQUIRE(known);
  for (const fs::path& p : inputs) {
    CAPTURE(p.string());
    const std::string bytes = pd2bw::test::read_bytes(p.string());
    run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
}

}  // namespace

TEST_CASE("every fuzz target takes its seeds and every saved failure") {
  const fs::path src(PD2BW_SOURCE_DIR);
  std::vector<fs::path> seeds = files_in(src / "schemas" / "examples");
  for (const fs::path& p : files_in(src / "tests" / "schema" / "fixtures")) seeds.push_back(p);
  REQUIRE(seeds.size() >= 6);
  for (const char* target : {"profile_reader", "cluster_reader", "plan_reader", "plan_search", "plan_values"}) {
    CAPTURE(target);
    replay(target, seeds);
    replay(target, files_in(src / "fuzz" / "regressions" / target));
  }
  const bool unknown = pd2bw::fuzz::target_named("no_such_target") == nullptr;
  CHECK(unknown);
}
