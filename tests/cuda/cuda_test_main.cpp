// The main of the GPU tests: they need a CUDA device, so without one (no cuda backend in this build, no
// driver, or CUDA_VISIBLE_DEVICES hiding every GPU) the binary says why and exits 77, which ctest
// reports as skipped (SKIP_RETURN_CODE 77). With a device it runs doctest as usual.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "pd2bw/executor/device.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (!pd2bw::executor::backend_available("cuda", &why)) {
    std::printf("no GPU: %s; skipping the GPU tests\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
