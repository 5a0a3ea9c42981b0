// Warp shuffles and votes on the emulated device: a rendezvous of the lanes a call names. Each lane
// deposits its value and waits; the last lane to arrive computes every lane's result as the device's
// __shfl*_sync / __ballot_sync define it, and the scheduler resumes them all. A mask that names a lane
// which has exited, calls something else, or passes another mask is a finding (undefined on the device).
#include <string>

#include "block.hpp"

namespace pd2bw_emu {
namespace {

const char* kind_name(int kind) {
  static const char* names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                "a vote (__ballot_sync/__any_sync/__all_sync/__syncwarp)"};
  return names[kind];
}

// The lane a shuffle reads for `lane`; `lane` itself when the source falls outside its width segment.
int source_lane(const WarpCall& c, int lane) {
  const int segment = lane & ~(c.width - 1);
  switch (c.kind) {
    case 0: return segment + (c.arg & (c.width - 1));
    case 1: return lane - c.arg >= segment ? lane - c.arg : lane;
    case 2: return lane + c.arg < segment + c.width ? lane + c.arg : lane;
    default: {
      const int src = lane ^ c.arg;
      return src >= segment && src < segment + c.width ? src : lane;
    }
  }
}

// Whether every lane of `me`'s mask has arrived with the same call; a finding when one never can.
bool complete(Block& b, const ThreadRecord& me, int warp_base) {
  for (int lane = 0; lane < 32; ++lane) {
    if ((me.warp.mask >> lane & 1u) == 0) continue;
    const auto i = static_cast<size_t>(warp_base + lane);
    if (i >= b.threads.size()) {
      b.add_finding(b.thread_name(me.linear) + " calls " + kind_name(me.warp.kind) + " with a mask naming lane " +
                    std::to_string(lane) + ", which the block does not have");
      return false;
    }
    const ThreadRecord& o = b.threads[i];
    if (o.state == ThreadState::done) {
      b.add_finding(b.thread_name(me.linear) + " calls " + kind_name(me.warp.kind) + " with a mask naming lane " +
                    std::to_string(lane) + ", which has exited");
      return false;
    }
    if (o.state != ThreadState::at_warp) return false;
    if (o.warp.mask != me.warp.mask || o.warp.kind != me.warp.kind || o.warp.width != me.warp.width) {
      b.add_finding(b.thread_name(me.linear) + " and lane " + std::to_string(lane) +
                    " meet in different warp calls or masks (" + kind_name(me.warp.kind) + ")");
      return false;
    }
  }
  return true;
}

void deliver(Block& b, const ThreadRecord& me, int warp_base) {
  const unsigned mask = me.warp.mask;
  uint64_t ballot = 0;
  for (int lane = 0; lane < 32; ++lane)
    if ((mask >> lane & 1u) != 0 && b.threads[static_cast<size_t>(warp_base + lane)].warp.value != 0)
      ballot |= uint64_t{1} << lane;
  for (int lane = 0; lane < 32; ++lane) {
    if ((mask >> lane & 1u) == 0) continue;
    ThreadRecord& t = b.threads[static_cast<size_t>(warp_base + lane)];
    if (t.warp.kind == 4) {
      t.warp.result = ballot;
    } else {
      const int src = source_lane(t.warp, lane);
      if ((mask >> src & 1u) == 0) {
        b.add_finding(b.thread_name(t.linear) + " reads lane " + std::to_string(src) + " in " + kind_name(t.warp.kind) +
                      ", which is not in the mask");
        return;
      }
      t.warp.result = b.threads[static_cast<size_t>(warp_base + src)].warp.value;
    }
    t.state = ThreadState::ready;
  }
}

}  // namespace

uint64_t warp_rendezvous(unsigned mask, uint64_t value, int kind, int arg, int width) {
  ThreadRecord& me = running_thread("a warp shuffle or vote");
  Block& b = *tls_block;
  const int lane = me.linear % 32, warp_base = me.linear - lane;
  if ((mask >> lane & 1u) == 0)
    b.add_finding(b.thread_name(me.linear) + " calls " + kind_name(kind) + " with a mask that leaves itself out");
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
    b.add_finding(b.thread_name(me.linear) + " calls " + kind_name(kind) + " with width " + std::to_string(width) +
                  " (a power of two up to 32)");
  me.warp = WarpCall{mask, value, 0, kind, arg, width};
  me.state = ThreadState::at_warp;
  if (b.fault.empty() && complete(b, me, warp_base)) deliver(b, me, warp_base);
  suspend(me);
  return me.warp.result;
}

}  // namespace pd2bw_emu
