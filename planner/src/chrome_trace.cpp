// Chrome trace event format writer for simulated runs (JSON object with a "traceEvents" array).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iterator>

#include "pd2bw/error.hpp"
#include "pd2bw/planner/timeline.hpp"

namespace pd2bw::planner {

namespace {

bool on_comm_track(OpKind k) {
  return k == OpKind::send_activation || k == OpKind::recv_activation || k == OpKind::send_gradient ||
         k == OpKind::recv_gradient;
}

std::string op_name(const SimEvent& e) {
  switch (e.kind) {
    case OpKind::forward: return fmt::format("F{}", e.microbatch);
    case OpKind::backward: return fmt::format("B{}", e.microbatch);
    case OpKind::backward_input: return fmt::format("B{} (input)", e.microbatch);
    case OpKind::backward_weight: return fmt::format("W{}", e.microbatch);
    case OpKind::recompute: return fmt::format("R{}", e.microbatch);
    case OpKind::send_activation: return fmt::format("send act {}", e.microbatch);
    case OpKind::recv_activation: return fmt::format("recv act {}", e.microbatch);
    case OpKind::send_gradient: return fmt::format("send grad {}", e.microbatch);
    case OpKind::recv_gradient: return fmt::format("recv grad {}", e.microbatch);
    case OpKind::allreduce: return fmt::format("allreduce step {}", e.step);
    case OpKind::update: return fmt::format("update -> v{}", e.version);
  }
  return "?";
}

// With chunks, every op but the update names its chunk: "F3 c1", "send act 3 c1".
std::string event_name(const SimEvent& e, bool chunked) {
  if (!chunked || e.chunk < 0) return op_name(e);
  return fmt::format("{} c{}", op_name(e), e.chunk);
}

// "stage i, replica r", with the chunks the position holds when it holds several.
std::string rank_label(const SimInput& input, int64_t stage, int64_t replica) {
  const ScheduleSpec& s = input.spec;
  if (s.chunks == 1) return fmt::format("stage {}, replica {}", stage, replica);
  return fmt::format("stage {} (chunks {}), replica {}", stage,
                     fmt::join(pipeline::chunks_at(s.kind, s.depth, s.chunks, stage), ", "), replica);
}

}  // namespace

int64_t chrome_trace_op_events(const SimResult& result) { return static_cast<int64_t>(result.events.size()); }

std::string chrome_trace(const SimInput& input, const SimResult& result) {
  if (result.events.empty()) throw Error("chrome_trace: the simulation kept no events");
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  auto it = std::back_inserter(out);
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (size_t i = 0; i < input.ranks.size(); ++i)
    for (size_t r = 0; r < input.ranks[i].size(); ++r) {
      const int64_t pid = input.ranks[i][r];
      sep();
      fmt::format_to(it, R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"rank {}: {}"}}}})", pid, pid,
                     rank_label(input, static_cast<int64_t>(i), static_cast<int64_t>(r)));
      sep();
      fmt::format_to(it, R"({{"ph":"M","name":"process_sort_index","pid":{},"args":{{"sort_index":{}}}}})", pid,
                     i * input.ranks[i].size() + r);
      sep();
      fmt::format_to(it, R"({{"ph":"M","name":"thread_name","pid":{},"tid":0,"args":{{"name":"compute"}}}})", pid);
      sep();
      fmt::format_to(it, R"({{"ph":"M","name":"thread_name","pid":{},"tid":1,"args":{{"name":"comm"}}}})", pid);
    }
  const bool chunked = input.spec.chunks > 1;
  for (const auto& e : result.events) {
    sep();
    const int64_t pid = input.ranks[static_cast<size_t>(e.stage)][static_cast<size_t>(e.replica)];
    fmt::format_to(it,
                   R"({{"ph":"X","name":"{}","cat":"{}","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},)"
                   R"("args":{{"step":{},"microbatch":{},"version":{})",
                   event_name(e, chunked), to_string(e.kind), pid, on_comm_track(e.kind) ? 1 : 0, e.start_ms * 1e3,
                   (e.end_ms - e.start_ms) * 1e3, e.step, e.microbatch, e.version);
    if (chunked) fmt::format_to(it, R"(,"chunk":{})", e.chunk);
    out += "}}";
  }
  for (size_t i = 0; i < result.stages.size(); ++i) {
    const int64_t pid = input.ranks[i][0];
    for (const auto& [t, bytes] : result.stages[i].memory_curve) {
      sep();
      fmt::format_to(it, R"({{"ph":"C","name":"memory GiB","pid":{},"ts":{:.3f},"args":{{"GiB":{:.4f}}}}})", pid,
                     t * 1e3, static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
    }
  }
  out += "\n]}\n";
  return out;
}

}  // namespace pd2bw::planner
