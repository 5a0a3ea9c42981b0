// The simulator's engine: lanes (one per simulated rank) run their op lists; a lane blocks on a receive
// with nothing queued or on an allreduce its peers have not reached, and is woken when that changes.
// Times follow from the dependencies alone, so the order lanes are visited in does not matter. Messages
// travel on the boundaries between model chunks (the stages when v = 1); a boundary between two chunks of
// one rank is a channel the lane sends to and later receives from itself, at no cost.
#include "pd2bw/planner/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "pd2bw/checked.hpp"
#include "pd2bw/error.hpp"
#include "sim_lane.hpp"

namespace pd2bw::planner {

namespace {

struct Message {
  double start_ms;
  int64_t step, microbatch;
};

// A first-in first-out queue of messages in a ring that doubles when full (a channel holds at most a
// warm-up's worth of messages, so it stays small and is never reallocated in steady state).
class Channel {
 public:
  bool empty() const { return head_ == tail_; }
  const Message& front() const { return ring_[head_ & (ring_.size() - 1)]; }
  void pop() { ++head_; }
  void push(const Message& m) {
    if (tail_ - head_ == ring_.size()) grow();
    ring_[tail_++ & (ring_.size() - 1)] = m;
  }

 private:
  void grow() {
    std::vector<Message> bigger(std::max<size_t>(8, 2 * ring_.size()));
    for (size_t i = head_; i < tail_; ++i) bigger[i - head_] = ring_[i & (ring_.size() - 1)];
    tail_ -= head_;
    head_ = 0;
    ring_ = std::move(bigger);
  }
  std::vector<Message> ring_;
  size_t head_ = 0, tail_ = 0;
};

class Engine {
 public:
  Engine(const SimInput& in, std::vector<int64_t> replicas, bool keep, LaneMeasure measure)
      : in_(in), replicas_(std::move(replicas)), keep_(keep), boundary_ms_(in.boundary_ms) {
    const int64_t d = in.spec.depth, n = static_cast<int64_t>(replicas_.size());
    const int64_t chunks = d * in.spec.chunks;
    for (int64_t i = 0; i < d; ++i)
      for (int64_t r = 0; r < n; ++r) lanes_.emplace_back(i, replicas_[static_cast<size_t>(r)], in, measure);
    channels_.resize(static_cast<size_t>(2 * chunks * n));
    waiter_.assign(channels_.size(), -1);
    ar_ready_.assign(static_cast<size_t>(chunks), {});
    for (int64_t c = 0; c + 1 < chunks; ++c)  // a hand-over inside one rank (zb-v's turn) costs nothing
      if (pipeline::chunk_position(in.spec.kind, d, c) == pipeline::chunk_position(in.spec.kind, d, c + 1))
        for (auto& row : boundary_ms_) row[static_cast<size_t>(c)] = 0.0;
  }

  void run() {
    std::vector<int64_t> work;
    for (int64_t l = static_cast<int64_t>(lanes_.size()) - 1; l >= 0; --l) work.push_back(l);
    while (!work.empty()) {
      const int64_t l = work.back();
      work.pop_back();
      advance(l, work);
    }
    for (const auto& lane : lanes_)
      if (!lane.done())
        throw Error(fmt::format("simulation deadlocked: stage {} replica {} is stuck at op {} ({} of chunk {})",
                                lane.stage, lane.replica, lane.pc, to_string(lane.op().kind), lane.op().chunk));
  }

  std::vector<SimLane>& lanes() { return lanes_; }
  std::vector<SimEvent>& events() { return events_; }

 private:
  // Channel of activations (grad = false) or gradients crossing the boundary between chunk `left` and
  // chunk `left + 1`.
  int64_t channel(int64_t left, int64_t slot, bool grad) const {
    return (left * static_cast<int64_t>(replicas_.size()) + slot) * 2 + (grad ? 1 : 0);
  }
  double boundary(const SimLane& lane, int64_t left) const {
    return boundary_ms_[static_cast<size_t>(lane.replica)][static_cast<size_t>(left)];
  }

  void record(SimLane& lane, double start, double end) {
    if (!keep_) return lane.finish(start, end);
    const Op op = lane.op();  // a copy: finish() moves the stream on, which may refill the op's slot
    lane.finish(start, end);
    events_.push_back({lane.stage, lane.replica, op.chunk, op.kind, op.step, op.microbatch, op.version, start, end});
  }

