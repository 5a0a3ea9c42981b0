// Resolves `pd2bw plan` flags: the profile (file or built-in), the cluster (file, or flags with
// defaults taken from the profile's device and measured links) and the planner constraints.
#include "plan_options.hpp"

#include "inputs.hpp"

#include <fmt/format.h>

#include "cli.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::cli {

namespace {

constexpr int64_t kMaxDevices = int64_t{1} << 20;
constexpr double kDefaultIntraGbps = 150.0;  // NVLink-class
constexpr double kDefaultInterGbps = 25.0;   // 200 Gb/s network

const schemas::LinkLevel* find_link(const schemas::Profile& p, const std::string& level) {
  for (const auto& l : p.links)
    if (l.level == level) return &l;
  return nullptr;
}

schemas::ClusterLevel level_from(const std::string& name, int64_t size, std::optional<double> gbps,
                                 std::optional<double> latency_us, const schemas::LinkLevel* measured,
                                 double fallback_gbps, double fallback_latency_ms) {
  schemas::ClusterLevel l;
  l.name = name;
  l.size = size;
  l.p2p_gbps = gbps ? *gbps : measured ? measured->p2p_gbps : fallback_gbps;
  l.p2p_latency_ms = latency_us ? *latency_us / 1e3 : measured ? measured->p2p_latency_ms
                                                               : fallback_latency_ms;
  l.allreduce_busbw_gbps = gbps ? *gbps : measured ? measured->allreduce_busbw_gbps : l.p2p_gbps;
  // The measured curves describe the measured link, latency included; a flag that overrides this
  // level's bandwidth or latency describes another link, so the curves stay behind then.
  if (measured && !gbps && !latency_us) {
    l.p2p_curve = measured->p2p_curve;
    l.allreduce_curve = measured->allreduce_curve;
    l.allreduce_ranks = measured->allreduce_ranks;
  }
  return l;
}

schemas::Cluster cluster_from_flags(const PlanOptions& o, const schemas::Profile& p, std::string& label) {
  const int64_t nodes = o.nodes.value_or(1), per_node = o.gpus_per_node.value_or(8);
  if (nodes < 1 || per_node < 1)
    throw UsageError(fmt::format("the cluster needs at least one device (--nodes {} --gpus-per-node {})",
                                 nodes, per_node));
  if (nodes > kMaxDevices / per_node)
    throw UsageError(fmt::format("--nodes {} x --gpus-per-node {} is more than {} devices", nodes,
                                 per_node, kMaxDevices), "check the flags; sizes are device counts");
  schemas::Cluster c;
  c.device = p.device;
  if (!o.device_memory.empty()) {
    c.device.memory_bytes = schemas::parse_bytes(o.device_memory, "--device-memory");
    if (c.device.memory_bytes <= 0) throw UsageError("--device-memory must be > 0");
  }
  const auto* node_link = find_link(p, "node");
  const auto* net_link = find_link(p, "cluster");
  c.levels.push_back(level_from("node", per_node, o.intra_gbps, o.intra_latency_us, node_link,
                                kDefaultIntraGbps, 0.005));
  c.levels.push_back(level_from("cluster", nodes, o.inter_gbps, o.inter_latency_us, net_link,
                                kDefaultInterGbps, 0.010));
  const bool assumed = (!o.intra_gbps && !node_link) || (!o.inter_gbps && !net_link);
  label = fmt::format("{} node(s) x {} device(s) from flags{}", nodes, per_node,
                      assumed ? " (link speeds not given or measured: assumed defaults "
                                "150 GB/s in a node, 25 GB/s across nodes)"
                              : "");
  return c;
}

template <class T>
T pick(const std::string& text, const char* flag, std::initializer_list<std::pair<const char*, T>> map) {
  std::string names;
  for (const auto& [name, value] : map) {
    if (text == name) return value;
    if (!names.empty()) names += ", ";
    names += name;
  }
  throw UsageError(fmt::format("{} {}: unknown value", flag, text), fmt::format("use one of: {}", names));
}

planner::Constraints constraints_from(const PlanOptions& o) {
  using schemas::Schedule;
  planner::Constraints k;
  k.global_batch = o.global_batch;
  if (o.schedule != "auto")
    k.schedule = pick<Schedule>(o.schedule, "--schedule",
                                {{"2bw", Schedule::two_bw},
                                 {"flush", Schedule::flush},
                                 {"gpipe", Schedule::gpipe},
                                 {"zb-h1", Schedule::zb_h1},
                                 {"interleaved", Schedule::interleaved},
                                 {"zb-h2", Schedule::zb_h2},
                                 {"zb-v", Schedule::zb_v}});
  if (o.microbatch != "auto") {
    try {
      size_t used = 0;
      const long long b = std::stoll(o.microbatch, &used);
      if (used != o.microbatch.size() || b <= 0) throw std::invalid_argument("bad");
      k.microbatch = b;
    } catch (const std::exception&) {
      throw UsageError(fmt::format("--microbatch {}: expected 'auto' or a positive integer", o.microbatch));
    }
  }
  k.recompute = pick<planner::RecomputePolicy>(o.recompute, "--recompute",
                                               {{"auto", planner::RecomputePolicy::auto_},
                                                {"never", planner::RecomputePolicy::never},
                                                {"always", planner::RecomputePolicy::always}});
  k.optimizer = pick<schemas::Optimizer>(o.optimizer, "--optimizer",
                                         {{"adamw", schemas::Optimizer::adamw},
                                          {"sgd", schemas::Optimizer::sgd}});
  k.max_depth = o.max_depth;
  k.depth = o.depth;
  k.width = o.width;
  k.chunks = o.chunks;
  if (k.chunks > 0 && k.schedule && !schemas::chunks_allowed(*k.schedule, k.chunks))
    throw UsageError(fmt::format("--chunks {}: {} cannot hold {} chunks per rank", k.chunks,
                                 schemas::to_string(*k.schedule), k.chunks),
                     "interleaved takes 2 or more, zb-v exactly 2, the other schedules 1");
  k.reserve_bytes = schemas::parse_bytes(o.reserve, "--reserve");
  return k;
}

}  // namespace

PlanInputs resolve_plan_inputs(const PlanOptions& o) {
  PlanInputs in;
  LoadedProfile loaded = load_profile(o.profile_path);
  in.profile = std::move(loaded.profile);
  in.profile_sha256 = loaded.sha256;
  in.profile_label = loaded.label;
  if (!o.cluster_path.empty()) {
    try {
      const std::string text = schemas::read_input_file(o.cluster_path, "cluster", schemas::kMaxDocumentBytes);
      in.cluster = schemas::parse_cluster(text);
    } catch (const SchemaError& e) {
      throw SchemaError(fmt::format("{}: {}", o.cluster_path, e.what()), e.hint());
    }
    in.cluster_label = o.cluster_path;
  } else {
    in.cluster = cluster_from_flags(o, in.profile, in.cluster_label);
  }
  in.constraints = constraints_from(o);
  return in;
}

}  // namespace pd2bw::cli
