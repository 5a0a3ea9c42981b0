// The plugins of this build: the cuda backend and the mpi and nccl transports live in shared libraries
// of their own (libpd2bw_<name>.so), loaded only by a run that uses them, so that pd2bw starts without
// the CUDA, NCCL and MPI libraries and without their start-up cost.
#pragma once

#include <string>
#include <vector>

namespace pd2bw::executor {

struct PluginStatus {
  std::string name;     // "cuda", "mpi" or "nccl"
  std::string path;     // the file found, or empty
  std::string problem;  // why it cannot be used, or empty when it can (as far as was checked)
};

// Each plugin this build made, in the order cuda, mpi, nccl, with the file the loader would use. With
// load=false only cheap checks are made (the file exists, is readable and starts with an ELF header: a
// few system calls); with load=true each is loaded as a run would load it (the dynamic loader maps it and
// the libraries it needs, e.g. cuBLASLt, which takes long) and its ABI version is checked.
std::vector<PluginStatus> plugin_status(bool load);

// The folders searched for plugins, in order: $PD2BW_PLUGIN_PATH's (colon-separated), the executable's
// folder, and ../lib/pd2bw beside it.
std::vector<std::string> plugin_search_path();

}  // namespace pd2bw::executor
