// Seeded random planner instances (profile + cluster + constraints) for property tests: small enough
// to brute-force, varied enough to hit infeasible memory, recomputation, pinned choices and both
// placements. Header-only; the draws use our own arithmetic on std::mt19937_64 (whose output is
// fixed by the standard), so a seed names the same instance on every standard library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::testing {

// Portable draws: std::uniform_*_distribution differ between standard libraries.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // Uniform integer in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) {
    const auto span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(engine_() % span);
  }
  // Uniform real in [0, 1).
  double unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
  // Log-uniform real in [lo, hi), lo > 0.
  double log_uniform(double lo, double hi) { return std::exp(uniform(std::log(lo), std::log(hi))); }
  bool chance(double p) { return unit() < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(range(0, static_cast<int64_t>(v.size()) - 1))];
  }

 private:
  std::mt19937_64 engine_;
};

struct RandomInstanceOptions {
  int64_t min_layers = 1;
  int64_t max_layers = 10;
  int64_t max_sizes = 3;           // profiled microbatch sizes, drawn from {1, 2, 4, 8}
  int64_t max_per_node = 4;        // devices per node when the cluster has two levels
  int64_t max_nodes = 2;
  int64_t max_devices_flat = 8;    // devices when the cluster has one level
  double pin_schedule_p = 0.2;
  double pin_microbatch_p = 0.2;
  double max_depth_p = 0.2;        // chance of a max_depth limit
  double split_backward_p = 0.5;   // chance that the profile times the backward in halves (zb-h1 searched)
};

// Medium instances: 11-40 layers on up to 32 devices (8 per node, 4 nodes, or 16 on one level), past what
// composition enumeration can afford and big enough for whole-layer effects, the partitioner's windows
// and the search's pruning.
inline RandomInstanceOptions medium_instance_options() {
  RandomInstanceOptions opt;
  opt.min_layers = 11;
  opt.max_layers = 40;
  opt.max_per_node = 8;
  opt.max_nodes = 4;
  opt.max_devices_flat = 16;
  return opt;
}

struct RandomInstance {
  uint64_t seed = 0;
  schemas::Profile profile;
  schemas::Cluster cluster;
  planner::Constraints constraints;

  // Everything needed to rebuild the instance by hand, one fact per line.
  std::string describe() const;
};

inline const char* schedule_name(schemas::Schedule s) {
  switch (s) {
    case schemas::Schedule::two_bw: return "2bw";
    case schemas::Schedule::flush: return "flush";
    case schemas::Schedule::gpipe: return "gpipe";
    case schemas::Schedule::zb_h1: return "zb-h1";
    case schemas::Schedule::interleaved: return "interleaved";
    case schemas::Schedule::zb_h2: return "zb-h2";
    case schemas::Schedule::zb_v: return "zb-v";
  }
  return "?";
}

inline const char* recompute_name(planner::RecomputePolicy p) {
  switch (p) {
    case planner::RecomputePolicy::auto_: return "auto";
    case planner::RecomputePolicy::never: return "never";
    case planner::RecomputePolicy::always: return "always";
  }
  return "?";
}

// Sets every device memory of the instance (the profile's and the cluster's agree).
inline void set_device_memory(RandomInstance& inst, int64_t bytes) {
  inst.profile.device.memory_bytes = bytes;
  inst.cluster.device.memory_bytes = bytes;
}

// Multiplies every link bandwidth (p2p and allreduce, every level) by `factor`; latencies stay.
inline void scale_bandwidths(RandomInstance& inst, double factor) {
  for (auto& level : inst.cluster.levels) {
    level.p2p_gbps *= factor;
    level.allreduce_busbw_gbps *= factor;
  }
}

