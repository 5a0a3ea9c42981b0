// The backend registry: the one place that knows which backends this build has. The CUDA backend is a
// plugin (libpd2bw_cuda.so, plugin/loader.hpp) that this build makes under PD2BW_HAVE_CUDA; its factory,
// device queries and device transfer are reached through the plugin's table, loaded on first use.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <mutex>
#include <utility>

#include "backend/device_transfer.hpp"
#include "cpu/cpu_backend.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/device.hpp"
#include "plugin/loader.hpp"

namespace pd2bw::executor {

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::pair<std::string, BackendFactory>> entries;
  Registry() {
    entries.emplace_back("cpu", [] { return std::make_unique<cpu::CpuBackend>(); });
#if PD2BW_HAVE_CUDA
    entries.emplace_back("cuda", [] { return plugin::cuda().make_backend(); });
#endif
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::unique_ptr<Backend> make_backend(std::string_view name) {
  Registry& r = registry();
  BackendFactory factory;
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& [n, f] : r.entries)
      if (n == name) factory = f;
  }
  if (!factory)
    throw UsageError(fmt::format("no backend named '{}'; this build has: {}", name, fmt::join(backend_names(), ", ")));
  return factory();
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [n, f] : r.entries) names.push_back(n);
  return names;
}

void register_backend(const std::string& name, BackendFactory factory) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& [n, f] : r.entries)
    if (n == name) throw UsageError(fmt::format("a backend named '{}' is already registered", name));
  r.entries.emplace_back(name, std::move(factory));
}

Backend& default_backend() {
  static cpu::CpuBackend backend("cpu");
  return backend;
}

// Device memory exists only once the cuda backend's plugin is loaded: until then there is nothing to move.
DeviceTransfer* device_transfer() {
  const plugin::CudaPlugin* cuda = plugin::cuda_if_loaded();
  return cuda ? cuda->device_transfer() : nullptr;
}

bool backend_available(std::string_view backend, std::string* why) {
  if (backend == "cpu") return true;
#if PD2BW_HAVE_CUDA
  if (backend == "cuda") return plugin::cuda().device_available(why);
#endif
  if (why) *why = fmt::format("this build has no backend named '{}' (it has: {})", backend, fmt::join(backend_names(), ", "));
  return false;
}

void select_device(std::string_view backend, [[maybe_unused]] int64_t index) {
  if (backend == "cpu") {
    if (index != 0) throw UsageError(fmt::format("the cpu backend has one device, 0; asked for {}", index));
    return;
  }
#if PD2BW_HAVE_CUDA
  if (backend == "cuda") return plugin::cuda().select_device(index);
#endif
  throw UsageError(fmt::format("no backend named '{}'; this build has: {}", backend, fmt::join(backend_names(), ", ")));
}

CopyBandwidth measure_copy_bandwidth(std::string_view backend, [[maybe_unused]] int64_t bytes, [[maybe_unused]] int reps) {
#if PD2BW_HAVE_CUDA
  if (backend == "cuda") return plugin::cuda().copy_bandwidth(bytes, reps);
#endif
  throw UsageError(fmt::format("no device copies to measure for the '{}' backend", backend));
}

DeviceInfo device_info(std::string_view backend) {
  if (backend == "cpu") {
    DeviceInfo d;
    d.backend = "cpu";
    d.name = "cpu";
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE), cores = sysconf(_SC_NPROCESSORS_ONLN);
    d.memory_bytes = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
    d.multiprocessors = cores > 0 ? cores : 1;
    return d;
  }
#if PD2BW_HAVE_CUDA
  if (backend == "cuda") return plugin::cuda().device_info();
#endif
  throw UsageError(fmt::format("no backend named '{}'; this build has: {}", backend, fmt::join(backend_names(), ", ")));
}

std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::bf16: return "bf16";
    case DType::i32: return "int32";
  }
  return "?";
}

DType parse_compute_dtype(std::string_view name) {
  if (name == "float" || name == "fp32" || name == "f32") return DType::f32;
  if (name == "double" || name == "fp64" || name == "f64") return DType::f64;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  throw UsageError(fmt::format("unknown dtype '{}'", name), "use float, double or bf16");
}

}  // namespace pd2bw::executor
