// Findings of the emulated device and its shared-memory race detector. Device code compiled with the
// load/store hooks (clang's -fsanitize-coverage=trace-loads,trace-stores) reports every access here;
// one inside a __shared__ array of the running block is checked against the array's per-byte record of
// the current barrier interval: a read of a byte another thread wrote, a write of a byte another thread
// wrote or read. Accesses outside shared memory (registers spilled to the fiber's stack, global memory)
// are not checked.
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "block.hpp"
#include "pd2bw_emu/checks.hpp"

namespace pd2bw_emu {
namespace {

std::mutex findings_mu;
std::vector<std::string> findings;
bool findings_only = false;

// `name` is __PRETTY_FUNCTION__ of kernel_name<Kernel>: keep what follows "Kernel = ".
std::string kernel_of(const char* name) {
  std::string s = name;
  const size_t at = s.find("Kernel = ");
  if (at == std::string::npos) return s;
  s = s.substr(at + 9);
  if (!s.empty() && s.back() == ']') s.pop_back();
  if (!s.empty() && s.front() == '&') s.erase(0, 1);
  return s;
}

void report_race(Block& b, const SharedArray& a, size_t offset, int me, int other, const char* what) {
  b.add_finding("shared-memory race: " + b.thread_name(me) + " " + what + " byte " + std::to_string(offset) +
                " of a __shared__ array of " + std::to_string(a.bytes) + " bytes, which " +
                (other == -2 ? std::string("several other threads") : b.thread_name(other)) +
                (std::string(what).find("reads") == 0 ? " wrote" : " accessed") +
                " since the last __syncthreads()");
}

void check_byte(Block& b, SharedArray& a, size_t i, int me, bool store) {
  ByteRecord& r = a.record[i];
  const uint32_t e = b.epoch;
  if (r.write_epoch == e && r.writer != me) return report_race(b, a, i, me, r.writer, store ? "writes" : "reads");
  if (store) {
    if (r.read_epoch == e && r.reader != me) return report_race(b, a, i, me, r.reader, "writes (after a read of)");
    r.writer = me;
    r.write_epoch = e;
    return;
  }
  if (r.read_epoch != e) {
    r.reader = me;
    r.read_epoch = e;
  } else if (r.reader != me) {
    r.reader = -2;
  }
}

}  // namespace

void Block::add_finding(const std::string& what) {
  const std::string line = "in kernel " + kernel_of(config->kernel) + ": " + what;
  if (fault.empty()) fault = line;
  std::lock_guard lock(findings_mu);
  findings.push_back(line);
  if (!findings_only) std::fprintf(stderr, "pd2bw-emu: %s\n", line.c_str());
}

void check_access(const void* address, size_t bytes, bool store) {
  Block* b = tls_block;
  if (b == nullptr || tls_current_thread == nullptr || !b->fault.empty()) return;
  const char* p = static_cast<const char*>(address);
  for (SharedArray& a : b->shared) {
    if (p < a.data || p >= a.data + a.bytes) continue;
    const auto me = static_cast<int>(reinterpret_cast<ThreadRecord*>(tls_current_thread) - b->threads.data());
    const auto offset = static_cast<size_t>(p - a.data);
    for (size_t i = offset; i < offset + bytes && i < a.bytes; ++i) {
      check_byte(*b, a, i, me, store);
      if (!b->fault.empty()) return;
    }
    return;
  }
}

void free_shared(Block& block) {
  for (SharedArray& a : block.shared) std::free(a.data);
  block.shared.clear();
}

bool race_detector_active() {
#if defined(__clang__)
  return true;
#else
  return false;
#endif
}

void record_findings_only(bool only) {
  std::lock_guard lock(findings_mu);
  findings_only = only;
}

std::vector<std::string> take_findings() {
  std::lock_guard lock(findings_mu);
  return std::exchange(findings, {});
}

bool fail_on_findings() {
  std::lock_guard lock(findings_mu);
  return !findings_only;
}

}  // namespace pd2bw_emu

// The hooks clang's SanitizerCoverage calls before each load and store of instrumented code.
#define PD2BW_EMU_HOOKS(n)                                                                                   \
  extern "C" void __sanitizer_cov_load##n(void* p) { pd2bw_emu::check_access(p, n, false); }               \
  extern "C" void __sanitizer_cov_store##n(void* p) { pd2bw_emu::check_access(p, n, true); }
PD2BW_EMU_HOOKS(1)
PD2BW_EMU_HOOKS(2)
PD2BW_EMU_HOOKS(4)
PD2BW_EMU_HOOKS(8)
PD2BW_EMU_HOOKS(16)
#undef PD2BW_EMU_HOOKS
