// The deterministic random numbers behind parameter initialisation.
// Everything here uses integer arithmetic and IEEE +, -, *, / and sqrt only (log and cos are our own
// series, not libm's), so the same seed gives bit-identical numbers on every platform and compiler.
#pragma once

#include <cstdint>
#include <string_view>

namespace pd2bw::executor {

// Advances state by the splitmix64 increment and returns the next 64-bit output.
uint64_t splitmix64(uint64_t& state);

// 64-bit FNV-1a hash of a string (stable across platforms, unlike std::hash).
uint64_t fnv1a64(std::string_view text);

// The seed of one parameter tensor: a mix of the run's seed, the model layer index (0 = embedding)
// and the hash of the tensor's name. A tensor's values thus do not depend on how layers are split
// into stages or on which other tensors exist.
uint64_t tensor_seed(uint64_t seed, int64_t layer, std::string_view name);

// The seed of row `row` of microbatch `microbatch` of `step` on `replica` in a data stream named by `tag`:
// (seed, tag, step, microbatch, replica, row) folded in that order, each fold a full splitmix64 avalanche
// of the running hash xor the value. Streams of different tags are independent.
uint64_t row_seed(uint64_t seed, uint64_t tag, int64_t step, int64_t microbatch, int64_t replica, int64_t row);

// ln(x) for finite x > 0, within a few ulp of the exact value; deterministic everywhere.
double portable_log(double x);
// sin(2 pi u) and cos(2 pi u) for u in [0, 1), within a few ulp; deterministic everywhere.
void portable_sincos_2pi(double u, double& sin_out, double& cos_out);

// Standard normal numbers by the Box-Muller transform over a splitmix64 stream.
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : state_(seed) {}
  double next();
  // Uniform in (0, 1] with 53 random bits.
  double uniform_open0();

 private:
  uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace pd2bw::executor
