// The stage runtime timed against the layers: the whole model as one stage (d = 1, 2bw) trained for a few
// steps by the real runtime at each microbatch size with few and with many microbatches per step, on the
// rank thread's CPU clock. The difference of the two steps is the runtime's time per microbatch, the rest
// its time per step; against the layers' fwd + bwd and update_ms they become the scales the planner puts
// on those times (what the runtime spends beyond the isolated layers: caches gone cold between layers,
// boundary and stash buffers, the loss, the gradient norm and the non-finite check).
#include <fmt/format.h>

#include <time.h>

#include <algorithm>
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

// The rank thread's CPU time at the end of every step: the step's losses are reported on that thread
// when its last backward is done (2BW applies the update later, before the first op that reads the new
// version, so on_update would stamp the step after). A measure of the stage's own work that a busy
// machine's other processes do not inflate, as the layers' medians are not.
class StepClock final : public executor::LossSink {
 public:
  void on_loss(int64_t, int64_t, int64_t microbatch, double) override {
    if (microbatch != 0) return;
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    ends.push_back(static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6);
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

// The median CPU time of the rank thread per step, the first step (allocations) left out.
double runtime_step_ms(const executor::ModelConfig& cfg, int64_t b, int64_t m, uint64_t seed) {
  executor::ThreadsJob<float> job(whole_model(cfg, b, m, seed));
  const RandomTokens data(seed, b * cfg.seq_len, cfg.vocab);
  StepClock clock;
  job.run(data, 0, kCalibrationSteps, &clock);
  std::vector<double> steps_ms;
  for (size_t s = 1; s < clock.ends.size(); ++s) steps_ms.push_back(clock.ends[s] - clock.ends[s - 1]);
  return summarize(steps_ms).median;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
  }
  out.update_scale = update > 0 ? std::clamp(median_of(per_step) / update, 0.0, schemas::kMaxUpdateScale) : 1.0;
  return out;
}

}  // namespace pd2bw::profiler::detail
