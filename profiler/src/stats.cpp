// Sample statistics for the layer and link measurements.
#include <algorithm>
#include <cmath>

#include "measure.hpp"
#include "pd2bw/error.hpp"

namespace pd2bw::profiler {

namespace detail {

Spread summarize(std::vector<double> samples) {
  if (samples.empty()) throw Error("profiler: no timing samples to summarise");
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  Spread s;
  s.min = samples.front();
  s.median = n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  // Nearest rank: the smallest sample with at least 90% of the samples at or below it.
  const auto rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n)));
  s.p90 = samples[std::max<size_t>(rank, 1) - 1];
  return s;
}

double median_of_slowest(const std::vector<std::vector<double>>& per_round, int64_t skip) {
  std::vector<double> samples;
  for (size_t i = static_cast<size_t>(skip); i < per_round.size(); ++i)
    samples.push_back(*std::max_element(per_round[i].begin(), per_round[i].end()));
  return summarize(samples).median;
}

}  // namespace detail
}  // namespace pd2bw::profiler
