// The links between the processes of a multi-process job: the "node" level between the processes that
// share node 0, the "cluster" level between nodes (one process each). Processes a measurement does not
// involve wait at the group's barrier, which sleeps, so they leave the cores to the ones measuring.
#include <fmt/format.h>

#include <algorithm>

#include "measure.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::profiler::detail {

namespace {

// Small messages are cheap and noisy, so they get more round trips.
int64_t reps_for(const ProfileOptions& o, int64_t bytes) { return bytes < (int64_t{1} << 20) ? 4 * o.iters : o.iters; }

struct Levels {
  std::vector<int64_t> node0;  // ranks on node 0
  std::vector<int64_t> heads;  // the lowest rank of every node
};

Levels levels_of(const executor::ProcessGroup& g) {
  Levels l;
  const auto node_of = g.node_of_ranks();
  for (size_t r = 0; r < node_of.size(); ++r) {
    if (node_of[r] == 0) l.node0.push_back(static_cast<int64_t>(r));
    if (std::find(node_of.begin(), node_of.begin() + static_cast<std::ptrdiff_t>(r), node_of[r]) ==
        node_of.begin() + static_cast<std::ptrdiff_t>(r))
      l.heads.push_back(static_cast<int64_t>(r));
  }
  return l;
}

schemas::LinkLevel measure_level(const std::string& name, const std::vector<int64_t>& members, const ProfileOptions& o,
                                 executor::Comm& comm, executor::ProcessGroup& g,
                                 const std::function<void(const std::string&)>& step) {
  schemas::LinkLevel level;
  level.level = name;
  level.allreduce_ranks = static_cast<int64_t>(members.size());
  const bool member = std::find(members.begin(), members.end(), comm.rank()) != members.end();
  const executor::Group group = member ? comm.group(members) : executor::Group();
  const int64_t first = members[0], second = members[1];
  for (const int64_t bytes : link_message_sizes(o)) {
    step(fmt::format("{} p2p {}", name, schemas::format_bytes(bytes)));
    if (comm.rank() == first || comm.rank() == second) {
      const double ms = p2p_ms_on(comm, first, second, bytes, reps_for(o, bytes));
      level.p2p_curve.push_back({bytes, ms});
    }
    g.barrier();
  }
  for (const int64_t bytes : link_message_sizes(o)) {
    step(fmt::format("{} allreduce {}", name, schemas::format_bytes(bytes)));
    if (member) level.allreduce_curve.push_back({bytes, allreduce_ms_on(comm, group, bytes, reps_for(o, bytes))});
    g.barrier();
  }
  if (comm.rank() == first) derive_link_scalars(level);
  return level;
}

}  // namespace

int64_t process_link_measurements(const ProfileOptions& o, const executor::ProcessGroup& g) {
  const Levels l = levels_of(g);
  const int64_t levels = (l.node0.size() >= 2 ? 1 : 0) + (l.heads.size() >= 2 ? 1 : 0);
  return levels * 2 * static_cast<int64_t>(link_message_sizes(o).size());
}

std::vector<schemas::LinkLevel> measure_process_links(const ProfileOptions& o, executor::ProcessGroup& g,
                                                      const std::function<void(const std::string&)>& step) {
  const Levels l = levels_of(g);
  const auto comm = g.make_comm("mpi", 0);
  std::vector<schemas::LinkLevel> out;
  if (l.node0.size() >= 2) out.push_back(measure_level("node", l.node0, o, *comm, g, step));
  if (l.heads.size() >= 2) out.push_back(measure_level("cluster", l.heads, o, *comm, g, step));
  return out;
}

}  // namespace pd2bw::profiler::detail
