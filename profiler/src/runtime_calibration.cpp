// The stage runtime timed against the layers: the whole model as one stage (d = 1, 2bw) trained for a few
// steps by the real runtime at each microbatch size with few and with many microbatches per step, on the
// rank thread's CPU clock. The difference of the two steps is the runtime's time per microbatch, the rest
// its time per step; against the layers' fwd + bwd and update_ms they become the scales the planner puts
// on those times (what the runtime spends beyond the isolated layers: caches gone cold between layers,
// boundary and stash buffers, the loss, the gradient norm and the non-finite check).
#include <fmt/format.h>

#include <time.h>

#include <algorithm>
#include <array>
#include <optional>
#include <random>

#include "measure.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/pipeline.hpp"

namespace pd2bw::profiler::detail {
namespace {

// Random tokens and targets, a pure function of (seed, step, microbatch) as MicrobatchSource asks. Every
// target counts, as in the layer benches.
class RandomTokens final : public executor::MicrobatchSource {
 public:
  RandomTokens(uint64_t seed, int64_t numel, int64_t vocab) : seed_(seed), numel_(numel), vocab_(vocab) {}
  void fill(int64_t step, int64_t microbatch, int64_t replica, int32_t* tokens, int32_t* targets) const override {
    std::mt19937_64 rng(seed_ ^ (static_cast<uint64_t>(step) << 40) ^ (static_cast<uint64_t>(microbatch) << 20) ^
                        static_cast<uint64_t>(replica));
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab_ - 1));
    for (int64_t i = 0; i < numel_; ++i) {
      tokens[i] = dist(rng);
      targets[i] = dist(rng);
    }
  }

 private:
  uint64_t seed_;
  int64_t numel_, vocab_;
};

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

// The rank thread's CPU time at the end of every step: the step's losses are reported on that thread
// when its last backward is done (2BW applies the update later, before the first op that reads the new
// version, so on_update would stamp the step after). A measure of the stage's own work that a busy
// machine's other processes do not inflate, as the layers' medians are not.
class StepClock final : public executor::LossSink {
 public:
  void on_loss(int64_t, int64_t, int64_t microbatch, double) override {
    if (microbatch == 0) ends.push_back(thread_cpu_ms());
  }
  std::vector<double> ends;  // ms
};

executor::PipelineConfig whole_model(const executor::ModelConfig& cfg, int64_t b, int64_t m, uint64_t seed) {
  executor::PipelineConfig c;
  c.schedule = schemas::Schedule::two_bw;
  c.depth = c.width = c.chunks = 1;
  c.microbatches = m;
  c.microbatch_size = b;
  c.bounds = {0, cfg.layer_count()};
  c.recompute = {false};
  c.ranks = {{0}};
  c.model = cfg;
  c.seq = cfg.seq_len;
  c.seed = seed;
  c.optimizer.clip_norm = 1.0;  // pd2bw train's default: the step's gradient norm is part of its work
  c.backend = "cpu";
  return c;
}

// One rank's thread CPU time at each of its updates (on_update runs on the rank's own thread; between
// two of them the rank did one step's work, whenever 2BW applies the update).
class UpdateClock final : public executor::LossSink {
 public:
  void on_loss(int64_t, int64_t, int64_t, double) override {}
  void on_update(int64_t) override { ends.push_back(thread_cpu_ms()); }
  std::vector<double> ends;  // ms
};

// The median of the intervals between the stamps after the first (allocations) one.
double median_step(const std::vector<double>& ends) {
  std::vector<double> steps_ms;
  for (size_t s = 1; s < ends.size(); ++s) steps_ms.push_back(ends[s] - ends[s - 1]);
  return summarize(steps_ms).median;
}

// The median CPU time of the rank thread per step, the first step (allocations) left out.
double runtime_step_ms(const executor::ModelConfig& cfg, int64_t b, int64_t m, uint64_t seed) {
  executor::ThreadsJob<float> job(whole_model(cfg, b, m, seed));
  const RandomTokens data(seed, b * cfg.seq_len, cfg.vocab);
  StepClock clock;
  job.run(data, 0, kCalibrationSteps, &clock);
  return median_step(clock.ends);
}

// The same for the model split in two stages at `cut` (d = 2, 2bw), each rank a thread with a clock of
// its own: the median CPU ms per step of each stage.
std::array<double, 2> split_step_ms(const executor::ModelConfig& cfg, int64_t cut, int64_t b, int64_t m,
                                    uint64_t seed) {
  executor::PipelineConfig c = whole_model(cfg, b, m, seed);
  c.depth = 2;
  c.bounds = {0, cut, cfg.layer_count()};
  c.recompute = {false, false};
  c.ranks = {{0}, {1}};
  const auto comms = executor::make_threads_comms(2);
  std::vector<std::optional<executor::StageWorker<float>>> workers(2);
  executor::run_on_threads(comms, [&](executor::Comm& comm) {
    workers[static_cast<size_t>(comm.rank())].emplace(c, comm.rank(), comm);
  });
  const RandomTokens data(seed, b * cfg.seq_len, cfg.vocab);
  std::array<UpdateClock, 2> clocks;
  executor::run_on_threads(comms, [&](executor::Comm& comm) {
    const auto r = static_cast<size_t>(comm.rank());
    workers[r]->run(comm, data, 0, kCalibrationSteps, &clocks[r]);
  });
  return {median_step(clocks[0].ends), median_step(clocks[1].ends)};
}

