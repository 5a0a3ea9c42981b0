// The libraries link nlohmann, Eigen, CUDA and MPI privately, so their public headers (every */include/
// directory) must not include them: a consumer would need the dependency's headers without linking it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// The private dependencies, as the start of what follows "#include <" or "#include \"".
const std::vector<std::string> kPrivate = {"nlohmann/", "Eigen/", "unsupported/Eigen/", "cuda", "cublas",
                                           "nccl.h", "mpi.h", "cusparse", "curand"};

// The private dependency that `line` includes, or "" when it includes none.
std::string private_include(const std::string& line) {
  const auto hash = line.find_first_not_of(" \t");
  if (hash == std::string::npos || line[hash] != '#') return "";
  const auto word = line.find_first_not_of(" \t", hash + 1);
  if (word == std::string::npos || line.compare(word, 7, "include") != 0) return "";
  const auto open = line.find_first_of("<\"", word + 7);
  if (open == std::string::npos) return "";
  const std::string target = line.substr(open + 1);
  for (const std::string& dep : kPrivate) {
    if (target.rfind(dep, 0) == 0) return dep;
  }
  return "";
}

}  // namespace

TEST_CASE("the include-line check recognises private dependencies") {
  CHECK(private_include("#include <nlohmann/json.hpp>") == "nlohmann/");
  CHECK(private_include("  #  include \"cuda_runtime.h\"") == "cuda");
  CHECK(private_include("#include <Eigen/Dense>") == "Eigen/");
  CHECK(private_include("#include <mpi.h>") == "mpi.h");
  CHECK(private_include("#include <string>").empty());
  CHECK(private_include("#include \"pd2bw/schemas/common.hpp\"").empty());
  CHECK(private_include("// #include <nlohmann/json.hpp>").empty());
}

TEST_CASE("no public header includes a private dependency") {
  const fs::path root = PD2BW_SOURCE_DIR;
  int headers = 0;
  for (const char* module : {"schemas", "planner", "executor", "profiler"}) {
    const fs::path include = root / module / "include";
    REQUIRE(fs::is_directory(include));
    for (const auto& e : fs::recursive_directory_iterator(include)) {
      if (!e.is_regular_file()) continue;
      ++headers;
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        const std::string dep = private_include(line);
        CAPTURE(line);
        CHECK_MESSAGE(dep.empty(), e.path().string() << ":" << n << " includes " << dep);
      }
    }
  }
  CHECK(headers > 20);  // the walk found the headers (a wrong root would pass vacuously)
}
