// The plan format ("pd2bw.plan"): typed reading of every field (the cross-field rules live in
// plan_check.cpp) and the deterministic writer.
#include <algorithm>

#include <fmt/format.h>

#include "doc_io.hpp"
#include "pd2bw/schemas/plan.hpp"

namespace pd2bw::schemas {
namespace detail {
namespace {

MemoryBreakdown read_memory(const ObjectReader& parent) {
  const ObjectReader r = parent.object(
      "memory", {"weights_bytes", "master_bytes", "grads_bytes", "optimizer_bytes", "stash_bytes", "comm_bytes",
                 "reserve_bytes", "total_bytes", "limit_bytes", "dominant"});
  MemoryBreakdown m;
  m.weights_bytes = r.integer("weights_bytes", Min::non_negative);
  m.master_bytes = r.integer("master_bytes", Min::non_negative);
  m.grads_bytes = r.integer("grads_bytes", Min::non_negative);
  m.optimizer_bytes = r.integer("optimizer_bytes", Min::non_negative);
  m.stash_bytes = r.integer("stash_bytes", Min::non_negative);
  m.comm_bytes = r.integer("comm_bytes", Min::non_negative);
  m.reserve_bytes = r.integer("reserve_bytes", Min::non_negative);
  m.total_bytes = r.integer("total_bytes", Min::non_negative);
  m.limit_bytes = r.integer("limit_bytes", Min::positive);
  m.dominant = r.string("dominant");
  return m;
}

StagePlan read_stage(const Json& value, const std::string& pointer) {
  const ObjectReader r(value, pointer,
                       {"index", "layer_begin", "layer_end", "recompute", "ranks", "in_flight", "compute_ms", "p2p_ms",
                        "allreduce_ms", "step_ms", "memory"});
  StagePlan s;
  s.index = r.integer("index", Min::non_negative);
  s.layer_begin = r.integer("layer_begin", Min::non_negative);
  s.layer_end = r.integer("layer_end", Min::positive);
  s.recompute = r.boolean("recompute");
  s.ranks = r.list("ranks", [](const Json& v, const std::string& p) { return as_integer(v, p, Min::non_negative); });
  s.in_flight = r.integer("in_flight", Min::positive);
  s.compute_ms = r.number("compute_ms", Min::positive);
  s.p2p_ms = r.number("p2p_ms", Min::non_negative);
  s.allreduce_ms = r.number("allreduce_ms", Min::non_negative);
  s.step_ms = r.number("step_ms", Min::positive);
  s.memory = read_memory(r);
  return s;
}

RankEntry read_rank(const Json& value, const std::string& pointer) {
  const ObjectReader r(value, pointer, {"rank", "stage", "replica", "node", "local_device"});
  RankEntry e;
  e.rank = r.integer("rank", Min::non_negative);
  e.stage = r.integer("stage", Min::non_negative);
  e.replica = r.integer("replica", Min::non_negative);
  e.node = r.integer("node", Min::non_negative);
  e.local_device = r.integer("local_device", Min::non_negative);
  return e;
}

Predictions read_predictions(const ObjectReader& parent) {
  const ObjectReader r = parent.object("predictions", {"step_ms", "samples_per_s", "tokens_per_s", "bottleneck_stage",
                                                       "bubble_fraction", "imbalance_fraction", "binding_memory"});
  Predictions p;
  p.step_ms = r.number("step_ms", Min::positive);
  p.samples_per_s = r.number("samples_per_s", Min::positive);
  p.tokens_per_s = r.number("tokens_per_s", Min::positive);
  p.bottleneck_stage = r.integer("bottleneck_stage", Min::non_negative);
  p.bubble_fraction = r.number("bubble_fraction", Min::non_negative);
  if (p.bubble_fraction > 1) fail(r.at("bubble_fraction"), "must be <= 1", "a fraction lies in [0, 1]");
  if (r.has("imbalance_fraction")) {  // optional: plans written before it was split from the bubble lack it
    p.imbalance_fraction = r.number("imbalance_fraction", Min::non_negative);
    if (p.bubble_fraction + p.imbalance_fraction > 1 + 1e-9)
      fail(r.at("imbalance_fraction"), fmt::format("bubble_fraction + imbalance_fraction must be <= 1, got {} + {}",
                                                   p.bubble_fraction, p.imbalance_fraction),
           "both are shares of the same ranks' time");
  }
  p.binding_memory = r.string("binding_memory");
  return p;
}

Alternative read_alternative(const Json& value, const std::string& pointer) {
  const ObjectReader r(value, pointer,
                       {"schedule", "microbatch_size", "microbatches_per_step", "depth", "width", "chunks_per_rank",
                        "placement", "step_ms", "samples_per_s", "why", "step_bound"});
  Alternative a;
  a.schedule = parse_schedule(r.string("schedule"), r.at("schedule"));
  a.microbatch_size = r.integer("microbatch_size", Min::positive);
  a.microbatches_per_step = r.integer("microbatches_per_step", Min::positive);
  a.depth = r.integer("depth", Min::positive);
  a.width = r.integer("width", Min::positive);
  if (r.has("chunks_per_rank")) a.chunks_per_rank = r.integer("chunks_per_rank", Min::positive);  // 1.3; else 1
  a.placement = parse_placement(r.string("placement"), r.at("placement"));
  a.step_ms = r.number("step_ms", Min::positive);
  a.samples_per_s = r.number("samples_per_s", Min::non_negative);
  a.why = r.string("why");
  if (r.has("step_bound")) a.step_bound = parse_step_bound(r.string("step_bound"), r.at("step_bound"));  // 1.6
  return a;
}

OrderedJson memory_json(const MemoryBreakdown& m) {
  OrderedJson o = OrderedJson::object();
  o["weights_bytes"] = m.weights_bytes;
  o["master_bytes"] = m.master_bytes;
  o["grads_bytes"] = m.grads_bytes;
  o["optimizer_bytes"] = m.optimizer_bytes;
  o["stash_bytes"] = m.stash_bytes;
  o["comm_bytes"] = m.comm_bytes;
  o["reserve_bytes"] = m.reserve_bytes;
  o["total_bytes"] = m.total_bytes;
  o["limit_bytes"] = m.limit_bytes;
  o["dominant"] = m.dominant;
  return o;
}

OrderedJson stage_json(const StagePlan& s) {
  OrderedJson o = OrderedJson::object();
  o["index"] = s.index;
  o["layer_begin"] = s.layer_begin;
  o["layer_end"] = s.layer_end;
  o["recompute"] = s.recompute;
  o["ranks"] = s.ranks;
  o["in_flight"] = s.in_flight;
  o["compute_ms"] = s.compute_ms;
  o["p2p_ms"] = s.p2p_ms;
  o["allreduce_ms"] = s.allreduce_ms;
  o["step_ms"] = s.step_ms;
  o["memory"] = memory_json(s.memory);
  return o;
}

OrderedJson rank_json(const RankEntry& e) {
  OrderedJson o = OrderedJson::object();
  o["rank"] = e.rank;
  o["stage"] = e.stage;
  o["replica"] = e.replica;
  o["node"] = e.node;
  o["local_device"] = e.local_device;
  return o;
}

OrderedJson predictions_json(const Predictions& p) {
  OrderedJson o = OrderedJson::object();
  o["step_ms"] = p.step_ms;
  o["samples_per_s"] = p.samples_per_s;
  o["tokens_per_s"] = p.tokens_per_s;
  o["bottleneck_stage"] = p.bottleneck_stage;
  o["bubble_fraction"] = p.bubble_fraction;
  o["imbalance_fraction"] = p.imbalance_fraction;
  o["binding_memory"] = p.binding_memory;
  return o;
}

OrderedJson alternative_json(const Alternative& a) {
  OrderedJson o = OrderedJson::object();
  o["schedule"] = to_string(a.schedule);
  o["microbatch_size"] = a.microbatch_size;
  o["microbatches_per_step"] = a.microbatches_per_step;
  o["depth"] = a.depth;
  o["width"] = a.width;
  if (a.chunks_per_rank != 1) o["chunks_per_rank"] = a.chunks_per_rank;
  o["placement"] = to_string(a.placement);
  o["step_ms"] = a.step_ms;
  o["samples_per_s"] = a.samples_per_s;
  o["why"] = a.why;
  if (a.step_bound != StepBound::none) o["step_bound"] = to_string(a.step_bound);
  return o;
}

// The lowest schema version with every key and value of the plan: 1.6 for an alternative's step_bound, 1.3
// for chunks_per_rank and the schedules interleaved, zb-h2 and zb-v, 1.2 for zb-h1, 1.0 otherwise (the
// plan's and its alternatives').
const char* plan_version(const Plan& plan) {
  const auto minor = [](Schedule s, int64_t chunks) {
    if (chunks != 1 || s == Schedule::interleaved || s == Schedule::zb_h2 || s == Schedule::zb_v) return 3;
    return s == Schedule::zb_h1 ? 2 : 0;
  };
  int most = minor(plan.schedule, plan.chunks_per_rank);
  for (const Alternative& a : plan.alternatives) {
    most = std::max(most, minor(a.schedule, a.chunks_per_rank));
    if (a.step_bound != StepBound::none) most = 6;
  }
  if (most == 6) return kSchemaVersionStepBound;
  if (most == 3) return kSchemaVersionChunks;
  return most == 2 ? kSchemaVersionSplitBackward : kSchemaVersion;
}

template <class T, class F>
OrderedJson array_json(const std::vector<T>& items, F one) {
  OrderedJson arr = OrderedJson::array();
  for (const T& item : items) arr.push_back(one(item));
  return arr;
}

}  // namespace

Plan plan_from_json(const Json& root) {
  check_kind(root, kPlanKind);
  const ObjectReader r(root, "",
                       {"schema", "schema_version", "provenance", "profile_sha256", "model", "num_layers", "cluster",
                        "schedule", "optimizer", "placement", "microbatch_size", "microbatches_per_step", "depth",
                        "width", "chunks_per_rank", "global_batch", "reserve_bytes", "stages", "ranks", "predictions",
                        "alternatives"});
  check_header(r, kPlanKind);
  Plan p;
  p.provenance = read_provenance(r, "provenance");
  p.profile_sha256 = r.string("profile_sha256");
  p.model = read_model(r, "model");
  p.num_layers = r.integer("num_layers", Min::positive);
  p.cluster = read_cluster_body(r.object("cluster", {"device", "levels"}));
  p.schedule = parse_schedule(r.string("schedule"), r.at("schedule"));
  p.optimizer = parse_optimizer(r.string("optimizer"), r.at("optimizer"));
  p.placement = parse_placement(r.string("placement"), r.at("placement"));
  p.microbatch_size = r.integer("microbatch_size", Min::positive);
  p.microbatches_per_step = r.integer("microbatches_per_step", Min::positive);
  p.depth = r.integer("depth", Min::positive);
  p.width = r.integer("width", Min::positive);
  if (r.has("chunks_per_rank")) p.chunks_per_rank = r.integer("chunks_per_rank", Min::positive);  // 1.3; else 1
  p.global_batch = r.integer("global_batch", Min::positive);
  p.reserve_bytes = r.integer("reserve_bytes", Min::non_negative);
  p.stages = r.list("stages", read_stage);
  p.ranks = r.list("ranks", read_rank);
  p.predictions = read_predictions(r);
  p.alternatives = r.list("alternatives", read_alternative);
  check_plan_consistency(p);
  return p;
}

}  // namespace detail

Plan parse_plan(std::string_view json_text) {
  return detail::plan_from_json(detail::parse_json_text(json_text));
}

std::string dump_plan(const Plan& plan) {
  using namespace detail;
  OrderedJson out = header_json(kPlanKind);
  out["schema_version"] = plan_version(plan);
  out["provenance"] = provenance_json(plan.provenance);
  out["profile_sha256"] = plan.profile_sha256;
  out["model"] = model_json(plan.model);
  out["num_layers"] = plan.num_layers;
  OrderedJson cluster = OrderedJson::object();
  append_cluster_body(cluster, plan.cluster);
  out["cluster"] = std::move(cluster);
  out["schedule"] = to_string(plan.schedule);
  out["optimizer"] = to_string(plan.optimizer);
  out["placement"] = to_string(plan.placement);
  out["microbatch_size"] = plan.microbatch_size;
  out["microbatches_per_step"] = plan.microbatches_per_step;
  out["depth"] = plan.depth;
  out["width"] = plan.width;
  if (plan.chunks_per_rank != 1) out["chunks_per_rank"] = plan.chunks_per_rank;
  out["global_batch"] = plan.global_batch;
  out["reserve_bytes"] = plan.reserve_bytes;
  out["stages"] = array_json(plan.stages, stage_json);
  out["ranks"] = array_json(plan.ranks, rank_json);
  out["predictions"] = predictions_json(plan.predictions);
  out["alternatives"] = array_json(plan.alternatives, alternative_json);
  return dump_text(out);
}

}  // namespace pd2bw::schemas
