// The entry point of libpd2bw_mpi.so: MPI's process group (mpi/mpi_process_group.cpp).
#include "mpi/mpi_internal.hpp"
#include "plugin/plugin_abi.hpp"

namespace pd2bw::executor::plugin {
namespace {

const MpiPlugin kMpi{kAbiVersion, [] { return mpi::join(); }};

}  // namespace
}  // namespace pd2bw::executor::plugin

extern "C" const pd2bw::executor::plugin::MpiPlugin* pd2bw_mpi_plugin() { return &pd2bw::executor::plugin::kMpi; }
