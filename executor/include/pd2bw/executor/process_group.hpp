// How this process takes part in a job: alone (a plan's ranks are then threads of this process), or as
// one of several processes that a launcher (OpenMPI's mpirun, Slurm's srun, any PMI launcher) started,
// one rank each. The launcher is recognised from its environment variables; joining its job initialises
// MPI. The transports built are listed by transport_names(); the `mpi` one and the process group exist
// only in builds with MPI (PD2BW_HAVE_MPI), and `nccl` only with CUDA and NCCL as well; each lives in
// a plugin (libpd2bw_mpi.so, libpd2bw_nccl.so) that is loaded when a job is joined or the transport made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pd2bw/executor/comm.hpp"

namespace pd2bw::executor {

// What the environment of this process says about a launcher (no MPI call is made).
struct LaunchEnvironment {
  std::string launcher;    // empty when none; else e.g. "mpirun (Open MPI)", "srun (Slurm)", "a PMI launcher"
  int64_t world_size = 1;  // processes the launcher started (1 when none)
  int64_t world_rank = 0;  // this process among them
};
LaunchEnvironment detect_launch_environment();

// The transports this build can run: "threads" always, then "mpi" and "nccl" where built.
std::vector<std::string> transport_names();
bool transport_built(std::string_view name);

// This process's membership in a job of several processes. One per process: join_process_group()
// initialises MPI and the destructor finalises it (call it on every process, after every Comm made
// from the group is gone). Waiting calls poll and sleep in between, so processes that share cores with
// busy peers leave them the CPU.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int64_t rank() const = 0;  // this process, in [0, size())
  virtual int64_t size() const = 0;  // processes in the job
  // Nodes are the hosts of the job: processes that share memory (MPI's shared-memory split), numbered
  // 0, 1, ... in the order of their lowest rank. PD2BW_RANKS_PER_NODE=K (for tests on one host)
  // instead makes every K consecutive ranks a node of their own.
  virtual int64_t node() const = 0;        // this process's node
  virtual int64_t nodes() const = 0;       // nodes in the job
  virtual int64_t node_rank() const = 0;   // this process's index among the processes of its node
  virtual std::vector<int64_t> node_of_ranks() const = 0;  // node of every rank, by rank
  virtual std::string host() const = 0;    // this process's host name
  // A Comm over every process of the job (Comm::rank() == rank()). `transport` is "mpi" (host memory),
  // or "nccl" (device memory on CUDA device `device` of this node; host messages go over MPI). Throws
  // UsageError for a transport this build lacks.
  virtual std::unique_ptr<Comm> make_comm(std::string_view transport, int64_t device) = 0;
  // True on every process when `ok` is true on every process; collective (every process calls it
  // the same number of times). Lets processes that checked their inputs apart agree before they start.
  virtual bool all_agree(bool ok) = 0;
  // Waits until every process arrives; collective.
  virtual void barrier() = 0;
  // Ends every process of the job now with `exit_code` (for a failure the other processes cannot know
  // of: they would otherwise wait for this one forever). Does not return.
  [[noreturn]] void abort(int exit_code) {
    end_job(exit_code);
    std::_Exit(exit_code);  // end_job does not return; this is the promise made to the compiler
  }

 protected:
  virtual void end_job(int exit_code) = 0;
};

// Joins the launcher's job. Throws UsageError when this build has no MPI or its mpi plugin cannot be
// loaded (saying which file, why and how to get it), Error when MPI cannot start.
std::unique_ptr<ProcessGroup> join_process_group();

}  // namespace pd2bw::executor