  void send(int64_t ch, const SimLane& lane, std::vector<int64_t>& work) {
    channels_[static_cast<size_t>(ch)].push({lane.clock_ms, lane.op().step, lane.op().microbatch});
    int64_t& waiter = waiter_[static_cast<size_t>(ch)];
    if (waiter >= 0) {
      work.push_back(waiter);
      waiter = -1;
    }
  }

  // Returns false when the lane must wait.
  bool receive(int64_t l, int64_t ch, double transfer_ms) {
    auto& q = channels_[static_cast<size_t>(ch)];
    SimLane& lane = lanes_[static_cast<size_t>(l)];
    if (q.empty()) {
      waiter_[static_cast<size_t>(ch)] = l;
      return false;
    }
    const Message msg = q.front();
    q.pop();
    if (msg.step != lane.op().step || msg.microbatch != lane.op().microbatch)
      throw Error(fmt::format("schedule mismatch: stage {} expected step {} microbatch {} but got step {} "
                              "microbatch {}", lane.stage, lane.op().step, lane.op().microbatch, msg.step,
                              msg.microbatch));
    const double start = std::max(lane.clock_ms, msg.start_ms);
    record(lane, start, start + transfer_ms);
    return true;
  }

  bool allreduce(int64_t l, std::vector<int64_t>& work) {
    SimLane& lane = lanes_[static_cast<size_t>(l)];
    const int64_t chunk = lane.op().chunk;
    auto& group = ar_ready_[static_cast<size_t>(chunk)];
    group.push_back(l);
    if (group.size() < replicas_.size()) return false;
    double start = 0;
    for (int64_t g : group) start = std::max(start, lanes_[static_cast<size_t>(g)].clock_ms);
    const double dur = in_.stages[static_cast<size_t>(chunk)].allreduce_ms;
    for (int64_t g : group) {
      record(lanes_[static_cast<size_t>(g)], start, start + dur);
      if (g != l) work.push_back(g);
    }
    group.clear();
    return true;
  }

  void advance(int64_t l, std::vector<int64_t>& work) {
    SimLane& lane = lanes_[static_cast<size_t>(l)];
    const int64_t slot = l % static_cast<int64_t>(replicas_.size());
    const bool single = in_.spec.chunks == 1;  // then every op's chunk is the lane's stage (and the
                                               // replay measurably faster for not reading it)
    while (!lane.done()) {
      const Op& op = lane.op();
      const double t = lane.clock_ms;
      const int64_t c = single ? lane.stage : op.chunk;  // -1 only for the update
      switch (op.kind) {
        case OpKind::forward: record(lane, t, t + lane.chunk(op).forward_ms); break;
        case OpKind::backward: record(lane, t, t + lane.chunk(op).backward_ms); break;
        case OpKind::recompute: record(lane, t, t + lane.chunk(op).recompute_ms); break;
        case OpKind::update: record(lane, t, t + lane.update_ms()); break;
        case OpKind::send_activation: {
          send(channel(c, slot, false), lane, work);
          record(lane, t, t + boundary(lane, c));
          break;
        }
        case OpKind::send_gradient: {
          send(channel(c - 1, slot, true), lane, work);
          record(lane, t, t + boundary(lane, c - 1));
          break;
        }
        case OpKind::recv_activation:
          if (!receive(l, channel(c - 1, slot, false), boundary(lane, c - 1))) return;
          break;
        case OpKind::recv_gradient:
          if (!receive(l, channel(c, slot, true), boundary(lane, c))) return;
          break;
        case OpKind::allreduce:
          if (!allreduce(l, work)) return;
          break;
        case OpKind::backward_input: {
          const SimStage& st = lane.chunk(op);
          record(lane, t, t + (st.backward_ms - st.weight_ms));
          break;
        }
        case OpKind::backward_weight: record(lane, t, t + lane.chunk(op).weight_ms); break;
      }
    }
  }

