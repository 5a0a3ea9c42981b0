// The plugin loader: finds libpd2bw_<name>.so on the search path, loads it with dlopen, checks its ABI
// version, and turns every failure into a UsageError that says what to do.
#include "plugin/loader.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/plugins.hpp"
#include "pd2bw/executor/process_group.hpp"

// Defined only where a plugin's objects are linked into the executable (tests); null elsewhere.
#pragma weak pd2bw_cuda_plugin
#pragma weak pd2bw_mpi_plugin
#pragma weak pd2bw_nccl_plugin

namespace pd2bw::executor {

namespace plugin {

namespace {

struct Kind {
  const char* name;
  const char* what;  // for messages
  const char* hint;  // how to get a plugin that loads
};

constexpr Kind kKinds[] = {
    {"cuda", "the cuda backend",
     "the cuda backend needs an NVIDIA driver and the CUDA 13 runtime, cuBLAS and cuBLASLt on the loader's path "
     "(install the CUDA toolkit, or add the folders tools/cuda-libs prints to LD_LIBRARY_PATH); it is built by the "
     "default preset on a machine with the toolkit (cmake --preset default); or run with --device cpu"},
    {"mpi", "the mpi transport",
     "the mpi transport needs OpenMPI (tools/setup installs libopenmpi-dev) and is built by the default preset "
     "(cmake --preset default); or run without mpirun: the plan's ranks then run as threads of one process"},
    {"nccl", "the nccl transport",
     "the nccl transport needs NCCL, the CUDA runtime and OpenMPI on the loader's path (install them, or add the "
     "folders tools/cuda-libs prints to LD_LIBRARY_PATH) and is built by the default preset; or pass "
     "--transport mpi"},
};

const Kind& kind(std::string_view name) {
  for (const Kind& k : kKinds)
    if (name == k.name) return k;
  throw Error(fmt::format("internal error: no plugin named '{}'", name));
}

std::string file_name(std::string_view name) { return fmt::format("libpd2bw_{}.so", name); }

std::string executable_dir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  std::string path(buf, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash == 0 ? 1 : slash);
}

// The first folder of the search path that holds the plugin's file, or "".
std::string find_file(std::string_view name) {
  for (const std::string& dir : plugin_search_path()) {
    const std::string path = fmt::format("{}/{}", dir, file_name(name));
    if (access(path.c_str(), F_OK) == 0) return path;
  }
  return {};
}

std::string not_found(std::string_view name) {
  return fmt::format("{} plugin {} was not found (looked in {})", kind(name).what, file_name(name),
                     fmt::join(plugin_search_path(), ", "));
}

// Why the file at `path` cannot be a loadable library, from its first bytes, or "".
std::string cheap_problem(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fmt::format("cannot read it: {}", std::strerror(errno));
  unsigned char head[5] = {};
  const ssize_t n = read(fd, head, sizeof head);
  close(fd);
  if (n != static_cast<ssize_t>(sizeof head) || std::memcmp(head, "\x7f" "ELF", 4) != 0)
    return "it is not a shared library (no ELF header)";
  if (head[4] != 2) return "it is not a 64-bit shared library";
  return {};
}

// Loads the plugin `name` and returns its table, whose abi_version has been checked. Not cached.
template <class Table>
const Table* load_file(std::string_view name, const char* entry_symbol) {
  const Kind& k = kind(name);
  const std::string path = find_file(name);
  if (path.empty()) throw UsageError(not_found(name), k.hint);
  // RTLD_GLOBAL: OpenMPI's own components, which it loads later, resolve MPI's symbols through it, and
  // the nccl plugin's dependencies (libpd2bw_mpi.so, libpd2bw_cuda.so) are the ones already loaded.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    throw UsageError(fmt::format("cannot load {} plugin {}: {}", k.what, path, reason ? reason : "unknown reason"),
                     k.hint);
  }
  using Entry = const Table* (*)();
  const auto entry = reinterpret_cast<Entry>(dlsym(handle, entry_symbol));
  if (entry == nullptr)
    throw UsageError(fmt::format("{} is not {} plugin: it has no entry point {}", path, k.what, entry_symbol),
                     fmt::format("remove it, or rebuild pd2bw and use the {} it builds", file_name(name)));
  const Table* table = entry();  // every table starts with its abi_version, whatever the version
  if (table == nullptr || table->abi_version != kAbiVersion)
    throw UsageError(fmt::format("{} was built for plugin ABI version {}, but this pd2bw needs version {}", path,
                                 table ? table->abi_version : -1, kAbiVersion),
                     fmt::format("use the {} built with this pd2bw (the same build folder or install)", file_name(name)));
  return table;
}

std::mutex g_mutex;
std::map<std::string, const void*, std::less<>> g_loaded;
std::atomic<const CudaPlugin*> g_cuda{nullptr};

template <class Table>
const Table& get(std::string_view name, const char* entry_symbol, const Table* (*linked)()) {
  if (linked != nullptr) return *linked();
  const std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_loaded.find(name);
  if (it == g_loaded.end()) it = g_loaded.emplace(std::string(name), load_file<Table>(name, entry_symbol)).first;
  return *static_cast<const Table*>(it->second);
}

}  // namespace

const CudaPlugin& cuda() {
  const CudaPlugin& table = get<CudaPlugin>("cuda", "pd2bw_cuda_plugin", &pd2bw_cuda_plugin);
  g_cuda.store(&table);
  return table;
}

const MpiPlugin& mpi() { return get<MpiPlugin>("mpi", "pd2bw_mpi_plugin", &pd2bw_mpi_plugin); }

const NcclPlugin& nccl() { return get<NcclPlugin>("nccl", "pd2bw_nccl_plugin", &pd2bw_nccl_plugin); }

const CudaPlugin* cuda_if_loaded() {
  if (&pd2bw_cuda_plugin != nullptr) return pd2bw_cuda_plugin();
  return g_cuda.load();
}

}  // namespace plugin

std::vector<std::string> plugin_search_path() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("PD2BW_PLUGIN_PATH")) {
    std::string_view rest = env;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      const std::string_view dir = rest.substr(0, colon);
      if (!dir.empty()) dirs.emplace_back(dir);
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  const std::string exe = plugin::executable_dir();
  if (!exe.empty()) {
    dirs.push_back(exe);
    dirs.push_back(exe + "/../lib/pd2bw");
  }
  return dirs;
}

std::vector<PluginStatus> plugin_status(bool load) {
  std::vector<std::string> names;
  for (const std::string& n : backend_names())
    if (n != "cpu") names.push_back(n);
  for (const std::string& n : transport_names())
    if (n != "threads") names.push_back(n);
  std::vector<PluginStatus> out;
  for (const std::string& name : names) {
    PluginStatus s{name, plugin::find_file(name), {}};
    if (s.path.empty()) {
      s.problem = "not found";
    } else if (s.problem = plugin::cheap_problem(s.path); s.problem.empty() && load) {
      try {
        if (name == "cuda") plugin::cuda();
        if (name == "mpi") plugin::mpi();
        if (name == "nccl") plugin::nccl();
      } catch (const Error& e) {
        s.problem = e.what();
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace pd2bw::executor
