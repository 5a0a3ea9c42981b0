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

// A message names its microbatch by its index in the stream of all steps' microbatches (step m + k, kept
// modulo 2^32: a replay never holds that many) and carries its sender's chain origin (SimLane::origin): 16
// bytes, so a queue of a whole step's activations (gpipe) takes less of the cache.
struct Message {
  double start_ms;
  uint32_t index;
  int32_t origin;
};

// A first-in first-out queue of messages in a ring that doubles when full (a channel holds at most a
// step's worth of messages, so it stays small and is never reallocated in steady state), and the lane
// blocked receiving on it (-1: none), kept with it as both are read together.
class Channel {
 public:
  bool empty() const { return head_ == tail_; }
  const Message& front() const { return ring_[head_ & (ring_.size() - 1)]; }
  void pop() { ++head_; }
  void push(const Message& m) {
    if (tail_ - head_ == ring_.size()) grow();
    ring_[tail_++ & (ring_.size() - 1)] = m;
  }
  int64_t waiter = -1;

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
    lanes_.reserve(static_cast<size_t>(d * n));
    for (int64_t i = 0; i < d; ++i)
      for (int64_t r = 0; r < n; ++r) {
        lanes_.emplace_back(i, replicas_[static_cast<size_t>(r)], in, measure);
        lanes_.back().origin = static_cast<int32_t>(lanes_.size() - 1);
      }
    channels_.resize(static_cast<size_t>(2 * chunks * n));
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
  template <OpKind K>
  [[gnu::always_inline]] void record(SimLane& lane, double start, double end, const SimStage* st = nullptr) {
    if (!keep_) return lane.finish<K>(start, end, st);
    const Op op = lane.op();  // a copy: finish() moves the stream on, which may refill the op's slot
    lane.finish<K>(start, end, st);
    events_.push_back({lane.stage, lane.replica, op.chunk, op.kind, op.step, op.microbatch, op.version, start, end});
  }

  uint32_t index(const Op& op) const { return static_cast<uint32_t>(op.step * in_.spec.microbatches + op.microbatch); }

  [[gnu::always_inline]] void send(int64_t ch, const SimLane& lane, std::vector<int64_t>& work) {
    Channel& q = channels_[static_cast<size_t>(ch)];
    q.push({lane.clock_ms, index(lane.op()), lane.origin});
    if (q.waiter >= 0) {
      work.push_back(q.waiter);
      q.waiter = -1;
    }
  }

  // The start of lane l's receive on `ch` (its clock, or the message's send if later), taking the
  // message; returns false, with the lane waiting on `ch`, when nothing is queued.
  [[gnu::always_inline]] bool receive(int64_t l, SimLane& lane, int64_t ch, double& start) {
    Channel& q = channels_[static_cast<size_t>(ch)];
    if (q.empty()) {
      q.waiter = l;
      return false;
    }
    const Message msg = q.front();
    q.pop();
    if (msg.index != index(lane.op())) [[unlikely]]
      mismatch(lane, msg);
    if (lane.pc == 0)
      std::tie(lane.first_sent_ms, lane.entry_origin) = std::pair(msg.start_ms, msg.origin);  // its own chain starts
    else if (msg.start_ms > lane.clock_ms)
      lane.origin = msg.origin;  // the sender's chain holds the lane up
    start = std::max(lane.clock_ms, msg.start_ms);
    return true;
  }

  [[noreturn]] void mismatch(const SimLane& lane, const Message& msg) const {
    const int64_t m = in_.spec.microbatches;
    throw Error(
        fmt::format("schedule mismatch: stage {} expected step {} microbatch {} but got step {} "
                    "microbatch {}",
                    lane.stage, lane.op().step, lane.op().microbatch, static_cast<int64_t>(msg.index) / m,
                    static_cast<int64_t>(msg.index) % m));
  }

  bool allreduce(int64_t l, std::vector<int64_t>& work) {
    SimLane& lane = lanes_[static_cast<size_t>(l)];
    const int64_t chunk = lane.op().chunk;
    auto& group = ar_ready_[static_cast<size_t>(chunk)];
    group.push_back(l);
    if (group.size() < replicas_.size()) return false;
    double start = 0;
    int32_t origin = lane.origin;  // the latest peer's chain holds the others up
    for (int64_t g : group) {
      const SimLane& peer = lanes_[static_cast<size_t>(g)];
      if (peer.clock_ms > start) std::tie(start, origin) = std::pair(peer.clock_ms, peer.origin);
    }
    const double dur = in_.stages[static_cast<size_t>(chunk)].allreduce_ms;
    for (int64_t g : group) {
      SimLane& peer = lanes_[static_cast<size_t>(g)];
      if (peer.clock_ms < start) peer.origin = origin;
      record<OpKind::allreduce>(peer, start, start + dur);
      if (g != l) work.push_back(g);
    }
    group.clear();
    return true;
  }

  void advance(int64_t l, std::vector<int64_t>& work) {
    if (in_.spec.chunks == 1)
      advance<true>(l, work);
    else
      advance<false>(l, work);
  }

