// Options of `pd2bw plan` and how they turn into a profile, a cluster and planner constraints.
#pragma once

#include <optional>
#include <string>

#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::cli {

struct PlanOptions {
  std::string profile_path;  // empty: the built-in example
  std::string cluster_path;  // empty: from the flags below and the profile
  std::optional<int64_t> nodes, gpus_per_node;
  std::string device_memory;  // size text, e.g. "16GiB"
  std::optional<double> intra_gbps, inter_gbps, intra_latency_us, inter_latency_us;
  int64_t global_batch = 512;
  std::string schedule = "auto", microbatch = "auto", recompute = "auto", optimizer = "adamw";
  int64_t max_depth = 0, depth = 0, width = 0, chunks = 0;
  std::string reserve = "1GiB";
  int64_t top = 5;
  int64_t threads = 0;
  std::string output = "plan.json";
  bool quiet = false;
  bool explain = false;
};

struct PlanInputs {
  schemas::Profile profile;
  std::string profile_sha256;
  std::string profile_label;  // file path or "built-in example ..."
  schemas::Cluster cluster;
  std::string cluster_label;  // where the cluster came from
  planner::Constraints constraints;
};

// Reads the files and applies the flags. Throws UsageError / SchemaError on bad input.
PlanInputs resolve_plan_inputs(const PlanOptions& o);

}  // namespace pd2bw::cli
