// The plugin interface (private to the executor): the cuda backend, the mpi transport (with the process
// group of multi-process jobs) and the nccl transport are shared libraries of their own
// (libpd2bw_cuda.so, libpd2bw_mpi.so, libpd2bw_nccl.so), so that pd2bw links none of CUDA, MPI or NCCL
// and maps them only for a run that asks for them. Each plugin exports one `extern "C"` entry point that
// returns its table of plain function pointers; the table's first member is the ABI version it was built
// with, which the loader checks before it reads anything else.
//
// The plugins are built from the same source tree as the executable and resolve the executor's own
// symbols (Backend, Comm, UsageError, ...) against it, so the tables may carry C++ types. Bump
// kAbiVersion whenever a table, or any type a plugin shares with the executable, changes layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/device_transfer.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/comm.hpp"
#include "pd2bw/executor/device.hpp"
#include "pd2bw/executor/process_group.hpp"

namespace pd2bw::executor::plugin {

inline constexpr int kAbiVersion = 1;

// libpd2bw_cuda.so: the cuda backend (the functions of cuda/cuda_factory.hpp).
struct CudaPlugin {
  int abi_version;
  std::unique_ptr<Backend> (*make_backend)();
  bool (*device_available)(std::string* why);
  void (*select_device)(int64_t index);
  DeviceInfo (*device_info)();
  CopyBandwidth (*copy_bandwidth)(int64_t bytes, int reps);
  DeviceTransfer* (*device_transfer)();
};

// libpd2bw_mpi.so: MPI's process group (initialises MPI; its comms are the mpi transport).
struct MpiPlugin {
  int abi_version;
  std::unique_ptr<ProcessGroup> (*join)();
};

// libpd2bw_nccl.so: the nccl transport. `mpi_comm` points at the MPI_Comm the communicator bootstraps
// over (a pointer, so that no MPI type crosses the table).
struct NcclPlugin {
  int abi_version;
  std::unique_ptr<Comm> (*make_comm)(const void* mpi_comm, int64_t device);
};

}  // namespace pd2bw::executor::plugin

// The entry points, one per plugin. A test executable that links a plugin's objects directly defines
// its entry point itself, and the loader then uses it without loading a file.
extern "C" {
const pd2bw::executor::plugin::CudaPlugin* pd2bw_cuda_plugin();
const pd2bw::executor::plugin::MpiPlugin* pd2bw_mpi_plugin();
const pd2bw::executor::plugin::NcclPlugin* pd2bw_nccl_plugin();
}
