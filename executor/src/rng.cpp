// Portable deterministic random numbers: splitmix64, FNV-1a, and Box-Muller with our own log and
// sin/cos series (libm's may differ by an ulp between platforms; these use only IEEE-exact steps).
#include "pd2bw/executor/rng.hpp"

#include <cmath>

namespace pd2bw::executor {
namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kTwoPi = 6.28318530717958647692;
constexpr double kSqrtHalf = 0.70710678118654752440;

// The splitmix64 output function, also used to mix seeds.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// sin and cos of a in [-pi/4, pi/4] by Taylor series (terms beyond a^21 are below 1e-20).
void sincos_small(double a, double& s, double& c) {
  const double a2 = a * a;
  double sp = 1.0;
  double cp = 1.0;
  // Horner from the highest term: sin = a (1 - a2/(2*3) (1 - a2/(4*5) (...))), cos likewise.
  for (int k = 11; k >= 1; --k) {
    sp = 1.0 - a2 / static_cast<double>((2 * k) * (2 * k + 1)) * sp;
    cp = 1.0 - a2 / static_cast<double>((2 * k - 1) * (2 * k)) * cp;
  }
  s = a * sp;
  c = cp;
}

}  // namespace

uint64_t splitmix64(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ULL;
  return mix64(state);
}

uint64_t fnv1a64(std::string_view text) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (char ch : text) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001B3ULL;
  }
  return h;
}

uint64_t tensor_seed(uint64_t seed, int64_t layer, std::string_view name) {
  return mix64(mix64(mix64(seed) ^ static_cast<uint64_t>(layer)) ^ fnv1a64(name));
}

uint64_t row_seed(uint64_t seed, uint64_t tag, int64_t step, int64_t microbatch, int64_t replica, int64_t row) {
  uint64_t h = seed;
  for (const uint64_t value : {tag, static_cast<uint64_t>(step), static_cast<uint64_t>(microbatch),
                               static_cast<uint64_t>(replica), static_cast<uint64_t>(row)}) {
    uint64_t state = h ^ value;
    h = splitmix64(state);
  }
  return h;
}

double portable_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // exact: x = m * 2^e, m in [0.5, 1)
  if (m < kSqrtHalf) {
    m *= 2.0;
    --e;
  }
  // ln(m) = 2 atanh(z), z = (m - 1) / (m + 1), |z| <= 0.172, so z^2 <= 0.0295 and 14 terms suffice.
  const double z = (m - 1.0) / (m + 1.0);
  const double z2 = z * z;
  double series = 0.0;
  for (int k = 14; k >= 0; --k) series = 1.0 / static_cast<double>(2 * k + 1) + z2 * series;
  return static_cast<double>(e) * kLn2 + 2.0 * z * series;
}

void portable_sincos_2pi(double u, double& sin_out, double& cos_out) {
  // Nearest quarter turn q, remainder angle a in [-pi/4, pi/4]; u - q/4 is exact.
  const double q = std::floor(4.0 * u + 0.5);
  const double a = kTwoPi * (u - 0.25 * q);
  double s = 0;
  double c = 0;
  sincos_small(a, s, c);
  switch (static_cast<int>(q) & 3) {
    case 0:
      sin_out = s;
      cos_out = c;
      break;
    case 1:
      sin_out = c;
      cos_out = -s;
      break;
    case 2:
      sin_out = -s;
      cos_out = -c;
      break;
    default:
      sin_out = -c;
      cos_out = s;
      break;
  }
}

double NormalRng::uniform_open0() { return static_cast<double>((splitmix64(state_) >> 11) + 1) * 0x1.0p-53; }

double NormalRng::next() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = uniform_open0();
  const double u2 = uniform_open0() - 0x1.0p-53;  // [0, 1)
  const double r = std::sqrt(-2.0 * portable_log(u1));
  double s = 0;
  double c = 0;
  portable_sincos_2pi(u2, s, c);
  spare_ = r * s;
  has_spare_ = true;
  return r * c;
}

}  // namespace pd2bw::executor
