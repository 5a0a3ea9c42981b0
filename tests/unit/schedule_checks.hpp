// Checks shared by the schedule generator's tests.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pd2bw/pipeline/shape.hpp"
#include "pd2bw/planner/schedule.hpp"
#include "random_instances.hpp"

// CHECK(...) that costs one branch when it holds: for the hot loops of the property tests, which test
// millions of ops. The expression is evaluated again on failure, so it must have no side effects.
#define CHEAP_CHECK(...)                    \
  do {                                      \
    if (!(__VA_ARGS__)) CHECK(__VA_ARGS__); \
  } while (false)

namespace pd2bw::testing {

// Pairs the messages of a chunked pipeline (v model chunks per position, placed by
// schemas::chunk_position; `all` holds every position's ops, position by position):
//  - per chunk: the send_activation ops of chunk c, in the order of the list of c's position, carry the
//    same (step, microbatch) tags as the recv_activation ops of chunk c + 1 in the list of c + 1's
//    position, and the send_gradient ops of chunk c + 1 the same as the recv_gradient ops of chunk c;
//    this holds also where c and c + 1 sit on the same position (zb-v's turn at chunk d - 1);
//  - per link: on each (source position, destination position, direction) the sends, in the source's
//    order, and the receives, in the destination's order, name the same (receiving chunk, step,
//    microbatch) sequence; so a transport that matches messages by (source, kind, step, microbatch) in
//    FIFO order, without the chunk, still hands each receive its own message (interleaved with d = 2
//    carries chunks 0 -> 1 and 2 -> 3 over the same link, with equal tags);
//  - no activation goes into chunk 0 or out of the last chunk, no gradient out of chunk 0 or into the
//    last chunk.
inline void check_chunk_pairing(schemas::Schedule kind, int64_t depth, int64_t chunks,
                                const std::vector<std::vector<pd2bw::planner::Op>>& all) {
  using pd2bw::planner::OpKind;
  using Key = std::pair<int64_t, int64_t>;  // (step, microbatch)
  const int64_t total = depth * chunks;
  REQUIRE(static_cast<int64_t>(all.size()) == depth);
  const auto position = [&](int64_t c) { return static_cast<size_t>(schemas::chunk_position(kind, depth, c)); };
  const auto tags = [&](int64_t c, OpKind k) {
    std::vector<Key> out;
    for (const auto& op : all[position(c)])
      if (op.kind == k && op.chunk == c) out.push_back({op.step, op.microbatch});
    return out;
  };
  for (int64_t c = 0; c + 1 < total; ++c) {
    CAPTURE(c);
    const auto sent_act = tags(c, OpKind::send_activation), recv_act = tags(c + 1, OpKind::recv_activation);
    const auto sent_grad = tags(c + 1, OpKind::send_gradient), recv_grad = tags(c, OpKind::recv_gradient);
    CHECK(sent_act == recv_act);
    CHECK(sent_grad == recv_grad);
  }
  // Per link: (source, destination, is_gradient) -> the receiving chunk, step and microbatch, in order.
  using Link = std::tuple<size_t, size_t, bool>;
  using Msg = std::tuple<int64_t, int64_t, int64_t>;
  std::map<Link, std::vector<Msg>> sent, received;
  for (size_t p = 0; p < all.size(); ++p)
    for (const auto& op : all[p]) {
      const bool out_of_range = op.chunk < 0 || op.chunk >= total;
      switch (op.kind) {
        case OpKind::send_activation:
          if (out_of_range) FAIL("chunk " << op.chunk << " out of range");
          CHEAP_CHECK(op.chunk + 1 < total);
          sent[{p, position(op.chunk + 1), false}].push_back({op.chunk + 1, op.step, op.microbatch});
          break;
        case OpKind::recv_activation:
          if (out_of_range) FAIL("chunk " << op.chunk << " out of range");
          CHEAP_CHECK(op.chunk > 0);
          received[{position(op.chunk - 1), p, false}].push_back({op.chunk, op.step, op.microbatch});
          break;
        case OpKind::send_gradient:
          if (out_of_range) FAIL("chunk " << op.chunk << " out of range");
          CHEAP_CHECK(op.chunk > 0);
          sent[{p, position(op.chunk - 1), true}].push_back({op.chunk - 1, op.step, op.microbatch});
          break;
        case OpKind::recv_gradient:
          if (out_of_range) FAIL("chunk " << op.chunk << " out of range");
          CHEAP_CHECK(op.chunk + 1 < total);
          received[{position(op.chunk + 1), p, true}].push_back({op.chunk, op.step, op.microbatch});
          break;
        default:
          break;
      }
    }
  CHECK(sent == received);
}

// Pairs every send of stage i with the receive of stage i + 1 (activations) or i - 1 (gradients), in
// order: the (step, microbatch) tags must agree. `all` holds every stage's ops, stage by stage, of a
// schedule with one chunk per stage (chunk = stage).
inline void check_pairing(const std::vector<std::vector<pd2bw::planner::Op>>& all) {
  check_chunk_pairing(schemas::Schedule::flush, static_cast<int64_t>(all.size()), 1, all);
}

// One schedule of the chunked property tests: kind, depth, chunks per rank, microbatches per step.
struct ScheduleCase {
  schemas::Schedule kind;
  int64_t d, v, m;
};

// The cases the chunked tests cover: d 1..6; interleaved with v 2 and 3 and m = d, 2 d, 3 d; zb-h2, zb-v
// (v = 2), flush, gpipe and zb-h1 with every m from 1 to 3 d + 1.
inline std::vector<ScheduleCase> chunked_cases() {
  using schemas::Schedule;
  std::vector<ScheduleCase> out;
  for (int64_t d = 1; d <= 6; ++d) {
    for (int64_t v : {2, 3})
      for (int64_t m = d; m <= 3 * d; m += d) out.push_back({Schedule::interleaved, d, v, m});
    for (int64_t m = 1; m <= 3 * d + 1; ++m)
      for (Schedule k : {Schedule::zb_h2, Schedule::zb_v, Schedule::flush, Schedule::gpipe, Schedule::zb_h1})
        out.push_back({k, d, k == Schedule::zb_v ? 2 : 1, m});
  }
  return out;
}

// Every position's list of case `c`, position by position.
inline std::vector<std::vector<pd2bw::planner::Op>> position_lists(const ScheduleCase& c, int64_t steps, int64_t width,
                                                                   bool recompute) {
  std::vector<std::vector<pd2bw::planner::Op>> all;
  for (int64_t i = 0; i < c.d; ++i)
    all.push_back(pd2bw::planner::stage_ops({c.kind, c.d, c.m, steps, width, c.v}, i, recompute));
  return all;
}

// Integer durations of a replay, per op kind and model chunk.
struct Durations {
  std::vector<int64_t> forward, backward, input, weight, recompute;  // backward: fused; input: B; weight: W
  int64_t allreduce = 0, update = 0;
  int64_t latency = 0;  // of a message between two positions (a hand-over on one position costs nothing)

