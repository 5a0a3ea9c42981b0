// Checks shared by the schedule generator's tests.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "pd2bw/planner/schedule.hpp"

namespace pd2bw::testing {

// Pairs every send of stage i with the receive of stage i + 1 (activations) or i - 1 (gradients), in
// order: the (step, microbatch) tags must agree. `all` holds every stage's ops, stage by stage.
inline void check_pairing(const std::vector<std::vector<pd2bw::planner::Op>>& all) {
  using pd2bw::planner::OpKind;
  using Key = std::pair<int64_t, int64_t>;  // (step, microbatch)
  for (size_t i = 0; i + 1 < all.size(); ++i) {
    std::vector<Key> sent_act, recv_act, sent_grad, recv_grad;
    for (const auto& op : all[i]) {
      if (op.kind == OpKind::send_activation) sent_act.push_back({op.step, op.microbatch});
      if (op.kind == OpKind::recv_gradient) recv_grad.push_back({op.step, op.microbatch});
    }
    for (const auto& op : all[i + 1]) {
      if (op.kind == OpKind::recv_activation) recv_act.push_back({op.step, op.microbatch});
      if (op.kind == OpKind::send_gradient) sent_grad.push_back({op.step, op.microbatch});
    }
    CHECK(sent_act == recv_act);
    CHECK(sent_grad == recv_grad);
  }
}

}  // namespace pd2bw::testing
