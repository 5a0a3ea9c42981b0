// The entry point of libpd2bw_cuda.so: the cuda backend's table (cuda/cuda_factory.hpp).
#include "cuda/cuda_factory.hpp"
#include "plugin/plugin_abi.hpp"

namespace pd2bw::executor::plugin {
namespace {

const CudaPlugin kCuda{
    kAbiVersion,
    [] { return cuda::make_cuda_backend(); },
    [](std::string* why) { return cuda::cuda_device_available(why); },
    [](int64_t index) { cuda::cuda_select_device(index); },
    [] { return cuda::cuda_device_info(); },
    [](int64_t bytes, int reps) { return cuda::cuda_copy_bandwidth(bytes, reps); },
    []() -> DeviceTransfer* { return &cuda::cuda_device_transfer(); },
};

}  // namespace
}  // namespace pd2bw::executor::plugin

extern "C" const pd2bw::executor::plugin::CudaPlugin* pd2bw_cuda_plugin() { return &pd2bw::executor::plugin::kCuda; }