// Gives every level of the instance measured-looking link curves, drawn from `seed`: time flat at a
// launch floor for small messages, then bandwidth-bound at the level's scalar bandwidth, with +-15%
// noise that may dip (the cost model smooths dips away); points every 4x to 16x from a few KiB to 16 GiB,
// the allreduce measured over 2 to 8 ranks. The floor makes the cost of many small allreduces exceed
// the cost of one big one, which no affine model does.
inline void add_random_curves(RandomInstance& inst, uint64_t seed) {
  Rng rng(seed * 0xD1B54A32D192ED03ULL + 0xC0FFEE);
  auto curve = [&rng](double gbps) {
    std::vector<schemas::LinkPoint> points;
    const double floor_ms = rng.log_uniform(1e-3, 0.5);
    for (int64_t bytes = int64_t{1} << rng.range(10, 14); bytes <= (int64_t{1} << 34); bytes <<= rng.range(2, 4)) {
      const double ms = std::max(floor_ms, static_cast<double>(bytes) / (gbps * 1e6)) * rng.uniform(0.85, 1.15);
      points.push_back({bytes, ms});
    }
    return points;
  };
  for (auto& level : inst.cluster.levels) {
    level.p2p_curve = curve(level.p2p_gbps);
    level.allreduce_curve = curve(level.allreduce_busbw_gbps);
    level.allreduce_ranks = rng.range(2, 8);
  }
}

namespace detail {

inline schemas::Profile random_profile(Rng& rng, const RandomInstanceOptions& opt) {
  schemas::Profile p;
  p.provenance.tool = "tests/unit/random_instances.hpp";
  p.provenance.version = "1";
  p.provenance.git_sha = "unknown";
  p.model.kind = "gpt";
  p.model.name = "random";
  p.model.dtype = rng.chance(0.8) ? schemas::DType::bf16 : schemas::DType::fp32;
  p.model.d_model = 64;
  p.model.heads = 4;
  p.model.seq_len = 128;
  p.model.vocab = 1000;

  std::vector<int64_t> pool = {1, 2, 4, 8};
  const int64_t nsizes = rng.range(1, opt.max_sizes);
  while (static_cast<int64_t>(pool.size()) > nsizes) {
    pool.erase(pool.begin() + rng.range(0, static_cast<int64_t>(pool.size()) - 1));
  }
  p.microbatch_sizes = pool;  // stays ascending

  const int64_t layers = rng.range(opt.min_layers, opt.max_layers);
  p.model.blocks = layers;
  const double base_ms = rng.log_uniform(0.1, 5.0);
  // Wide ranges, so that some instances are bound by activations (transfers, stash) and others by
  // parameters (allreduce, weights).
  const auto base_act = static_cast<int64_t>(rng.log_uniform(64.0 * 1024, 64.0 * 1024 * 1024));  // per sample
  const auto base_param = static_cast<int64_t>(rng.log_uniform(64.0 * 1024, 512.0 * 1024 * 1024));
  for (int64_t l = 0; l < layers; ++l) {
    schemas::LayerProfile layer;
    layer.name = "layer." + std::to_string(l);
    layer.kind = l == 0 ? "embedding" : (l == layers - 1 ? "head" : "block");
    // Occasionally a parameter-free layer, to exercise zero allreduce and zero static memory.
    layer.param_bytes = rng.chance(0.1) ? 0
                                        : static_cast<int64_t>(static_cast<double>(base_param) * rng.log_uniform(0.2, 5.0)) / 4 * 4;
    const double fwd_unit = base_ms * rng.log_uniform(0.3, 3.0);
    const double bwd_ratio = rng.uniform(1.0, 3.0);
    const int64_t act = static_cast<int64_t>(static_cast<double>(base_act) * rng.log_uniform(0.25, 4.0));
    const int64_t stash = static_cast<int64_t>(static_cast<double>(act) * rng.log_uniform(1.0, 30.0));
    for (int64_t b : p.microbatch_sizes) {
      schemas::LayerTiming t;
      t.microbatch = b;
      // Sublinear in b (small microbatches are launch-bound), with noise per size.
      const double scale = std::pow(static_cast<double>(b), rng.uniform(0.5, 1.0));
      t.fwd_ms = fwd_unit * scale * rng.uniform(0.9, 1.1);
      t.bwd_ms = t.fwd_ms * bwd_ratio * rng.uniform(0.9, 1.1);
      t.input_bytes = act / 2 * b;  // the first layer's input; later layers are chained below
      t.output_bytes = act * b * (rng.chance(0.2) ? 2 : 1);
      t.stash_bytes = stash * b;
      layer.per_microbatch.push_back(t);
    }
    if (l > 0) {  // a layer's input is what its predecessor outputs
      for (size_t k = 0; k < layer.per_microbatch.size(); ++k) {
        layer.per_microbatch[k].input_bytes = p.layers.back().per_microbatch[k].output_bytes;
      }
    }
    p.layers.push_back(std::move(layer));
  }
  return p;
}

inline schemas::Cluster random_cluster(Rng& rng, const RandomInstanceOptions& opt) {
  schemas::Cluster c;
  c.device.name = "random-device";
  auto level = [&](const std::string& name, int64_t size, double lo_gbps, double hi_gbps) {
    schemas::ClusterLevel lv;
    lv.name = name;
    lv.size = size;
    lv.p2p_gbps = rng.log_uniform(lo_gbps, hi_gbps);
    lv.p2p_latency_ms = rng.chance(0.2) ? 0.0 : rng.log_uniform(1e-4, 0.1);
    lv.allreduce_busbw_gbps = rng.log_uniform(lo_gbps, hi_gbps);
    return lv;
  };
  if (rng.chance(0.4)) {
    c.levels.push_back(level("node", rng.range(1, opt.max_devices_flat), 1.0, 500.0));
  } else {
    c.levels.push_back(level("node", rng.range(1, opt.max_per_node), 20.0, 500.0));
    c.levels.push_back(level("cluster", rng.range(1, opt.max_nodes), 0.5, 50.0));
  }
  return c;
}

}  // namespace detail