  // F = backward = B = W = 1 on every chunk, the rest free: the papers' unit.
  static Durations unit(int64_t chunks) {
    const std::vector<int64_t> one(static_cast<size_t>(chunks), 1);
    return {one, one, one, one, std::vector<int64_t>(static_cast<size_t>(chunks), 0), 0, 0, 0};
  }
  // Every duration drawn from 1..9 (the latency from 0..3).
  static Durations random(int64_t chunks, Rng& rng) {
    const auto draw = [&] {
      std::vector<int64_t> out;
      for (int64_t c = 0; c < chunks; ++c) out.push_back(rng.range(1, 9));
      return out;
    };
    return {draw(), draw(), draw(), draw(), draw(), rng.range(1, 9), rng.range(1, 9), rng.range(0, 3)};
  }
  int64_t of(const pd2bw::planner::Op& op) const {
    using pd2bw::planner::OpKind;
    const auto c = static_cast<size_t>(op.chunk);
    switch (op.kind) {
      case OpKind::forward:
        return forward.at(c);
      case OpKind::backward:
        return backward.at(c);
      case OpKind::backward_input:
        return input.at(c);
      case OpKind::backward_weight:
        return weight.at(c);
      case OpKind::recompute:
        return recompute.at(c);
      case OpKind::allreduce:
        return allreduce;
      case OpKind::update:
        return update;
      default:
        return 0;  // sends and receives take no time of the rank's own
    }
  }
};

struct ReplayResult {
  bool finished = false;                      // every position ran its whole list, every message was read
  std::vector<std::vector<int64_t>> updates;  // [position][step]: when the update ended
};

// A replay of every position's list (`all`, position by position): each position runs its ops in
// order, one at a time; a receive waits for the message its sender's send made (a message of chunk c's
// activation goes to chunk c + 1, of its gradient to chunk c - 1: each (direction, receiving chunk) is
// one FIFO channel, whose head must carry the receive's step and microbatch); a send never waits. No
// barrier: a position starts its next step right after its update. Stops when no position can go on.
inline ReplayResult replay(schemas::Schedule kind, int64_t depth,
                           const std::vector<std::vector<pd2bw::planner::Op>>& all, const Durations& t) {
  using pd2bw::planner::OpKind;
  struct Message {
    int64_t step, microbatch, at;
  };
  std::map<std::pair<bool, int64_t>, std::deque<Message>> channels;  // (gradient?, receiving chunk)
  const size_t n = all.size();
  std::vector<size_t> next(n, 0);
  std::vector<int64_t> clock(n, 0);
  ReplayResult r;
  r.updates.resize(n);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t p = 0; p < n; ++p)
      for (; next[p] < all[p].size(); ++next[p], progress = true) {
        const auto& op = all[p][next[p]];
        int64_t start = clock[p];
        if (op.kind == OpKind::recv_activation || op.kind == OpKind::recv_gradient) {
          auto& q = channels[{op.kind == OpKind::recv_gradient, op.chunk}];
          if (q.empty()) break;                    // wait for the sender
          CHEAP_CHECK(q.front().step == op.step);  // the channel's next message is this receive's
          CHEAP_CHECK(q.front().microbatch == op.microbatch);
          start = std::max(start, q.front().at);
          q.pop_front();
        }
        clock[p] = start + t.of(op);
        if (op.kind == OpKind::send_activation || op.kind == OpKind::send_gradient) {
          const int64_t to = op.chunk + (op.kind == OpKind::send_activation ? 1 : -1);
          const bool local = schemas::chunk_position(kind, depth, to) == static_cast<int64_t>(p);
          channels[{op.kind == OpKind::send_gradient, to}].push_back(
              {op.step, op.microbatch, clock[p] + (local ? 0 : t.latency)});
        }
        if (op.kind == OpKind::update) r.updates[p].push_back(clock[p]);
      }
  }
  r.finished = true;
  for (size_t p = 0; p < n; ++p) r.finished = r.finished && next[p] == all[p].size();
  for (const auto& [channel, q] : channels) r.finished = r.finished && q.empty();
  return r;
}

}  // namespace pd2bw::testing