  const SimInput& in_;
  std::vector<int64_t> replicas_;  // the replicas replayed, one lane per (position, replica)
  bool keep_;
  std::vector<std::vector<double>> boundary_ms_;  // in_.boundary_ms with the hand-overs inside a rank at 0
  std::vector<SimLane> lanes_;
  std::vector<Channel> channels_;
  std::vector<int64_t> waiter_;                 // per channel: the lane blocked receiving on it, or -1
  std::vector<std::vector<int64_t>> ar_ready_;  // per chunk: lanes waiting in its allreduce
  std::vector<SimEvent> events_;
};

// Replicas whose chains of boundary times are identical run identical timelines; keep the first of each.
// Returns the kept replicas and how many replicas each stands for.
std::pair<std::vector<int64_t>, std::vector<int64_t>> distinct_replicas(const SimInput& in) {
  std::map<std::vector<double>, size_t> seen;
  std::vector<int64_t> keep, weight;
  for (size_t r = 0; r < in.boundary_ms.size(); ++r) {
    const auto [it, fresh] = seen.emplace(in.boundary_ms[r], keep.size());
    if (fresh) {
      keep.push_back(static_cast<int64_t>(r));
      weight.push_back(0);
    }
    ++weight[it->second];
  }
  return {keep, weight};
}

void check_input(const SimInput& in) {
  const ScheduleSpec& s = in.spec;
  if (s.depth < 1 || s.width < 1 || !pipeline::chunks_allowed(s.kind, s.chunks))
    throw Error(fmt::format("simulator input: d = {}, w = {} and {} chunks per rank for {}", s.depth, s.width,
                            s.chunks, to_string(s.kind)));
  const auto d = static_cast<size_t>(s.depth), w = static_cast<size_t>(s.width);
  const size_t chunks = d * static_cast<size_t>(s.chunks);
  if (in.stages.size() != chunks || in.boundary_ms.size() != w || in.ranks.size() != d)
    throw Error(fmt::format("simulator input: expected {} chunks, {} replicas and {} positions", chunks, w, d));
  for (const auto& row : in.boundary_ms)
    if (row.size() + 1 != chunks) throw Error("simulator input: each replica needs d v - 1 boundary times");
  for (size_t c = 0; c < chunks; ++c) {  // a rank recomputes all its chunks or none
    const auto first = static_cast<size_t>(pipeline::chunk_position(s.kind, s.depth, static_cast<int64_t>(c)));
    if (in.stages[c].recompute != in.stages[first].recompute)
      throw Error(fmt::format("simulator input: chunks {} and {} share a rank but not their recompute flag", first, c));
  }
}

}  // namespace

int64_t estimated_replay_ops(const SimInput& input) {
  check_input(input);
  return replay_ops(input.spec, static_cast<int64_t>(distinct_replicas(input).first.size()));
}

int64_t replay_ops(const ScheduleSpec& spec, int64_t replicas) {
  const int64_t lanes = saturating_mul(replicas, spec.depth);
  const int64_t steps = std::max(spec.steps, default_sim_steps(spec.kind));
  // Per chunk, up to 7 ops per microbatch (receive, forward, send; receive, recompute, backward, send; and
  // a split backward's W) and an allreduce; one update.
  const int64_t per_microbatch = pipeline::splits_backward(spec.kind) ? 8 : 7;
  const int64_t per_chunk = saturating_add(saturating_mul(per_microbatch, spec.microbatches), 1);
  return saturating_mul(saturating_mul(lanes, steps), saturating_add(saturating_mul(per_chunk, spec.chunks), 1));
}

SimResult simulate(const SimInput& input, bool keep_events, bool measured_only) {
  check_input(input);
  std::vector<int64_t> replicas, weights;
  if (keep_events) {
    for (int64_t r = 0; r < input.spec.width; ++r) replicas.push_back(r);
    weights.assign(replicas.size(), 1);
  } else {
    std::tie(replicas, weights) = distinct_replicas(input);
  }
  Engine engine(input, replicas, keep_events, {steady_step(input.spec), keep_events, measured_only && !keep_events});
  engine.run();
  SimResult result = summarize(input, engine.lanes(), weights);
  result.events = std::move(engine.events());
  return result;
}

SimResult simulate_steady(SimInput input, bool keep_events, bool measured_only) {
  input.spec.steps = std::max(input.spec.steps, default_sim_steps(input.spec.kind));
  while (true) {
    SimResult r = simulate(input, keep_events, measured_only);
    if (r.steady || input.spec.steps >= kMaxSteadySteps || 2 * r.simulated_ops > kMaxSteadyOps) return r;
    input.spec.steps = std::min(2 * input.spec.steps, kMaxSteadySteps);
  }
}

}  // namespace pd2bw::planner
