// The devices a backend runs on, as plain data: whether a backend can run on this machine, what the
// device is (for the profile's provenance and the trainer's MFU), and the peak rates MFU is taken
// against. No CUDA type appears here; the registry answers for the backends this build has.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pd2bw::executor {

struct DeviceInfo {
  std::string backend;             // "cpu" or "cuda"
  std::string name;                // e.g. "NVIDIA H200" or "cpu"
  int64_t memory_bytes = 0;        // total memory of the device (cpu: physical memory)
  std::string driver_version;      // e.g. "580.159.04" (empty for the cpu)
  std::string runtime_version;     // the CUDA runtime this build runs on, e.g. "13.0" (empty for the cpu)
  std::string compute_capability;  // e.g. "9.0" (empty for the cpu)
  int64_t multiprocessors = 0;     // streaming multiprocessors (cpu: online cores)
  // Dense peak rates in TFLOP/s from a small table of known devices (0 when the device is not in it):
  // tensor-core bf16 and plain fp32.
  double peak_bf16_tflops = 0;
  double peak_fp32_tflops = 0;
};

// Whether `backend` can make buffers on this machine: "cpu" always; "cuda" when this build has the CUDA
// backend and a device is visible. When not, *why (if given) says why, e.g. "no CUDA device: ...".
// Asking about "cuda" loads its plugin; throws UsageError (the file, the loader's reason, how to get a
// working one) when that cannot be loaded.
bool backend_available(std::string_view backend, std::string* why = nullptr);

// The device `backend` runs on (cuda: the current device). Throws UsageError naming the backends built
// for an unknown name, or "no CUDA device: ..." when the cuda backend cannot run here.
DeviceInfo device_info(std::string_view backend);

// Makes device `index` of this node the one `backend` runs on from now on in this process (cuda: the
// current device; the cpu has one device, 0). Throws UsageError when there is no such device.
void select_device(std::string_view backend, int64_t index);

// Copy bandwidths of the device `backend` runs on, in GB/s (1e9 bytes/s): a device-to-device copy of
// `bytes` (bytes copied per second; each is read once and written once) and a copy of `bytes` from
// page-locked host memory, each the median of `reps` copies timed with events. Throws UsageError for a
// backend without a device (the cpu) or when none is visible, Error when the memory cannot be had.
struct CopyBandwidth {
  double device_to_device_gbps = 0;
  double host_to_device_gbps = 0;
};
CopyBandwidth measure_copy_bandwidth(std::string_view backend, int64_t bytes, int reps);

// The dense peak of a device name and compute dtype ("bf16" or "fp32") in TFLOP/s from the table, or 0.
double peak_tflops(std::string_view device_name, std::string_view dtype);

}  // namespace pd2bw::executor
