// The fuzz targets' bodies (targets.hpp).
#include "targets.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pd2bw/error.hpp"
#include "pd2bw/planner/plan_audit.hpp"
#include "pd2bw/planner/search.hpp"
#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::fuzz {
namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz property broken: %s\n", what);
  std::abort();
}

// Reads with `parse`, then checks that what `dump` writes reads back to the same text.
template <typename Parse, typename Dump>
void round_trip(const uint8_t* data, size_t size, Parse parse, Dump dump) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string once;
  try {
    once = dump(parse(text));
  } catch (const pd2bw::Error&) {
    return;  // rejected with a message: what a reader should do with bad input
  }
  try {
    if (dump(parse(once)) != once) broken("a written file does not read back to the same text");
  } catch (const pd2bw::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    broken("a written file is rejected by its own reader");
  }
}

// Byte counts the planner targets draw or take: up to 2^62 each, so that sums of a few of them pass int64
// (the planner's checked and saturating arithmetic must answer them).
constexpr int64_t kValueCap = int64_t{1} << 62;

// Sizes and times the planner target explores: beyond these the planner's own checked arithmetic
// answers (with a clear error), which is not what this target searches for.
bool realistic(const schemas::Profile& p) {
  if (p.layers.size() > 64 || p.microbatch_sizes.size() > 4) return false;
  constexpr int64_t kBytes = kValueCap;
  constexpr double kMs = 1e6;
  for (const auto& l : p.layers) {
    if (l.param_bytes > kBytes || l.optimizer_bytes > kBytes || l.update_ms > kMs) return false;
    for (const auto& t : l.per_microbatch)
      if (t.input_bytes > kBytes || t.output_bytes > kBytes || t.stash_bytes > kBytes || t.fwd_ms > kMs ||
          t.bwd_ms > kMs || t.recompute_ms > kMs || t.stash_bytes_computed > kBytes || t.bwd_input_ms > kMs ||
          t.bwd_weight_ms > kMs || t.bwd_weight_stash_bytes > kBytes)
        return false;
  }
  for (const int64_t b : p.microbatch_sizes)
    if (b > 1024) return false;
  return true;
}

schemas::DeviceDesc device(int64_t memory_bytes) {
  schemas::DeviceDesc d;
  d.name = "fuzz";
  d.memory_bytes = memory_bytes;
  return d;
}

schemas::ClusterLevel level(const char* name, int64_t size, double gbps, double latency_ms) {
  schemas::ClusterLevel l;
  l.name = name;
  l.size = size;
  l.p2p_gbps = gbps;
  l.p2p_latency_ms = latency_ms;
  l.allreduce_busbw_gbps = 0.8 * gbps;
  return l;
}

schemas::Cluster small_cluster() {
  schemas::Cluster c;
  c.device = device(int64_t{16} << 30);
  c.levels = {level("node", 4, 100.0, 0.005), level("cluster", 2, 10.0, 0.01)};
  return c;
}

