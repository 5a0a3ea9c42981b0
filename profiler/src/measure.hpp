// Internal building blocks of the profiler: sample statistics, one layer kind timed at one microbatch
// size on a backend, one link message size timed (host buffers on any Comm, links.cpp; device buffers
// between in-process ranks on one GPU, device_links.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/comm.hpp"
#include "pd2bw/executor/layers.hpp"
#include "pd2bw/executor/process_group.hpp"
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
// recomputes, and `iters` of the backward's halves apart (timing.split: bwd_input_ms, bwd_weight_ms and
// bwd_weight_stash_bytes, the arena's growth from before a forward to the end of its B). Throws pd2bw::Error from the
// layer's ops.
LayerMeasurement measure_layer(const Target& target, const executor::ModelConfig& config, executor::LayerKind kind,
                               int64_t microbatch, int64_t warmup, int64_t iters, uint64_t seed);

// Median time in ms of the runtime's update over `layout`'s parameters (AdamW, the trainer's default;
// with bf16 compute also the cast of the master into the new version) after `warmup` untimed ones.
double measure_update_ms(const Target& target, const executor::ParamLayout& layout, int64_t warmup, int64_t iters);

// On any Comm: `reps` round trips of a `bytes` message between ranks `first` and `second` (both call
// it; the others do not). Returns on `first` the median one-way time in ms (round trip / 2), 0 on `second`.
double p2p_ms_on(executor::Comm& comm, int64_t first, int64_t second, int64_t bytes, int64_t reps);
// On any Comm: `reps` rounds of the fixed-order allreduce_sum<float> of `bytes` over `group` (every
// member calls it), each from a common start; returns on every member the median over rounds of the
// slowest member's time in ms.
double allreduce_ms_on(executor::Comm& comm, const executor::Group& group, int64_t bytes, int64_t reps);
// The scalars of a level from its curves: p2p_gbps at the largest message, p2p_latency_ms at the
// smallest, allreduce_busbw_gbps = 2(R-1)/R * bytes / time at the largest (R = allreduce_ranks).
void derive_link_scalars(schemas::LinkLevel& level);
// The links between the processes of a job (process_links.cpp): level "node" over the processes of
// node 0, and level "cluster" over the first process of every node when there are several. Collective
// over every process of `group`; the levels are complete on rank 0. `step` is called on every
// process before each measurement with what is measured.
std::vector<schemas::LinkLevel> measure_process_links(const ProfileOptions& options, executor::ProcessGroup& group,
                                                      const std::function<void(const std::string&)>& step);
// How many measurements measure_process_links makes in `group` (for progress).
int64_t process_link_measurements(const ProfileOptions& options, const executor::ProcessGroup& group);

// The stage runtime against the layers (runtime_calibration.cpp): for each microbatch size (index bi into
// every layer's per_microbatch), the whole model of `config` as one cpu stage trained by ThreadsJob for
// kCalibrationSteps steps of kCalibrationFew and of kCalibrationMany microbatches; each step is the median
// CPU time of the rank thread per step after the first. Per microbatch (many - few steps over many - few)
// over sum (fwd_ms + bwd_ms) is compute_scale; the rest of the few step (median over the sizes) over sum
// update_ms is update_scale (1 without update_ms). `step` is called before each size. Throws pd2bw::Error
// when a compute_scale is above schemas::kMaxRuntimeScale (a machine too busy to measure).
// When the model has at least 2 layers it is also split in two stages at half its layers (d = 2, 2bw,
// each stage's rank thread timed on its own) and trained with kSplitFew and kSplitMany microbatches,
// giving runtime_calibration.split (schemas::RuntimeSplit); its scales are clamped to
// [1e-3, kMaxSplitScale].
inline constexpr int64_t kCalibrationFew = 1, kCalibrationMany = 5, kCalibrationSteps = 5;
inline constexpr int64_t kSplitFew = 2, kSplitMany = 6;
schemas::RuntimeCalibration calibrate_runtime(const executor::ModelConfig& config,
                                              const std::vector<schemas::LayerProfile>& layers,
                                              const std::vector<int64_t>& microbatches, uint64_t seed,
                                              const std::function<void(const std::string&)>& step);

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