// The layers [begin, end)'s fwd + bwd at microbatch index bi, and their update_ms.
double layers_compute(const std::vector<schemas::LayerProfile>& layers, size_t begin, size_t end, size_t bi) {
  double sum = 0;
  for (size_t j = begin; j < end; ++j) sum += layers[j].per_microbatch[bi].fwd_ms + layers[j].per_microbatch[bi].bwd_ms;
  return sum;
}
double layers_update(const std::vector<schemas::LayerProfile>& layers, size_t begin, size_t end) {
  double sum = 0;
  for (size_t j = begin; j < end; ++j) sum += layers[j].update_ms;
  return sum;
}

// The split run at microbatch index bi against the whole model's time per microbatch `whole_ms`
// (schemas::RuntimeSplit): the two stages' steps, the boundary and the scales; each stage's time per step
// beyond its microbatches is appended to rests[stage].
schemas::RuntimeSplitStep split_step(const executor::ModelConfig& cfg, const std::vector<schemas::LayerProfile>& layers,
                                     size_t cut, size_t bi, double whole_ms, uint64_t seed,
                                     std::array<std::vector<double>, 2>& rests) {
  schemas::RuntimeSplitStep r;
  r.microbatch = layers[0].per_microbatch[bi].microbatch;
  const auto b = r.microbatch;
  const auto few = split_step_ms(cfg, static_cast<int64_t>(cut), b, kSplitFew, seed);
  const auto many = split_step_ms(cfg, static_cast<int64_t>(cut), b, kSplitMany, seed);
  std::array<double, 2> per_mb{};
  for (size_t k = 0; k < 2; ++k) {
    r.step_ms[k] = {few[k], many[k]};
    per_mb[k] = (many[k] - few[k]) / static_cast<double>(kSplitMany - kSplitFew);
    rests[k].push_back(std::max(0.0, few[k] - static_cast<double>(kSplitFew) * per_mb[k]));
  }
  r.boundary_ms = std::max(0.0, per_mb[0] + per_mb[1] - whole_ms);
  const std::array<double, 2> compute = {layers_compute(layers, 0, cut, bi), layers_compute(layers, cut, layers.size(), bi)};
  for (size_t k = 0; k < 2; ++k)
    r.compute_scales[k] =
        std::clamp((per_mb[k] - 0.5 * r.boundary_ms) / compute[k], 1e-3, schemas::kMaxSplitScale);
  return r;
}

}  // namespace

schemas::RuntimeCalibration calibrate_runtime(const executor::ModelConfig& cfg,
                                              const std::vector<schemas::LayerProfile>& layers,
                                              const std::vector<int64_t>& microbatches, uint64_t seed,
                                              const std::function<void(const std::string&)>& step) {
  schemas::RuntimeCalibration out;
  out.few = kCalibrationFew;
  out.many = kCalibrationMany;
  const auto span = static_cast<double>(out.many - out.few);
  double update = 0;
  for (const auto& l : layers) update += l.update_ms;
  std::vector<double> per_step;
  std::array<std::vector<double>, 2> rests;  // the split's stages' times per step beyond their microbatches
  const size_t cut = layers.size() / 2;
  for (size_t bi = 0; bi < microbatches.size(); ++bi) {
    const int64_t b = microbatches[bi];
    step(fmt::format("runtime b={}", b));
    schemas::RuntimeStep r;
    r.microbatch = b;
    r.few_step_ms = runtime_step_ms(cfg, b, out.few, seed);
    r.many_step_ms = runtime_step_ms(cfg, b, out.many, seed);
    const double per_microbatch = (r.many_step_ms - r.few_step_ms) / span;
    per_step.push_back(r.few_step_ms - static_cast<double>(out.few) * per_microbatch);
    double compute = 0;
    for (const auto& l : layers) compute += l.per_microbatch[bi].fwd_ms + l.per_microbatch[bi].bwd_ms;
    r.compute_scale = std::max(1e-3, per_microbatch / compute);
    if (r.compute_scale > schemas::kMaxRuntimeScale)
      throw Error(fmt::format("the runtime's microbatch at b = {} took {:.3f} ms, {:.1f}x the {:.3f} ms its layers add "
                              "up to: the machine is too busy to calibrate",
                              b, per_microbatch, r.compute_scale, compute),
                  "profile again on a quiet machine");
    out.per_microbatch.push_back(r);
    if (layers.size() >= 2)
      out.split.per_microbatch.push_back(split_step(cfg, layers, cut, bi, per_microbatch, seed, rests));
  }
  out.update_scale = update > 0 ? std::clamp(summarize(per_step).median / update, 0.0, schemas::kMaxUpdateScale) : 1.0;
  if (!out.split.present()) return out;
  out.split.layer = static_cast<int64_t>(cut);
  out.split.few = kSplitFew;
  out.split.many = kSplitMany;
  const std::array<double, 2> updates = {layers_update(layers, 0, cut), layers_update(layers, cut, layers.size())};
  for (size_t k = 0; k < 2; ++k)
    out.split.update_scales[k] =
        updates[k] > 0 ? std::clamp(summarize(rests[k]).median / updates[k], 0.0, schemas::kMaxUpdateScale) : 1.0;
  return out;
}

}  // namespace pd2bw::profiler::detail