// Builds instance `seed`. Device memory is drawn around what the whole model needs spread over the
// devices, from far too little (infeasible) through tight (recompute needed) to ample.
inline RandomInstance make_random_instance(uint64_t seed, const RandomInstanceOptions& opt = {}) {
  Rng rng(seed * 0x9E3779B97F4A7C15ULL + 0x5EED);
  RandomInstance inst;
  inst.seed = seed;
  inst.profile = detail::random_profile(rng, opt);
  inst.cluster = detail::random_cluster(rng, opt);

  int64_t devices = 1;
  for (const auto& lv : inst.cluster.levels) devices *= lv.size;
  int64_t params = 0, stash = 0;
  for (const auto& layer : inst.profile.layers) {
    params += layer.param_bytes;
    stash += layer.per_microbatch.back().stash_bytes;
  }
  const double dtype = inst.profile.model.dtype == schemas::DType::fp32 ? 4.0 : 2.0;
  // ~2 weight versions + fp32 master, grads and two Adam moments, plus a few microbatches' stash.
  const double need = static_cast<double>(params) / dtype * (4.0 * dtype + 16.0) + 4.0 * static_cast<double>(stash);
  const double share = need / static_cast<double>(devices) * rng.log_uniform(0.3, 6.0);

  planner::Constraints& k = inst.constraints;
  k.reserve_bytes = rng.chance(0.3) ? 0 : rng.range(1, 64) * (int64_t{1} << 20);
  set_device_memory(inst, k.reserve_bytes + static_cast<int64_t>(share) + (int64_t{1} << 20));

  const std::vector<int64_t> batches = {4, 6, 8, 12, 16};
  k.global_batch = rng.pick(batches);
  if (rng.chance(opt.pin_schedule_p)) {
    const std::vector<schemas::Schedule> all = {schemas::Schedule::two_bw, schemas::Schedule::flush,
                                                schemas::Schedule::gpipe};
    k.schedule = rng.pick(all);
  }
  if (rng.chance(opt.pin_microbatch_p)) k.microbatch = rng.pick(inst.profile.microbatch_sizes);
  const double r = rng.unit();
  k.recompute = r < 0.6 ? planner::RecomputePolicy::auto_
                        : (r < 0.8 ? planner::RecomputePolicy::never : planner::RecomputePolicy::always);
  k.max_depth = rng.chance(opt.max_depth_p) ? rng.range(1, 4) : 0;
  k.optimizer = rng.chance(0.8) ? schemas::Optimizer::adamw : schemas::Optimizer::sgd;
  // Drawn last so that the instances above keep their numbers: some profiles time the optimizer step.
  if (rng.chance(0.3))
    for (auto& layer : inst.profile.layers) layer.update_ms = rng.log_uniform(0.01, 2.0);
  // And some time the backward in halves (then zb-h1 is searched): measured halves that need not add up
  // to the fused backward, a W stash below the layer's stash, and now and then a layer without an input
  // gradient (B = 0, an embedding) or without weights (W = 0).
  if (rng.chance(opt.split_backward_p))
    for (auto& layer : inst.profile.layers) {
      const double share = rng.chance(0.1) ? (layer.param_bytes == 0 ? 0.0 : 1.0) : rng.uniform(0.2, 0.8);
      const double kept = rng.uniform(0.05, 1.0);
      for (auto& t : layer.per_microbatch) {
        t.split = true;
        t.bwd_input_ms = t.bwd_ms * (1.0 - share) * rng.uniform(0.95, 1.1);
        t.bwd_weight_ms = t.bwd_ms * share * rng.uniform(0.95, 1.1);
        t.bwd_weight_stash_bytes = static_cast<int64_t>(static_cast<double>(t.stash_bytes) * kept);
      }
    }
  return inst;
}

