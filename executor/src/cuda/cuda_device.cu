// The registry's entry points into the CUDA backend (cuda_factory.hpp): making a backend, whether a
// device is visible, and what the device is.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_factory.hpp"

namespace pd2bw::executor::cuda {

namespace {

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// The kernel module's version ("580.159.04") from /proc/driver/nvidia/version, else the CUDA version
// the driver supports.
std::string driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word, previous;
    while (words >> word) {
      if (previous == "Module" && !word.empty() && word[0] >= '0' && word[0] <= '9') return word;
      previous = word;
    }
  }
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return "CUDA " + version_text(v) + " driver";
}

}  // namespace

bool cuda_device_available(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0) return true;
  (void)cudaGetLastError();
  if (why)
    *why = std::string("no CUDA device: ") + (status != cudaSuccess ? cudaGetErrorString(status) : "the driver sees none");
  return false;
}

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

void cuda_select_device(int64_t index) {
  std::string why;
  if (!cuda_device_available(&why))
    throw UsageError(why, "run on a machine with an NVIDIA GPU and its driver, or use --device cpu");
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (index < 0 || index >= count)
    throw UsageError("the plan puts this rank on GPU " + std::to_string(index) + ", but this node has " +
                         std::to_string(count) + " GPU(s)",
                     "plan with --gpus-per-node at most the GPUs each node has");
  check(cudaSetDevice(static_cast<int>(index)), "cudaSetDevice");
}

DeviceInfo cuda_device_info() {
  std::string why;
  if (!cuda_device_available(&why))
    throw UsageError(why, "run on a machine with an NVIDIA GPU and its driver, or use --device cpu");
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int runtime = 0;
  check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  DeviceInfo d;
  d.backend = "cuda";
  d.name = prop.name;
  d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  d.driver_version = driver_version();
  d.runtime_version = version_text(runtime);
  d.compute_capability = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  d.multiprocessors = prop.multiProcessorCount;
  d.peak_bf16_tflops = peak_tflops(d.name, "bf16");
  d.peak_fp32_tflops = peak_tflops(d.name, "fp32");
  return d;
}

namespace {

// Median ms of `reps` runs of copy() on `stream`, timed with events after one untimed run.
template <typename F>
double median_copy_ms(cudaStream_t stream, int reps, F&& copy) {
  EventHandle start = make_event(true), stop = make_event(true);
  copy();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(start.get(), stream), "cudaEventRecord");
    copy();
    check(cudaEventRecord(stop.get(), stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop.get()), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, start.get(), stop.get()), "cudaEventElapsedTime");
    ms.push_back(static_cast<double>(t));
  }
  std::sort(ms.begin(), ms.end());
  return std::max(1e-6, ms[ms.size() / 2]);
}

}  // namespace

CopyBandwidth cuda_copy_bandwidth(int64_t bytes, int reps) {
  std::string why;
  if (!cuda_device_available(&why)) throw UsageError(why);
  if (bytes <= 0 || reps <= 0) throw UsageError("copy bandwidth: bytes and repetitions must be > 0");
  const auto n = static_cast<size_t>(bytes);
  StreamHandle stream = make_stream();
  DeviceMemory a = device_alloc(n, "cudaMalloc (copy bandwidth)"), b = device_alloc(n, "cudaMalloc (copy bandwidth)");
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, n), "cudaMallocHost (copy bandwidth)");
  PinnedMemory host(pinned);
  check(cudaMemsetAsync(a.get(), 0, n, stream.get()), "cudaMemsetAsync");
  std::memset(pinned, 0, n);
  const double d2d = median_copy_ms(stream.get(), reps, [&] {
    check(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice, stream.get()), "cudaMemcpyAsync");
  });
  const double h2d = median_copy_ms(stream.get(), reps, [&] {
    check(cudaMemcpyAsync(a.get(), pinned, n, cudaMemcpyHostToDevice, stream.get()), "cudaMemcpyAsync");
  });
  return {static_cast<double>(bytes) / (d2d * 1e-3) / 1e9, static_cast<double>(bytes) / (h2d * 1e-3) / 1e9};
}

}  // namespace pd2bw::executor::cuda
