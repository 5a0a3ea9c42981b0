// Finds and loads the plugins (plugin_abi.hpp). The backend and transport registries are its only
// callers; they say which plugins this build made.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "plugin/plugin_abi.hpp"

namespace pd2bw::executor::plugin {

// The plugin `name` ("cuda", "mpi" or "nccl"), loaded on first use (later calls return the same table).
// The entry point linked into this executable when there is one (tests); otherwise libpd2bw_<name>.so,
// searched in each folder of $PD2BW_PLUGIN_PATH (colon-separated), then beside the executable, then in
// ../lib/pd2bw/ beside it. Throws UsageError naming the file, the loader's reason (dlerror, e.g. a CUDA
// library it needs is missing) or the ABI mismatch, and how to get a working one.
const CudaPlugin& cuda();
const MpiPlugin& mpi();
const NcclPlugin& nccl();

// The cuda plugin when it is already loaded (device memory exists only then), else nullptr. Loads nothing.
const CudaPlugin* cuda_if_loaded();

}  // namespace pd2bw::executor::plugin

namespace pd2bw::executor {

// The Comm of device transport `transport` ("nccl") over the MPI communicator at `mpi_comm` (an
// MPI_Comm*) on CUDA device `device`. Defined by the transport registry (runtime/transports.cpp); the mpi
// plugin's mpi::make_device_comm calls it. Throws UsageError when this build lacks the transport or its
// plugin cannot be loaded.
std::unique_ptr<Comm> make_device_comm(std::string_view transport, const void* mpi_comm, int64_t device);

}  // namespace pd2bw::executor
