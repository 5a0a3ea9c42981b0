// Helpers shared by the tests that run the profiler: the options of a run small enough for a unit test.
#pragma once

#include "pd2bw/profiler/profiler.hpp"

namespace pd2bw::test {

// A 2-block GPT of width 16 (2 heads, 8 tokens, vocabulary 32) at microbatch sizes 1 and 2, one untimed
// and three timed runs per layer, links up to 256 KiB: a whole run_profile in well under a second.
inline profiler::ProfileOptions small_profile_options() {
  profiler::ProfileOptions o;
  o.blocks = 2;
  o.d_model = 16;
  o.heads = 2;
  o.seq_len = 8;
  o.vocab = 32;
  o.microbatches = {1, 2};
  o.warmup = 1;
  o.iters = 3;
  o.link_max_bytes = 256 << 10;
  return o;
}

}  // namespace pd2bw::test
