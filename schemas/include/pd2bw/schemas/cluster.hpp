// The cluster format ("pd2bw.cluster"): a hierarchy of topology levels and the memory of one device.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::schemas {

// One topology level, innermost first. Level 0 groups `size` devices into a node; level 1 groups
// `size` nodes into the cluster, and so on. Two devices talk over the innermost level that contains both.
struct ClusterLevel {
  std::string name;                 // e.g. "node", "cluster"
  int64_t size = 0;                 // children per group at this level, > 0
  double p2p_gbps = 0;              // point-to-point bandwidth between children, GB/s (1e9 bytes/s), > 0
  double p2p_latency_ms = 0;        // point-to-point latency, >= 0
  double allreduce_busbw_gbps = 0;  // allreduce bus bandwidth across children, GB/s, > 0
  // Optional measured curves (see LinkLevel); when present the cost model reads time at the message
  // size it needs from them instead of the scalars above.
  std::vector<LinkPoint> p2p_curve;
  std::vector<LinkPoint> allreduce_curve;
  int64_t allreduce_ranks = 0;
};

struct Cluster {
  DeviceDesc device;                // every device is the same
  std::vector<ClusterLevel> levels; // innermost first, at least one

  // Product of the level sizes.
  int64_t total_devices() const;
};

// Parses and checks a cluster file. Throws SchemaError with the JSON pointer of the first problem
// (including a cluster with zero devices or a level of size 0).
Cluster parse_cluster(std::string_view json_text);
std::string dump_cluster(const Cluster& cluster);

}  // namespace pd2bw::schemas
