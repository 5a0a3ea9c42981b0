// A plugin built for another plugin ABI version than pd2bw's (every entry point of the three plugins):
// tests/cli/plugins.sh copies it in as libpd2bw_<name>.so and expects the loader to refuse it by its
// version, before it reads any other member of the table.
#include "plugin/plugin_abi.hpp"

namespace {
const int kOtherVersion = pd2bw::executor::plugin::kAbiVersion + 1;
}

extern "C" {
const pd2bw::executor::plugin::CudaPlugin* pd2bw_cuda_plugin() {
  static const pd2bw::executor::plugin::CudaPlugin table{kOtherVersion, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
  return &table;
}
const pd2bw::executor::plugin::MpiPlugin* pd2bw_mpi_plugin() {
  static const pd2bw::executor::plugin::MpiPlugin table{kOtherVersion, nullptr};
  return &table;
}
const pd2bw::executor::plugin::NcclPlugin* pd2bw_nccl_plugin() {
  static const pd2bw::executor::plugin::NcclPlugin table{kOtherVersion, nullptr};
  return &table;
}
}
