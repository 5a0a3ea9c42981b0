// The entry point of libpd2bw_nccl.so: the nccl transport (nccl/comm_nccl.cpp).
#include <mpi.h>

#include "nccl/nccl_transport.hpp"
#include "plugin/plugin_abi.hpp"

namespace pd2bw::executor::plugin {
namespace {

const NcclPlugin kNccl{kAbiVersion, [](const void* mpi_comm, int64_t device) {
                         return nccl::make_comm(*static_cast<const MPI_Comm*>(mpi_comm), device);
                       }};

}  // namespace
}  // namespace pd2bw::executor::plugin

extern "C" const pd2bw::executor::plugin::NcclPlugin* pd2bw_nccl_plugin() { return &pd2bw::executor::plugin::kNccl; }
