// The libFuzzer entry point of one target, chosen at build time (PD2BW_FUZZ_TARGET, a name of
// targets.hpp).
#include <cstddef>
#include <cstdint>

#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pd2bw::fuzz::PD2BW_FUZZ_TARGET(data, size);
  return 0;
}
