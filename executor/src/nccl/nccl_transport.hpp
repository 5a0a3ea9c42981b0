// The nccl transport's factory (private to the executor; the transport registry calls it).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>

#include "pd2bw/executor/comm.hpp"

namespace pd2bw::executor::nccl {

// A Comm over `world` on CUDA device `device` of this node (set as the process's current device).
// Throws UsageError when there is no such device, Error when CUDA or NCCL fail.
std::unique_ptr<Comm> make_comm(MPI_Comm world, int64_t device);

}  // namespace pd2bw::executor::nccl
