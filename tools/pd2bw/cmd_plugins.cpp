// `pd2bw plugins`: loads each plugin of this build (the cuda backend, the mpi and nccl transports) as a
// run would, and says which can be used and why not; and the cheap plugin lines of `pd2bw --version`.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>

#include "cli.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/plugins.hpp"

namespace pd2bw::cli {

namespace {

std::string status_line(const executor::PluginStatus& s) {
  if (s.path.empty())
    return fmt::format("plugin {}: not found (looked in {})", s.name, fmt::join(executor::plugin_search_path(), ", "));
  if (!s.problem.empty()) return fmt::format("plugin {}: {} (unusable: {})", s.name, s.path, s.problem);
  return fmt::format("plugin {}: {}", s.name, s.path);
}

}  // namespace

std::string plugin_lines() {
  std::string out;
  for (const executor::PluginStatus& s : executor::plugin_status(false)) out += "\n" + status_line(s);
  return out;
}

void add_plugins_command(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "plugins", "Load each plugin of this build (the cuda backend, the mpi and nccl transports) as a run would, "
                 "and say which can be used here and why not (pd2bw --version only finds the files)");
  cmd->callback([&run] { run = [] {
    int unusable = 0;
    const auto all = executor::plugin_status(true);
    for (const executor::PluginStatus& s : all) {
      fmt::print("{}{}\n", status_line(s), s.problem.empty() ? ": loads" : "");
      if (!s.problem.empty()) ++unusable;
    }
    if (all.empty()) fmt::print("this build has no plugins (no CUDA, MPI or NCCL was found when it was configured)\n");
    if (unusable > 0)
      throw Error(fmt::format("{} of {} plugins cannot be used here", unusable, all.size()),
                  "see each plugin's line above; PD2BW_PLUGIN_PATH names more folders to search");
  }; });
}

}  // namespace pd2bw::cli
