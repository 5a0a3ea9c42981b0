// The transport registry: the one place that knows whether this build has MPI and NCCL, and how a
// launcher is recognised from the environment it gives its processes. The mpi transport (with MPI's
// process group) and the nccl transport are plugins (libpd2bw_mpi.so, libpd2bw_nccl.so,
// plugin/loader.hpp) that this build makes under PD2BW_HAVE_MPI and PD2BW_HAVE_NCCL, loaded on first use.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/process_group.hpp"

#include "plugin/loader.hpp"

namespace pd2bw::executor {

namespace {

// The value of an environment variable holding a whole number, or -1 when unset or not a number.
int64_t env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  return *end == '\0' && v >= 0 ? static_cast<int64_t>(v) : -1;
}

}  // namespace

LaunchEnvironment detect_launch_environment() {
  // Each launcher's (size, rank) pair; OpenMPI's first, since mpirun under Slurm sets both.
  struct Known {
    const char* launcher;
    const char* size;
    const char* rank;
  };
  constexpr Known kKnown[] = {
      {"mpirun (Open MPI)", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
      {"a PMI launcher", "PMI_SIZE", "PMI_RANK"},
      {"srun (Slurm)", "SLURM_NTASKS", "SLURM_PROCID"},
  };
  for (const Known& k : kKnown) {
    const int64_t size = env_int(k.size), rank = env_int(k.rank);
    if (size >= 1 && rank >= 0 && rank < size) return {k.launcher, size, rank};
  }
  return {};
}

std::vector<std::string> transport_names() {
  std::vector<std::string> names{"threads"};
#if PD2BW_HAVE_MPI
  names.emplace_back("mpi");
#if PD2BW_HAVE_NCCL
  names.emplace_back("nccl");
#endif
#endif
  return names;
}

bool transport_built(std::string_view name) {
  const auto names = transport_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::unique_ptr<ProcessGroup> join_process_group() {
#if PD2BW_HAVE_MPI
  return plugin::mpi().join();
#else
  const LaunchEnvironment env = detect_launch_environment();
  throw UsageError(
      env.launcher.empty() ? std::string("this pd2bw was built without MPI, so it cannot join a multi-process job")
                           : fmt::format("this pd2bw was built without MPI, but {} started it as one of {} processes",
                                         env.launcher, env.world_size),
      "install OpenMPI (tools/setup installs libopenmpi-dev) and rebuild (PD2BW_MPI=AUTO finds it); or run "
      "without mpirun: the plan's ranks then run as threads of one process");
#endif
}

std::unique_ptr<Comm> make_device_comm(std::string_view transport, [[maybe_unused]] const void* mpi_comm,
                                       [[maybe_unused]] int64_t device) {
#if PD2BW_HAVE_NCCL
  if (transport == "nccl") return plugin::nccl().make_comm(mpi_comm, device);
#endif
  throw UsageError(fmt::format("no device transport named '{}' in this build", transport),
                   fmt::format("this build has: {}", fmt::join(transport_names(), ", ")));
}

}  // namespace pd2bw::executor
