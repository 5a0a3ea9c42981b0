// What the registry needs from the CUDA backend, in plain C++ types: the cuda plugin's entry point
// (plugin/cuda_entry.cpp, compiled by the host compiler) puts these in the table the registry calls
// through, and never includes a CUDA header.
#pragma once

#include <memory>
#include <string>

#include "backend/device_transfer.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/device.hpp"

namespace pd2bw::executor::cuda {

// A cuda backend on the current device. Throws UsageError("no CUDA device: ...") when none is visible.
std::unique_ptr<Backend> make_cuda_backend();
// Whether a CUDA device is visible; *why says why not.
bool cuda_device_available(std::string* why);
// select_device (device.hpp) for the cuda backend.
void cuda_select_device(int64_t index);
// The current device. Throws like make_cuda_backend.
DeviceInfo cuda_device_info();
// measure_copy_bandwidth (device.hpp) on the current device.
CopyBandwidth cuda_copy_bandwidth(int64_t bytes, int reps);
// The process-wide device transfer of the threads transport.
DeviceTransfer& cuda_device_transfer();

}  // namespace pd2bw::executor::cuda
