// The nccl transport's factory and its one-GPU self check (private to the executor; the transport
// registry and the GPU test call them).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>

#include "pd2bw/executor/comm.hpp"

namespace pd2bw::executor::nccl {

// A Comm over `world` on CUDA device `device` of this node (set as the process's current device).
// Throws UsageError when there is no such device, Error when CUDA or NCCL fail.
std::unique_ptr<Comm> make_comm(MPI_Comm world, int64_t device);

// On GPU `device`, without MPI: an allreduce over a communicator of one rank, and a grouped send and
// receive of that rank to itself; checks the values that come back. Throws Error naming what failed.
// (NCCL cannot place two ranks of one communicator on one GPU, so this is what one GPU can check.)
void self_check(int64_t device);

}  // namespace pd2bw::executor::nccl
