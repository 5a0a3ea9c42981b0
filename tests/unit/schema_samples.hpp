// A small sample of each file format (profile, cluster, plan), consistent with itself, shared by the
// tests of the formats (test_schemas*.cpp).
#pragma once

#include <cstdint>

#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::testing {

inline schemas::Provenance sample_provenance() {
  return {"pd2bw", "0.1.0", "abc123", "pd2bw test --flag \"quoted\"", "made in a unit test"};
}

inline schemas::ModelDesc sample_model() {
  return {"gpt", "gpt-tiny", 2, 64, 4, 32, 100, schemas::DType::bf16};
}

inline schemas::Profile sample_profile() {
  schemas::Profile p;
  p.provenance = sample_provenance();
  p.model = sample_model();
  p.device = {"cpu", int64_t{1} << 31};
  p.microbatch_sizes = {1, 2};
  const char* names[] = {"embedding", "block.0", "block.1", "head"};
  for (int i = 0; i < 4; ++i) {
    schemas::LayerProfile layer{names[i], i == 0 ? "embedding" : (i == 3 ? "head" : "block"), 1000 * (i + 1), {}};
    for (int64_t b : p.microbatch_sizes) {
      const double scale = static_cast<double>(b);
      layer.per_microbatch.push_back({b, 0.1 * scale, 0.30000000000000004 * scale, 4096 * b, 4096 * b, 16384 * b});
    }
    p.layers.push_back(layer);
  }
  p.links = {{"node", 12.5, 0.002, 10.0}};
  return p;
}

inline schemas::Cluster sample_cluster() {
  schemas::Cluster c;
  c.device = {"NVIDIA H200", int64_t{16} << 30};
  c.levels = {{"node", 2, 450.0, 0.005, 360.0}, {"cluster", 2, 50.0, 0.01, 45.0}};
  return c;
}

// d = 2 stages of 2 layers, w = 2 replicas, replicas-inner: stage s replica r is rank 2s + r.
inline schemas::Plan sample_plan() {
  schemas::Plan p;
  p.provenance = sample_provenance();
  p.profile_sha256 = schemas::sha256_hex("profile");
  p.model = sample_model();
  p.num_layers = 4;
  p.cluster = sample_cluster();
  p.microbatch_size = 2;
  p.microbatches_per_step = 4;
  p.depth = 2;
  p.width = 2;
  p.global_batch = 16;
  p.reserve_bytes = 1 << 20;
  for (int64_t st = 0; st < 2; ++st) {
    schemas::StagePlan stage;
    stage.index = st;
    stage.layer_begin = 2 * st;
    stage.layer_end = 2 * st + 2;
    stage.recompute = st == 0;
    stage.ranks = {2 * st, 2 * st + 1};
    stage.in_flight = 2 - st;
    stage.compute_ms = 1.25;
    stage.p2p_ms = 0.0625;
    stage.allreduce_ms = 0.5;
    stage.step_ms = 4 * (1.25 + 0.0625) + 0.5;
    stage.memory = {200, 400, 400, 800, 1000, 64, 1 << 20, 1051440, int64_t{16} << 30, "reserve"};
    p.stages.push_back(stage);
  }
  for (int64_t k = 0; k < 4; ++k) p.ranks.push_back({k, k / 2, k % 2, k / 2, k % 2});
  p.predictions = {5.75, 2782.608695652174, 89043.47826086957, 0, 0.0, 0.0, "reserve"};
  p.alternatives = {{schemas::Schedule::flush, 2, 4, 2, 2, schemas::Placement::stages_inner, 7.0, 2285.714285714286,
                     "flush drains the pipeline every step"}};
  return p;
}

}  // namespace pd2bw::testing
