// The process group of an MPI job: MPI's start and end, the nodes of the job (shared-memory split, or
// PD2BW_RANKS_PER_NODE for tests), agreement and barriers that wait without spinning, and the abort
// that ends every process.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "mpi_internal.hpp"
#include "pd2bw/error.hpp"

namespace pd2bw::executor::mpi {

namespace {

// PD2BW_RANKS_PER_NODE as a positive count; 0 when unset. Throws UsageError for another value.
int64_t ranks_per_node_override() {
  const char* text = std::getenv("PD2BW_RANKS_PER_NODE");
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const long long k = std::strtoll(text, &end, 10);
  if (*end != '\0' || k < 1)
    throw UsageError(fmt::format("PD2BW_RANKS_PER_NODE='{}' is not a positive count of ranks", text),
                     "unset it to take the nodes from the hosts the processes run on");
  return k;
}

// Two threads of a process call MPI: the main one, and the watchdog of its peers (peer_watch.hpp). In
// builds with the nccl transport the emulated device's NCCL (cuda-emu builds) also runs its operations
// over MPI on the CUDA streams' worker threads.
constexpr int kThreadLevel = MPI_THREAD_MULTIPLE;

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) throw Error("MPI was initialised twice in one process");
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, kThreadLevel, &provided) != MPI_SUCCESS)
      throw Error("MPI_Init_thread failed", "check the launcher (mpirun, srun) and its environment");
    try {
      const Duplicate d = duplicate(MPI_COMM_WORLD);
      world_ = d.comm;
      rank_ = d.rank;
      size_ = d.size;
      char name[MPI_MAX_PROCESSOR_NAME] = {};
      int length = 0;
      check(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
      host_.assign(name, static_cast<size_t>(std::max(length, 0)));
      find_nodes();
    } catch (...) {
      MPI_Finalize();
      throw;
    }
  }

  ~MpiProcessGroup() override {
    if (world_ != MPI_COMM_NULL) MPI_Comm_free(&world_);
    MPI_Finalize();
  }

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  int64_t node() const override { return node_of_[static_cast<size_t>(rank_)]; }
  int64_t nodes() const override { return nodes_; }
  int64_t node_rank() const override {
    int64_t before = 0;
    for (int64_t r = 0; r < rank_; ++r) before += node_of_[static_cast<size_t>(r)] == node() ? 1 : 0;
    return before;
  }
  std::vector<int64_t> node_of_ranks() const override { return node_of_; }
  std::string host() const override { return host_; }

  std::unique_ptr<Comm> make_comm(std::string_view transport, int64_t device) override {
    if (transport == "mpi") return make_mpi_comm(world_);
    return make_device_comm(transport, world_, device);
  }

  bool all_agree(bool ok) override {
    int mine = ok ? 1 : 0, all = 0;
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_LAND, world_, &request), "MPI_Iallreduce");
    wait(request);
    return all != 0;
  }

  void barrier() override {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(world_, &request), "MPI_Ibarrier");
    wait(request);
  }

 protected:
  void end_job(int exit_code) override {
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }

 private:
  // Node of every rank: ranks sharing memory form a node, numbered by their lowest rank.
  void find_nodes() {
    node_of_.assign(static_cast<size_t>(size_), 0);
    if (const int64_t k = ranks_per_node_override(); k > 0) {
      for (int64_t r = 0; r < size_; ++r) node_of_[static_cast<size_t>(r)] = r / k;
      nodes_ = (size_ + k - 1) / k;
      return;
    }
    MPI_Comm local = MPI_COMM_NULL;
    check(MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, static_cast<int>(rank_), MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    int lowest = static_cast<int>(rank_);
    const int rc = MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, local);
    MPI_Comm_free(&local);
    check(rc, "MPI_Allreduce");
    std::vector<int> keys(static_cast<size_t>(size_));
    check(MPI_Allgather(&lowest, 1, MPI_INT, keys.data(), 1, MPI_INT, world_), "MPI_Allgather");
    std::map<int, int64_t> index;  // lowest rank of a node -> its number; the map orders them
    for (const int key : keys) index.emplace(key, 0);
    int64_t next = 0;
    for (auto& [key, number] : index) number = next++;
    for (int64_t r = 0; r < size_; ++r) node_of_[static_cast<size_t>(r)] = index[keys[static_cast<size_t>(r)]];
    nodes_ = next;
  }

  MPI_Comm world_ = MPI_COMM_NULL;
  int64_t rank_ = 0, size_ = 1, nodes_ = 1;
  std::vector<int64_t> node_of_;
  std::string host_;
};

}  // namespace

std::unique_ptr<ProcessGroup> join() { return std::make_unique<MpiProcessGroup>(); }

}  // namespace pd2bw::executor::mpi
