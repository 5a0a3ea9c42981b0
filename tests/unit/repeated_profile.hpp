// Test helper: an example profile with its block repeated, as tools/bench-planner builds its profiles.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::testing {

// schemas/examples/<name>.profile.json with its block (layer 1) repeated to `layers` layers, its
// embedding and head kept: every layer but the first and the last is alike.
inline planner::Profile repeated_profile(const std::string& name, int64_t layers) {
  std::ifstream f(std::string(PD2BW_SOURCE_DIR) + "/schemas/examples/" + name + ".profile.json");
  std::stringstream s;
  s << f.rdbuf();
  planner::Profile p = schemas::parse_profile(s.str());
  const auto embed = p.layers.front(), block = p.layers[1], head = p.layers.back();
  p.layers.assign(1, embed);
  for (int64_t i = 0; i + 2 < layers; ++i) {
    p.layers.push_back(block);
    p.layers.back().name = "block." + std::to_string(i);
  }
  p.layers.push_back(head);
  p.model.blocks = layers - 2;
  return p;
}

// One node of eight devices of `gib` GiB each.
inline planner::Cluster one_node(int64_t gib = 80) {
  planner::Cluster c;
  c.device = {"NVIDIA H200", gib << 30};
  c.levels.push_back({"node", 8, 300.0, 0.005, 300.0});
  return c;
}

}  // namespace pd2bw::testing
