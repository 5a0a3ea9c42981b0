// Internal building blocks of the profiler: sample statistics, one
// layer kind timed at one microbatch size, and one link message size timed.
#pragma once

#include <cstdint>
#include <vector>

#include "pd2bw/executor/gpt.hpp"
#include "pd2bw/profiler/profiler.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::profiler::detail {

// Median, minimum and 90th percentile (nearest rank) of a non-empty set of samples.
struct Spread {
  double median = 0, min = 0, p90 = 0;
};
// Throws pd2bw::Error for an empty sample set.
Spread summarize(std::vector<double> samples);

// One layer kind at one microbatch size. timing.stash_bytes is the growth of the backend arena's live
// bytes across one forward whose stash stays alive.
struct LayerMeasurement {
  schemas::LayerTiming timing;
};
// Builds the layer of `kind` for `config` (fp32, owned weights from `seed`), runs `warmup` untimed
// forward+backward pairs, measures the stash once, then times `iters` forwards, backwards and
// recomputes. Throws pd2bw::Error from the layer's ops.
LayerMeasurement measure_layer(const executor::GptConfig& config, executor::GptLayerKind kind,
                               int64_t microbatch, int64_t warmup, int64_t iters, uint64_t seed);

// Median time in ms of one AdamW step (the trainer's default optimizer, float, out of place as 2BW
// updates) over `layout`'s parameters, after `warmup` untimed steps.
double measure_update_ms(const executor::ParamLayout& layout, int64_t warmup, int64_t iters);

// Median one-way time in ms of a `bytes` message between two in-process ranks (round trip / 2).
double measure_p2p_ms(int64_t bytes, int64_t reps);
// Median time in ms of the fixed-order allreduce_sum<float> of `bytes` over `ranks` in-process ranks; one sample is the
// slowest rank's time from a common start.
double measure_allreduce_ms(int64_t bytes, int64_t ranks, int64_t reps);

}  // namespace pd2bw::profiler::detail
