// Internal building blocks of the profiler: sample statistics, one layer kind timed at one microbatch
// size on a backend, one link message size timed between in-process ranks (host memory, links.cpp, or
// device memory, device_links.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "pd2bw/executor/backend.hpp"
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
// The median over rounds [skip, ...) of each round's slowest rank: per_round[round][rank] in ms.
double median_of_slowest(const std::vector<std::vector<double>>& per_round, int64_t skip);

// The backend the layers are measured on and the dtype they compute in.
struct Target {
  executor::Backend& backend;
  executor::DType compute;
};

// ms of f(): wall time on a host backend (the cpu's ops are synchronous), the backend's events on a
// device (waiting for them). At least 1 ns, so that a coarse clock never yields the 0 ms the profile
// format rejects.
double time_ms(const Target& target, const std::function<void()>& f);

// One layer kind at one microbatch size. timing.stash_bytes is the growth of the backend arena's live
// bytes across one forward whose stash stays alive; param_bytes the growth when its weights (in the
// compute dtype; a tied head's copy of the token table included) were allocated.
struct LayerMeasurement {
  schemas::LayerTiming timing;
  int64_t param_bytes = 0;
};
// Builds the layer of `kind` for `config` on the target (weights from `seed`), runs `warmup` untimed
// forward+backward pairs, measures the stash once, then times `iters` forwards, backwards and
// recomputes. Throws pd2bw::Error from the layer's ops.
LayerMeasurement measure_layer(const Target& target, const executor::GptConfig& config, executor::GptLayerKind kind,
                               int64_t microbatch, int64_t warmup, int64_t iters, uint64_t seed);

// Median time in ms of the runtime's update over `layout`'s parameters (AdamW, the trainer's default;
// with bf16 compute also the cast of the master into the new version) after `warmup` untimed ones.
double measure_update_ms(const Target& target, const executor::ParamLayout& layout, int64_t warmup, int64_t iters);

// Median one-way time in ms of a `bytes` message between two in-process ranks (round trip / 2).
double measure_p2p_ms(int64_t bytes, int64_t reps);
// Median time in ms of the fixed-order allreduce_sum<float> of `bytes` over `ranks` in-process ranks; one sample is the
// slowest rank's time from a common start.
double measure_allreduce_ms(int64_t bytes, int64_t ranks, int64_t reps);

// The same two over device buffers of `backend`'s ranks (threads, each with a backend of its own on the
// one GPU), as stages on one GPU move their activations and sum their replicas' gradients.
double measure_device_p2p_ms(const std::string& backend, int64_t bytes, int64_t reps);
double measure_device_allreduce_ms(const std::string& backend, int64_t bytes, int64_t ranks, int64_t reps);

}  // namespace pd2bw::profiler::detail
