// The emulated device's checks of kernel code, and how a program (a test of the checks themselves)
// observes them. A finding is a kernel defect the device would not report: a shared-memory race (a
// thread reads or writes a byte of __shared__ memory that another thread of the block wrote, or a write
// to a byte another thread read, since the last __syncthreads()), a warp shuffle or vote whose named
// lanes do not all take part, threads that can never meet again (a deadlock), or more than 48 KiB of
// static shared memory. By default a finding fails the launch: it is printed and the device fails with
// the sticky cudaErrorLaunchFailure, as a faulting kernel leaves it.
#pragma once

#include <string>
#include <vector>

namespace pd2bw_emu {

// Whether this build reports device code's loads and stores to the race detector (clang builds of the
// cuda-emu preset compile device code with the hooks; elsewhere races go unseen).
bool race_detector_active();

// From now on, findings are only recorded for take_findings(), and launches do not fail (true), or they
// fail the device as by default (false).
void record_findings_only(bool only);

// The findings recorded since the last call, each a one-line description naming the kernel.
std::vector<std::string> take_findings();

}  // namespace pd2bw_emu
