// The profile format ("pd2bw.profile"): a model's layers measured per microbatch size, the device they
// were measured on, and the measured links. The contract between `pd2bw profile` and `pd2bw plan`.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pd2bw/schemas/common.hpp"

namespace pd2bw::schemas {

// The model the layers belong to. For kind "gpt" (a causal decoder) and "bert" (an encoder trained with
// masked-LM): an embedding layer, `blocks` transformer blocks of width `d_model` with `heads` attention
// heads, and a head layer; sequence length `seq_len` tokens, vocabulary `vocab` (for bert, special tokens
// included).
struct ModelDesc {
  std::string kind;  // "gpt" or "bert" (other kinds are planned, not trained)
  std::string name;  // e.g. "gpt-3.8b"
  int64_t blocks = 0;
  int64_t d_model = 0;
  int64_t heads = 0;
  int64_t seq_len = 0;
  int64_t vocab = 0;
  DType dtype = DType::bf16;  // compute dtype
  // The LM head reuses the token-embedding matrix. Optional in files (default false; written only when
  // true). When the head and the embedding sit on different stages, the head's stage keeps a copy whose
  // gradient is summed with the embedding's before each update; the head's param_bytes should count it.
  bool tie_embeddings = false;
  // Where the blocks put their layer norms: "pre" (before attention and MLP, GPT's) or "post" (after each
  // residual add, BERT's). Optional in files: empty means the kind's own ("pre" for gpt, "post" for bert).
  std::string ln;
};

struct DeviceDesc {
  std::string name;          // e.g. "NVIDIA H200" or "cpu"
  int64_t memory_bytes = 0;  // usable memory of one device
  // Optional, measured by `pd2bw profile --device cuda` (empty or 0 when absent). Profiles only: a
  // cluster or plan file carries name and memory_bytes alone.
  std::string driver_version;      // e.g. "580.159.04"
  std::string cuda_version;        // the CUDA runtime the profiler ran on, e.g. "13.0"
  std::string compute_capability;  // e.g. "9.0"
  int64_t multiprocessors = 0;     // streaming multiprocessors
  double device_copy_gbps = 0;     // device-to-device copy: bytes copied per second / 1e9
  double host_to_device_gbps = 0;  // copy from page-locked host memory, GB/s
};

// One layer at one microbatch size. Times in milliseconds, sizes in bytes, all for one microbatch.
struct LayerTiming {
  int64_t microbatch = 0;    // samples per microbatch (b)
  double fwd_ms = 0;         // forward time
  double bwd_ms = 0;         // backward time (input and weight gradients)
  int64_t input_bytes = 0;   // activation entering the layer (crosses a stage boundary if it starts one)
  int64_t output_bytes = 0;  // activation leaving the layer (crosses a stage boundary if it ends one)
  int64_t stash_bytes = 0;   // what the forward keeps alive for the backward
  // Optional measurement detail, written by `pd2bw profile` (0 when absent from the file):
  double fwd_ms_min = 0, fwd_ms_p90 = 0;  // spread of the timed forward runs (fwd_ms is their median)
  double bwd_ms_min = 0, bwd_ms_p90 = 0;  // same for the backward
  double recompute_ms = 0;                // forward again to rebuild the stash; 0: the planner uses fwd_ms
  int64_t stash_bytes_computed = 0;       // the stash from tensor shapes; stash_bytes is then the
                                          // allocator's measured high-water mark of the forward
  // Optional, the backward split into its two halves (zero-bubble schedules run them apart), all three
  // present or none (`split` says which): B, the gradient of the layer's input (0 for a layer with no
  // input gradient, the embedding), and W, the gradients of its weights (0 for a layer without weights);
  // bwd_weight_stash_bytes is what the layer keeps from the end of B to the end of W (the inputs of its
  // weight products and their output gradients).
  bool split = false;
  double bwd_input_ms = 0;
  double bwd_weight_ms = 0;
  int64_t bwd_weight_stash_bytes = 0;
};

// One measured point of a link: moving (or allreducing) `bytes` took `ms`.
struct LinkPoint {
  int64_t bytes = 0;  // message size, > 0
  double ms = 0;      // median time, > 0
};

struct LayerProfile {
  std::string name;      // unique, e.g. "block.7"
  std::string kind;      // "embedding", "block", "head" (or any other label)
  int64_t param_bytes = 0;  // parameters in the compute dtype (count = param_bytes / dtype_bytes)
  std::vector<LayerTiming> per_microbatch;  // one entry per Profile::microbatch_sizes, same order
  int64_t optimizer_bytes = 0;  // optional: optimizer state for these parameters (0 when not recorded)
  double update_ms = 0;         // optional: one optimizer step over these parameters (0 when not recorded)
};

// A measured link at one topology level ("node": devices inside a node, "cluster": across nodes).
struct LinkLevel {
  std::string level;
  double p2p_gbps = 0;              // point-to-point bandwidth, GB/s (1e9 bytes/s)
  double p2p_latency_ms = 0;        // point-to-point latency
  double allreduce_busbw_gbps = 0;  // allreduce bus bandwidth (nccl-tests' busbw), GB/s
  // Optional measured curves, ascending in bytes (empty when not measured). p2p: one message of that
  // size; allreduce: a sum over `allreduce_ranks` ranks of a buffer of that size.
  std::vector<LinkPoint> p2p_curve;
  std::vector<LinkPoint> allreduce_curve;
  int64_t allreduce_ranks = 0;  // ranks in the measured allreduce (> 1 when allreduce_curve is set)
};

// The stage runtime measured against the layers (`pd2bw profile` on the cpu): the whole model as one
// stage (d = 1, 2bw) trained by the real runtime at each microbatch size b, with `few` and with `many`
// microbatches per step. From its two steps (CPU time of its one rank thread, medians) the runtime's time
// per microbatch is (many_step - few_step) / (many - few) and its time per step the rest of few_step.
// compute_scale[b] is the first over the layers' sum of fwd_ms + bwd_ms at b; update_scale is the second
// (the median over b) over the layers' sum of update_ms. The planner multiplies every layer's fwd, bwd,
// recompute and backward halves at b by compute_scale[b] and every update_ms by update_scale, which
// charges each stage its share of what the runtime spends beyond the isolated layers (caches gone cold
// between layers, boundary and stash buffers, the loss, the gradient norm and the non-finite check).
// Absent (an older profile, cuda, another tool): the layers' times are used as they are.
struct RuntimeStep {
  int64_t microbatch = 0;      // samples per microbatch (b), as /microbatch_sizes
  double few_step_ms = 0;      // the runtime's step with `few` microbatches
  double many_step_ms = 0;     // ... with `many`
  double compute_scale = 1;    // > 0, <= kMaxRuntimeScale
};
// Optional (since 1.5): the same runtime over the model split in two stages at `layer` (d = 2, 2bw; the
// profiler cuts at half the layers), each stage's rank thread timed on its own (CPU time, medians), with
// `few` and `many` microbatches per step. Per stage r its time per microbatch pm_r and per step rest_r as
// above. boundary_ms = pm_0 + pm_1 - the whole model's time per microbatch (as per_microbatch's
// step_ms give it) is the runtime's work for one stage boundary per microbatch (send and receive of the
// activation and its gradient, both sides together), and compute_scales[r] = (pm_r - boundary_ms / 2)
// over the fwd + bwd of stage r's layers, so the two scales price the whole model at exactly the whole
// run's time per microbatch; update_scales[r] = rest_r (median over the sizes) over its layers' update_ms.
// When present the planner prices the layers before `layer` with the first scales and the others with
// the second, instead of compute_scale and update_scale, and a boundary inside the innermost link level
// at the runtime's measured boundary work instead of that link's p2p time (planner/runtime_costs.hpp).
struct RuntimeSplitStep {
  int64_t microbatch = 0;                          // as /microbatch_sizes
  std::array<std::array<double, 2>, 2> step_ms{};  // per stage: [few step, many step], > 0
  std::array<double, 2> compute_scales = {1, 1};   // > 0, <= kMaxSplitScale
  double boundary_ms = 0;                          // >= 0
};
struct RuntimeSplit {
  int64_t layer = 0;                           // the first layer of the second stage, 0 < layer < layers
  int64_t few = 0, many = 0;                   // microbatches per step of the two runs, 2 <= few < many
  std::array<double, 2> update_scales = {1, 1};  // >= 0, <= kMaxUpdateScale
  std::vector<RuntimeSplitStep> per_microbatch;  // one per microbatch size, same order; empty: absent
  bool present() const { return !per_microbatch.empty(); }
};
struct RuntimeCalibration {
  int64_t few = 0, many = 0;         // microbatches per step of the two runs, 0 < few < many
  double update_scale = 1;           // >= 0, <= kMaxUpdateScale
  std::vector<RuntimeStep> per_microbatch;  // one per microbatch size, same order; empty: absent
  RuntimeSplit split;                // optional (present() false when absent; needs present())
  bool present() const { return !per_microbatch.empty(); }
};
// A runtime this many times slower than its layers is a disturbed measurement, not a cost.
inline constexpr double kMaxRuntimeScale = 4.0;
// The runtime's per-step work (norm, check, losses) against the optimizer step alone may be far larger.
inline constexpr double kMaxUpdateScale = 100.0;
// A split stage's scale, as compute_scale.
inline constexpr double kMaxSplitScale = kMaxRuntimeScale;

struct Profile {
  Provenance provenance;
  ModelDesc model;
  DeviceDesc device;
  std::vector<int64_t> microbatch_sizes;  // strictly increasing, each > 0
  std::vector<LayerProfile> layers;       // in model order, at least one
  std::vector<LinkLevel> links;           // may be empty (then the cluster comes from a file or flags)
  RuntimeCalibration runtime_calibration;  // optional (present() false when absent)
};

// Parses and checks a profile. Throws SchemaError starting with the JSON pointer of the first problem:
// malformed JSON, a missing/unknown key, a wrong type, a negative or non-finite number, an unknown
// schema major, microbatch entries that do not match microbatch_sizes, zero layers.
Profile parse_profile(std::string_view json_text);
// Deterministic JSON text (2-space indent, fixed key order, trailing newline).
std::string dump_profile(const Profile& profile);

}  // namespace pd2bw::schemas
