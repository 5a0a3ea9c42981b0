// Masked-LM (BERT) training batches over any TokenData: a stateless sampler that builds each row
// [CLS] A [SEP] B [SEP] [PAD]... from a window of the data and masks it as Devlin et al. (2019) do. Like
// TokenData::sample, every row is a pure function of (seed, step, microbatch, replica, row, seq) and the
// data, computed with integer arithmetic only, so a resumed run sees the same batches as an
// uninterrupted one, every rank samples independently, and the bytes are the same on every platform.
#pragma once

#include <cstdint>

#include "pd2bw/executor/data.hpp"

namespace pd2bw::executor {

// The special tokens a masked-LM batch uses, appended after the data's vocabulary V:
// [PAD] = V, [CLS] = V + 1, [SEP] = V + 2, [MASK] = V + 3; the model's vocabulary must be >= V + 4.
struct MlmSpecialTokens {
  int32_t pad = 0, cls = 0, sep = 0, mask = 0;
};
inline constexpr int64_t kMlmSpecialTokens = 4;
// The shortest row: [CLS] A [SEP] B [SEP] with one token in each segment.
inline constexpr int64_t kMlmMinRowLength = 5;

struct MlmOptions {
  // Share of a row's content positions predicted, in (0, 1). BERT's masked_lm_prob.
  double mask_rate = 0.15;
  // Share of rows whose length is drawn uniformly from [5, seq] instead of being seq, in [0, 1) (BERT's
  // short_seq_prob). The draw can land on seq itself, so the share of rows actually shorter than seq
  // is short_rate * (seq - 5) / (seq - 4).
  double short_rate = 0.10;
};

// Where row s of a batch came from (exposed for tests and logging).
struct MlmRowLayout {
  int64_t length = 0;    // L: positions before the padding, in [5, seq]
  int64_t offset = 0;    // first data token of the row's window of L - 3 tokens
  int64_t a_tokens = 0;  // tokens in segment A (>= 1); segment B has L - 3 - a_tokens (>= 1)
};

// Row s of a batch, in the (b, seq) row-major arrays sample() fills (p = position in the row):
//   tokens[p]:      p = 0: [CLS]; 1 .. a: segment A = data[offset .. offset + a - 1]; a + 1: [SEP];
//                   a + 2 .. L - 2: segment B = data[offset + a .. offset + L - 4]; L - 1: [SEP];
//                   L .. seq - 1: [PAD]. Masked content positions are then replaced (below).
//   token_types[p]: 0 for [CLS], A and the first [SEP]; 1 for B and the final [SEP]; 0 for padding.
//   lengths[s]:     L (attention must ignore keys at positions >= L).
//   targets[p]:     the original data token at each masked position, kIgnoreTarget everywhere else
//                   ([CLS], [SEP], [PAD] and unmasked content).
// Each row draws from its own splitmix64 stream, seeded by folding (seed, a tag, step, microbatch,
// replica, s) as TokenData::sample does, in this order (u = the next 64-bit output, u' the one after):
//   1. short row iff (u >> 11) < floor(short_rate * 2^53); then (short rows only) L = 5 + u' % (seq - 4),
//      else L = seq;
//   2. offset = u % (size - (L - 3) + 1);  3. a_tokens = 1 + u % (L - 4);
//   4. n = max(1, round(mask_rate * (L - 3))) (one IEEE double product, rounded half away from zero)
//      content positions, by a partial Fisher-Yates shuffle of the content indices 0 .. L - 4 (A then B):
//      for k < n, swap index k with index k + u % (L - 3 - k);
//   5. for each chosen index in shuffle order: r = u % 10; r < 8 -> [MASK], r == 8 -> the token
//      u' % V (uniform in [0, V), possibly the original), r == 9 -> unchanged.
class MlmSampler {
 public:
  // Keeps a reference to `data`, which must outlive the sampler. Throws pd2bw::UsageError naming the
  // bad option: mask_rate outside (0, 1), short_rate outside [0, 1) (NaN included).
  explicit MlmSampler(const TokenData& data, MlmOptions options = {});

  // data.vocab() + kMlmSpecialTokens: the model's vocabulary must be at least this.
  int64_t vocab() const;
  MlmSpecialTokens special() const;
  const MlmOptions& options() const { return options_; }

  // Fills one microbatch of b rows of seq positions (layout above): tokens, token_types, targets (b, seq)
  // and lengths (b) int32 arrays owned by the caller. A pure function of (seed, step, microbatch,
  // replica, b, seq) and the data: rows differ between rows of one microbatch and between different
  // (step, microbatch, replica) (up to hash collisions), and the same arguments give the same bytes.
  // Throws UsageError for seq < 5 or seq > INT32_MAX, b < 1, negative step/microbatch/replica, or data
  // shorter than seq tokens.
  void sample(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t b, int64_t seq, int32_t* tokens,
              int32_t* token_types, int32_t* lengths, int32_t* targets) const;

  // The token_types (b, seq) and lengths (b) that sample() writes for these arguments, without building
  // the rows (a pipeline's every stage reads the lengths, only its first stage the tokens). Same throws.
  void segments(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t b, int64_t seq,
                int32_t* token_types, int32_t* lengths) const;

  // The exact number of targets != kIgnoreTarget that sample() would write for these arguments (for
  // logs and loss normalisation), without building the rows. Same throws as sample().
  int64_t predicted(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t b, int64_t seq) const;

  // Length, window offset and split of row s as sample() builds it. Same throws as sample(), and
  // UsageError for s < 0.
  MlmRowLayout row_layout(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t s,
                          int64_t seq) const;

  // The number of content positions masked in a row of length L: max(1, round(mask_rate * (L - 3))).
  int64_t masked_count(int64_t length) const;

 private:
  void check_args(int64_t step, int64_t microbatch, int64_t replica, int64_t b, int64_t seq) const;

  const TokenData* data_;
  MlmOptions options_;
  uint64_t short_threshold_ = 0;  // short row iff the top 53 bits of the draw are below this
};

}  // namespace pd2bw::executor
