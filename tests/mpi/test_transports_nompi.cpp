// The transport registry as a build without MPI compiles it (PD2BW_HAVE_MPI=0): only `threads`, and a
// clear error naming the launcher when a job of several processes is joined.
#include <doctest/doctest.h>

#include <cstdlib>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/process_group.hpp"

namespace ex = pd2bw::executor;

TEST_CASE("without MPI the build has the threads transport only") {
  CHECK(ex::transport_names() == std::vector<std::string>{"threads"});
  CHECK(ex::transport_built("threads"));
  CHECK_FALSE(ex::transport_built("mpi"));
  CHECK_FALSE(ex::transport_built("nccl"));
}

TEST_CASE("joining a job without MPI says so, names the launcher and how to get MPI") {
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  const ex::LaunchEnvironment env = ex::detect_launch_environment();
  CHECK(env.launcher == "mpirun (Open MPI)");
  CHECK(env.world_size == 4);
  CHECK(env.world_rank == 2);
  try {
    (void)ex::join_process_group();
    FAIL("join_process_group did not throw");
  } catch (const pd2bw::UsageError& e) {
    CHECK(std::string(e.what()) == "this pd2bw was built without MPI, but mpirun (Open MPI) started it as one of 4 processes");
    CHECK(std::string(e.hint()).find("libopenmpi-dev") != std::string::npos);
  }
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_RANK");
}

TEST_CASE("launchers are recognised from their environment, and nonsense is not a launcher") {
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_RANK");
  CHECK(ex::detect_launch_environment().launcher.empty());
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_PROCID", "7", 1);
  CHECK(ex::detect_launch_environment().launcher == "srun (Slurm)");
  CHECK(ex::detect_launch_environment().world_size == 8);
  setenv("SLURM_PROCID", "8", 1);  // a rank outside the job
  CHECK(ex::detect_launch_environment().launcher.empty());
  setenv("SLURM_PROCID", "x", 1);
  CHECK(ex::detect_launch_environment().launcher.empty());
  unsetenv("SLURM_NTASKS");
  unsetenv("SLURM_PROCID");
  setenv("PMI_SIZE", "2", 1);
  setenv("PMI_RANK", "0", 1);
  CHECK(ex::detect_launch_environment().launcher == "a PMI launcher");
  unsetenv("PMI_SIZE");
  unsetenv("PMI_RANK");
}