// Values drawn from the fuzzer's bytes (zeros once they run out).
class Draw {
 public:
  Draw(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint64_t bits() {
    uint64_t v = 0;
    for (int i = 0; i < 8 && at_ < size_; ++i) v |= static_cast<uint64_t>(data_[at_++]) << (8 * i);
    return v;
  }
  int64_t in(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(bits() % static_cast<uint64_t>(hi - lo + 1)); }
  // A byte count in [1, cap]: of any magnitude, so sums near the cap are reached as often as small ones.
  int64_t bytes(int64_t cap) {
    const int64_t magnitude = in(0, 62);
    const int64_t top = std::min(cap, magnitude >= 62 ? cap : (int64_t{1} << magnitude));
    return in(1, std::max<int64_t>(top, 1));
  }
  double ms() { return 1e-3 + static_cast<double>(in(0, 1000000)) * 1e-3; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

schemas::Profile drawn_profile(Draw& d, int64_t cap) {
  schemas::Profile p;
  // Kind "stack": any number of layers (a "gpt" plan must have blocks + 2 of them).
  p.model = {"stack", "fuzz", 1, 64, 4, 64, 256, d.in(0, 1) ? schemas::DType::bf16 : schemas::DType::fp32, false, {}};
  p.device = device(d.bytes(cap));
  for (int64_t b = 1; b <= 16; b *= 2)
    if (d.in(0, 1) || (b == 16 && p.microbatch_sizes.empty())) p.microbatch_sizes.push_back(b);
  const int64_t layers = d.in(1, 32);
  for (int64_t l = 0; l < layers; ++l) {
    schemas::LayerProfile layer;
    layer.name = "layer." + std::to_string(l);
    layer.kind = "block";
    layer.param_bytes = d.bytes(cap);
    if (d.in(0, 1)) layer.optimizer_bytes = d.bytes(cap);
    for (const int64_t b : p.microbatch_sizes) {
      schemas::LayerTiming t;
      t.microbatch = b;
      t.fwd_ms = d.ms();
      t.bwd_ms = d.ms();
      t.input_bytes = d.bytes(cap);
      t.output_bytes = d.bytes(cap);
      t.stash_bytes = d.bytes(cap);
      layer.per_microbatch.push_back(t);
    }
    p.layers.push_back(std::move(layer));
  }
  // Drawn last, so the bytes above keep their meaning: a profile that times the backward in halves has
  // zb-h1 searched beside the other schedules.
  if (d.in(0, 1))
    for (auto& layer : p.layers)
      for (auto& t : layer.per_microbatch) {
        t.split = true;
        t.bwd_input_ms = d.ms();
        t.bwd_weight_ms = d.ms();
        t.bwd_weight_stash_bytes = d.bytes(cap);
      }
  return p;
}

// Searches (the search replays its finalists) and builds a plan; the plan must read back and pass the
// number checks of `pd2bw validate`, alone and against its profile. Error: said, not a crash.
void plan_and_check(const schemas::Profile& profile, const schemas::Cluster& cluster, int64_t global_batch) {
  schemas::Plan plan;
  try {
    planner::Constraints k;
    k.global_batch = global_batch;
    k.reserve_bytes = 0;
    const planner::CostModel model(profile, cluster, k);
    planner::SearchOptions so;
    so.top_k = 2;
    so.threads = 1;
    planner::SearchResult result = planner::search(model, so);
    if (!result.feasible()) return;
    plan = planner::build_plan(model, result, std::string(64, 'a'), {"fuzz", "0", "unknown", "", ""});
  } catch (const pd2bw::Error&) {
    return;  // an infeasible or unplannable profile, said with a message
  }
  if (!std::isfinite(plan.predictions.step_ms) || plan.predictions.step_ms <= 0) broken("a plan's step time is not > 0");
  try {
    (void)schemas::parse_plan(schemas::dump_plan(plan));
  } catch (const pd2bw::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    broken("the plan reader rejects a plan the planner wrote");
  }
  auto report = [](const std::vector<planner::PlanFinding>& found, const char* what) {
    if (found.empty()) return;
    for (const auto& x : found) std::fprintf(stderr, "%s: %s\n", x.pointer.c_str(), x.message.c_str());
    broken(what);
  };
  // A "gpt" or "bert" profile whose layers are not blocks + 2 plans here, but its plan is one `train` cannot
  // build and the plan checks refuse (/model/blocks): the planner library does not check a model's shape
  // (the CLI refuses such a profile before planning: tools/pd2bw/inputs.cpp).
  const bool trained_kind = profile.model.kind == "gpt" || profile.model.kind == "bert";
  const bool gpt_shape = !trained_kind || static_cast<int64_t>(profile.layers.size()) - 2 == profile.model.blocks;
  if (gpt_shape)
    report(planner::check_plan_numbers(plan), "a plan the planner wrote breaks the rules of a plan's numbers");
  report(planner::check_plan_against(profile, plan), "a plan the planner wrote disagrees with its own profile");
}

}  // namespace

void profile_reader(const uint8_t* data, size_t size) {
  round_trip(data, size, schemas::parse_profile, schemas::dump_profile);
}

void cluster_reader(const uint8_t* data, size_t size) {
  round_trip(data, size, schemas::parse_cluster, schemas::dump_cluster);
}

void plan_reader(const uint8_t* data, size_t size) {
  round_trip(data, size, schemas::parse_plan, schemas::dump_plan);
}

void plan_search(const uint8_t* data, size_t size) {
  schemas::Profile profile;
  try {
    profile = schemas::parse_profile(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const pd2bw::Error&) {
    return;
  }
  if (realistic(profile)) plan_and_check(profile, small_cluster(), 16);
}

void plan_values(const uint8_t* data, size_t size) {
  Draw d(data, size);
  const int64_t cap = kValueCap;
  const schemas::Profile drawn = drawn_profile(d, cap);
  schemas::Profile profile;
  try {
    profile = schemas::parse_profile(schemas::dump_profile(drawn));  // what a profile file could hold
  } catch (const pd2bw::Error&) {
    return;
  }
  schemas::Cluster cluster;
  cluster.device = device(d.bytes(cap));
  cluster.levels = {level("node", d.in(1, 8), static_cast<double>(d.in(1, 1000)), d.ms()),
                    level("cluster", d.in(1, 4), static_cast<double>(d.in(1, 1000)), d.ms())};
  plan_and_check(profile, cluster, d.in(1, 64));
}

Target target_named(std::string_view name) {
  if (name == "profile_reader") return profile_reader;
  if (name == "cluster_reader") return cluster_reader;
  if (name == "plan_reader") return plan_reader;
  if (name == "plan_search") return plan_search;
  if (name == "plan_values") return plan_values;
  return nullptr;
}

}  // namespace pd2bw::fuzz
