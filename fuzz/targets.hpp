// The bodies of pd2bw's fuzz targets, one function per target, so the libFuzzer binaries (fuzz_main.cpp,
// built with clang) and the regression test that replays every saved input (tests/unit, any compiler)
// run the same code. Each takes arbitrary bytes, must never crash, hang or trip a sanitizer, and checks
// properties beyond "no crash"; a broken property aborts, which the fuzzer reports as a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pd2bw::fuzz {

// parse_profile; on success dump_profile must give text that parses again to the same dump.
void profile_reader(const uint8_t* data, size_t size);
// The same for parse_cluster / dump_cluster.
void cluster_reader(const uint8_t* data, size_t size);
// The same for parse_plan / dump_plan (parse_plan includes the plan's consistency checks).
void plan_reader(const uint8_t* data, size_t size);
// A profile read from the bytes (at most 64 layers, 4 microbatch sizes and realistic sizes and times),
// planned for a fixed 2 x 4 cluster: the search, the simulator's re-ranking and build_plan; a plan that is
// found must dump to text the plan reader accepts.
void plan_search(const uint8_t* data, size_t size);

// A profile (up to 32 layers, byte counts up to 1 TiB) and a cluster drawn from the bytes, not parsed, so
// the planner meets every combination of sizes and times the reader accepts; the same search, replay
// and plan checks as plan_search.
void plan_values(const uint8_t* data, size_t size);

// The target of a name ("profile_reader", ...), or nullptr.
using Target = void (*)(const uint8_t*, size_t);
Target target_named(std::string_view name);

}  // namespace pd2bw::fuzz
