// `pd2bw profile` as a library: times the executor's own GPT layers (embedding, one block, head) at
// each microbatch size on the cpu or the cuda backend, measures what each forward keeps alive for its
// backward, times point-to-point messages and allreduces between in-process ranks (host memory, or
// device memory of stages sharing one GPU), and returns the result as a schemas::Profile.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::executor {
class ProcessGroup;
}

namespace pd2bw::profiler {

// The largest link message measured by default. The threads transport copies every message into a
// fresh buffer; from 32 MiB up glibc maps each one anew, so larger sizes time page faults more than the
// link (0.8 GB/s at 64 MiB against 2.8 at 16 MiB and 9 at 1 MiB on a 2-core VM) and take seconds.
// pd2bw's own messages (activations, a stage's gradients) are far smaller. With 16 MiB the default
// run takes about 1.5 s in all.
inline constexpr int64_t kDefaultLinkMaxBytes = int64_t{16} << 20;

// What to measure and how. Sizes are in bytes; the model is a GPT with `blocks` transformer blocks of
// width `d_model`, `heads` attention heads, `seq_len` tokens per sample and a vocabulary of `vocab`.
struct ProfileOptions {
  std::string model = "gpt";                      // family: "gpt" or "bert" (executor/model.hpp)
  std::string ln;                                 // bert's layer-norm placement: "post" or "pre"; empty: the family's
  int64_t blocks = 4, d_model = 64, heads = 4, seq_len = 64, vocab = 256;
  std::vector<int64_t> microbatches{1, 2, 4, 8};  // samples per microbatch; strictly increasing, > 0
  std::string device = "cpu";                     // "cpu" or "cuda" (the current GPU)
  std::string dtype = "fp32";                     // compute dtype: fp32, or bf16 with cuda
  int64_t warmup = 2, iters = 7;                  // untimed then timed runs per layer and microbatch
  int64_t link_ranks = 4;                         // in-process ranks (threads) of the "node" level, >= 2
  int64_t link_min_bytes = 4096;                  // smallest link message; sizes grow by powers of 4
  int64_t link_max_bytes = kDefaultLinkMaxBytes;  // largest link message (measured even off the grid)
  uint64_t seed = 1234;                           // initial weights, tokens and activations
  std::string name;                               // model name in the profile; empty: derived from dims
  bool tie_embeddings = false;                    // the head reuses the embedding's token table (bert: always)
  bool runtime_calibration = true;                // on the cpu, time the stage runtime against the layers
                                                  // (about a second); false: the profile has none
  std::string command_line;                       // recorded in provenance (the CLI passes its argv)
};

// Throws pd2bw::UsageError naming the first bad option: a non-positive dimension or count, heads not
// dividing d_model, microbatches empty or not strictly increasing, link_ranks < 2, link sizes out of
// order or not multiples of 4, an unknown device or dtype, "cuda" without a usable device ("no CUDA
// device: ..." or no cuda backend in this build), bf16 on the CPU.
void validate_options(const ProfileOptions& options);

// Refuses, before anything is allocated, options whose run needs more memory than there is: the
// profile's records (grow with blocks) against `host_bytes`, and one layer's weights plus the largest
// microbatch's activations against `device_bytes` (the host's for the cpu). A lower bound, so what it
// passes may still not fit, but what it refuses cannot. Throws pd2bw::UsageError naming the flags that
// make it large; a size <= 0 is unknown and checks nothing. Requires options that validate_options passed.
void check_profile_memory(const ProfileOptions& options, int64_t host_bytes, int64_t device_bytes);
// The same against this machine (executor::device_info of "cpu" and of options.device).
void check_profile_memory(const ProfileOptions& options);

// The link message sizes run_profile measures: link_min_bytes, x4, x4, ... while <= link_max_bytes,
// then link_max_bytes itself (rounded down to a multiple of 4) when the grid missed it. Ascending.
std::vector<int64_t> link_message_sizes(const ProfileOptions& options);

// Called as work proceeds with the fraction done in [0, 1] (non-decreasing, ending with exactly 1)
// and what is being measured. May be empty.
using ProgressFn = std::function<void(double fraction, const std::string& what)>;

// Validates `options` (see validate_options), then measures. The profile lists the layers
// "embedding", "block.0" .. "block.{blocks-1}", "head" (kinds "embedding", "block", "head"); one block
// is timed and copied to every block, since all blocks are the same layer. Each LayerTiming holds the
// median, min and p90 of the timed forward and backward runs in ms, recompute_ms, the boundary sizes,
// stash_bytes_computed (Stash::bytes()) and stash_bytes (measured growth of the backend arena's live
// bytes while the stash is alive); param_bytes is the arena's growth for the weights in the compute
// dtype. links holds one level "node": p2p and allreduce curves over link_message_sizes() and the
// scalars derived from them. On the cpu, runtime_calibration times the stage runtime against the layers
// (the whole model as one stage, schemas::RuntimeCalibration, and split in two stages at half its
// layers, schemas::RuntimeSplit; about two seconds more for the default model) unless
// options.runtime_calibration is false, which leaves it absent (the planner then prices the layers' times
// as they are, and says so). With cuda the device
// carries the GPU's driver and CUDA versions and its measured copy bandwidths, and the links are device
// buffers between stages sharing the GPU. Blocks
// the calling thread for the whole run; starts link_ranks threads for the link part. Throws pd2bw::UsageError for bad options, pd2bw::Error if a measurement fails.
schemas::Profile run_profile(const ProfileOptions& options, const ProgressFn& progress);

// run_profile as one process of a multi-process job (mpirun, srun), called by every process: rank 0
// times the layers while the others wait, then every process takes part in measuring the links between
// processes: level "node" over the processes of node 0 (p2p between ranks 0 and 1, allreduce over all
// of them), and level "cluster" over the first process of each node when the job spans nodes; each
// level's allreduce_ranks is its process count (link_ranks does not apply). Returns the profile on rank
// 0 and nullopt on the others. Throws as run_profile; UsageError when the job has a single process.
// A failure on one process leaves the others waiting: the caller ends the job (ProcessGroup::abort).
std::optional<schemas::Profile> run_profile_in_job(const ProfileOptions& options, const ProgressFn& progress,
                                                   executor::ProcessGroup& group);

}  // namespace pd2bw::profiler