inline std::string RandomInstance::describe() const {
  std::ostringstream o;
  o.precision(17);
  const auto& k = constraints;
  o << "seed " << seed << "\n";
  o << "constraints: global_batch " << k.global_batch << ", schedule "
    << (k.schedule ? schedule_name(*k.schedule) : "any") << ", microbatch "
    << (k.microbatch ? std::to_string(*k.microbatch) : std::string("any")) << ", recompute "
    << recompute_name(k.recompute) << ", max_depth " << k.max_depth << ", optimizer "
    << (k.optimizer == schemas::Optimizer::adamw ? "adamw" : "sgd") << ", reserve_bytes "
    << k.reserve_bytes << "\n";
  o << "device memory_bytes " << cluster.device.memory_bytes << ", dtype "
    << (profile.model.dtype == schemas::DType::fp32 ? "fp32" : "bf16") << "\n";
  for (const auto& lv : cluster.levels) {
    o << "level " << lv.name << ": size " << lv.size << ", p2p_gbps " << lv.p2p_gbps << ", p2p_latency_ms "
      << lv.p2p_latency_ms << ", allreduce_busbw_gbps " << lv.allreduce_busbw_gbps << "\n";
    if (!lv.p2p_curve.empty()) {
      o << "  p2p_curve (bytes ms):";
      for (const auto& pt : lv.p2p_curve) o << " " << pt.bytes << " " << pt.ms;
      o << "\n";
    }
    if (!lv.allreduce_curve.empty()) {
      o << "  allreduce_curve over " << lv.allreduce_ranks << " ranks (bytes ms):";
      for (const auto& pt : lv.allreduce_curve) o << " " << pt.bytes << " " << pt.ms;
      o << "\n";
    }
  }
  o << "microbatch_sizes";
  for (int64_t b : profile.microbatch_sizes) o << " " << b;
  o << "\n";
  for (const auto& layer : profile.layers) {
    o << layer.name << " param_bytes " << layer.param_bytes << " update_ms " << layer.update_ms << ":";
    for (const auto& t : layer.per_microbatch) {
      o << " [b " << t.microbatch << " fwd " << t.fwd_ms << " bwd " << t.bwd_ms << " in " << t.input_bytes
        << " out " << t.output_bytes << " stash " << t.stash_bytes;
      if (t.split)
        o << " bwd_input " << t.bwd_input_ms << " bwd_weight " << t.bwd_weight_ms << " weight_stash "
          << t.bwd_weight_stash_bytes;
      o << "]";
    }
    o << "\n";
  }
  return o.str();
}

}  // namespace pd2bw::testing
