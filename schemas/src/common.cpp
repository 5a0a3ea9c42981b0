// The helpers every format shares: enum <-> string conversions, byte sizes for humans, whole-file
// reading and atomic writing, and the build's version stamp.
#include "pd2bw/schemas/common.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include <fmt/format.h>

#include "json_reader.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/files.hpp"
#include "pd2bw/schemas/plan.hpp"

#ifndef PD2BW_VERSION
#define PD2BW_VERSION "0.0.0"
#endif
#ifndef PD2BW_GIT_SHA
#define PD2BW_GIT_SHA "unknown"
#endif

namespace pd2bw::schemas {
namespace {

// Shared by the enum parsers: the message names the pointer and the hint lists the accepted words.
template <class E, std::size_t N>
E parse_word(std::string_view s, std::string_view pointer, const std::pair<std::string_view, E> (&table)[N],
             std::string_view what) {
  std::string accepted;
  for (const auto& [word, value] : table) {
    if (word == s) return value;
    accepted += accepted.empty() ? "" : ", ";
    accepted += word;
  }
  detail::fail(pointer, fmt::format("unknown {} \"{}\"", what, s), fmt::format("use one of: {}", accepted));
}

constexpr std::pair<std::string_view, DType> kDTypes[] = {
    {"fp32", DType::fp32}, {"bf16", DType::bf16}, {"fp16", DType::fp16}};
constexpr std::pair<std::string_view, Schedule> kSchedules[] = {
    {"2bw", Schedule::two_bw}, {"flush", Schedule::flush}, {"gpipe", Schedule::gpipe}, {"zb-h1", Schedule::zb_h1},
    {"interleaved", Schedule::interleaved}, {"zb-h2", Schedule::zb_h2}, {"zb-v", Schedule::zb_v}};
constexpr std::pair<std::string_view, Placement> kPlacements[] = {
    {"replicas-inner", Placement::replicas_inner}, {"stages-inner", Placement::stages_inner}};
constexpr std::pair<std::string_view, Optimizer> kOptimizers[] = {{"adamw", Optimizer::adamw},
                                                                  {"sgd", Optimizer::sgd}};
// `none` is written as no key at all, so it has no word a file may hold.
constexpr std::pair<std::string_view, StepBound> kStepBounds[] = {{"lower", StepBound::lower},
                                                                  {"upper", StepBound::upper}};

template <class E, std::size_t N>
std::string_view word_of(E value, const std::pair<std::string_view, E> (&table)[N]) {
  for (const auto& [word, v] : table) {
    if (v == value) return word;
  }
  return "unknown";
}

}  // namespace

int64_t dtype_bytes(DType t) {
  return t == DType::fp32 ? 4 : 2;
}
std::string_view to_string(DType t) {
  return word_of(t, kDTypes);
}
DType parse_dtype(std::string_view s, std::string_view pointer) {
  return parse_word(s, pointer, kDTypes, "dtype");
}

std::string_view to_string(Schedule s) {
  return word_of(s, kSchedules);
}
Schedule parse_schedule(std::string_view s, std::string_view pointer) {
  return parse_word(s, pointer, kSchedules, "schedule");
}
std::string_view to_string(Placement p) {
  return word_of(p, kPlacements);
}
Placement parse_placement(std::string_view s, std::string_view pointer) {
  return parse_word(s, pointer, kPlacements, "placement");
}
std::string_view to_string(StepBound b) {
  return b == StepBound::none ? "none" : word_of(b, kStepBounds);
}
StepBound parse_step_bound(std::string_view s, std::string_view pointer) {
  return parse_word(s, pointer, kStepBounds, "step bound");
}
std::string_view to_string(Optimizer o) {
  return word_of(o, kOptimizers);
}
Optimizer parse_optimizer(std::string_view s, std::string_view pointer) {
  return parse_word(s, pointer, kOptimizers, "optimizer");
}

std::string read_text_file(const std::string& path) {
  return read_input_file(path, "file", kMaxDocumentBytes);
}

void write_text_file(const std::string& path, std::string_view text) {
  write_output_file(path, {text});
}

std::string_view pd2bw_version() {
  return PD2BW_VERSION;
}
std::string_view pd2bw_git_sha() {
  return PD2BW_GIT_SHA;
}

}  // namespace pd2bw::schemas