  // Runs lane l until it is done or waits: each op's start and duration by its kind, and the lane's
  // bookkeeping for that kind. Single (v = 1): every op's chunk is the lane's stage (the replay is
  // measurably faster for not reading it).
  template <bool Single>
  void advance(int64_t l, std::vector<int64_t>& work) {
    SimLane& lane = lanes_[static_cast<size_t>(l)];
    const int64_t slot = l % static_cast<int64_t>(replicas_.size());
    const double* links = boundary_ms_[static_cast<size_t>(lane.replica)].data();
    // What stays fixed for the lane is read once: the calls the loop makes (refills of the op stream)
    // keep the compiler from hoisting it. The activations (+ 0) and gradients (+ 1) crossing the
    // boundary between chunks `left` and `left + 1` of the lane's replica slot go on channel
    // left * across + at.
    const SimStage* own = Single ? &lane.own_chunk() : nullptr;
    const int64_t stage = lane.stage, across = 2 * static_cast<int64_t>(replicas_.size()), at = 2 * slot;
    while (lane.running()) {
      const Op& op = lane.op();
      double t = lane.clock_ms;
      const SimStage* st = Single ? own : op.chunk >= 0 ? &lane.chunk(op) : nullptr;
      const int64_t c = Single ? stage : op.chunk;  // -1 only for the update
      int64_t ch = 0, left = c;  // a message's channel and the boundary it crosses
      switch (op.kind) {
        case OpKind::forward: record<OpKind::forward>(lane, t, t + st->forward_ms, st); continue;
        case OpKind::backward: record<OpKind::backward>(lane, t, t + st->backward_ms, st); continue;
        case OpKind::recompute: record<OpKind::recompute>(lane, t, t + st->recompute_ms, st); continue;
        case OpKind::backward_input:
          record<OpKind::backward_input>(lane, t, t + (st->backward_ms - st->weight_ms), st);
          continue;
        case OpKind::backward_weight: record<OpKind::backward_weight>(lane, t, t + st->weight_ms, st); continue;
        case OpKind::update:
          record<OpKind::update>(lane, t, t + lane.update_ms());
          if (lane.done()) return;  // measured_only stops the lane here
          continue;
        case OpKind::allreduce:
          if (!allreduce(l, work)) return;
          continue;
        case OpKind::send_activation: ch = c * across + at; break;
        case OpKind::send_gradient: ch = --left * across + at + 1; break;
        case OpKind::recv_activation: ch = --left * across + at; break;
        case OpKind::recv_gradient: ch = c * across + at + 1; break;
      }
      // The four kinds of messages share the rest, one copy of it inlined: their bookkeeping is the same
      // (p2p time, no memory), so the sends' kind stands for all four.
      if (op.kind == OpKind::send_activation || op.kind == OpKind::send_gradient)
        send(ch, lane, work);
      else if (!receive(l, lane, ch, t))
        return;
      record<OpKind::send_activation>(lane, t, t + links[left]);
    }
  }

  const SimInput& in_;
  std::vector<int64_t> replicas_;  // the replicas replayed, one lane per (position, replica)
  bool keep_;
  std::vector<std::vector<double>> boundary_ms_;  // in_.boundary_ms with the hand-overs inside a rank at 0
  std::vector<SimLane> lanes_;
  std::vector<Channel> channels_;
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

namespace {

// simulate(); with `one_period`, a one-step replay (measured_only, no events) whose period
// first_step_period() proves is summarised as the steady step.
SimResult replay(const SimInput& input, bool keep_events, bool measured_only, bool one_period) {
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
  const double period = one_period ? first_step_period(engine.lanes()) : 0.0;
  SimResult result = summarize(input, engine.lanes(), weights, period);
  result.events = std::move(engine.events());
  return result;
}

}  // namespace

SimResult simulate(const SimInput& input, bool keep_events, bool measured_only) {
  return replay(input, keep_events, measured_only, false);
}

SimResult simulate_steady(SimInput input, bool keep_events, bool measured_only) {
  // Where only the steady step is asked for, a schedule whose steps do not overlap (all but 2bw) first
  // replays one step: when that step proves its own period, every later step repeats it and the steady
  // step is known at a third of the default replay's cost (first_step_period).
  int64_t tried_ops = 0;  // the one-step replay's, when refused
  if (measured_only && !keep_events && input.spec.kind != Schedule::two_bw) {
    const int64_t steps = input.spec.steps;
    input.spec.steps = 1;
    SimResult r = replay(input, false, true, true);
    if (r.steady) return r;
    input.spec.steps = steps;
    tried_ops = r.simulated_ops;
  }
  input.spec.steps = std::max(input.spec.steps, default_sim_steps(input.spec.kind));
  while (true) {
    SimResult r = simulate(input, keep_events, measured_only);
    if (r.steady || input.spec.steps >= kMaxSteadySteps || 2 * r.simulated_ops > kMaxSteadyOps) {
      r.simulated_ops += tried_ops;
      return r;
    }
    input.spec.steps = std::min(2 * input.spec.steps, kMaxSteadySteps);
  }
}

}  // namespace pd2bw::planner
