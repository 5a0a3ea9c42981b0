// The masked-LM (BERT) batch sampler: row layout, segments and Devlin et al.'s 80/10/10 masking, each
// row drawn from its own splitmix64 stream (integer arithmetic only; see data_mlm.hpp for the order).
#include "pd2bw/executor/data_mlm.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/rng.hpp"

namespace pd2bw::executor {
namespace {

// "pd2bwmlm": separates this stream from TokenData::sample's and from parameter initialisation.
constexpr uint64_t kMlmStreamTag = 0x70643262776D6C6DULL;

// The random stream of one row.
class RowStream {
 public:
  RowStream(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t s)
      : state_(row_seed(seed, kMlmStreamTag, step, microbatch, replica, s)) {}
  uint64_t next() { return splitmix64(state_); }
  // Uniform in [0, n) for n >= 1 (modulo bias below n / 2^64).
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_ = 0;
};

// Steps 1-3 of the row recipe: length, window offset, split point.
MlmRowLayout draw_layout(RowStream& rng, uint64_t short_threshold, int64_t data_size, int64_t seq) {
  MlmRowLayout row;
  const bool is_short = (rng.next() >> 11) < short_threshold;
  row.length = is_short ? kMlmMinRowLength + rng.below(seq - kMlmMinRowLength + 1) : seq;
  const int64_t window = row.length - 3;
  row.offset = rng.below(data_size - window + 1);
  row.a_tokens = 1 + rng.below(window - 1);
  return row;
}

// Row position of content index i (segment A's tokens first, then B's).
int64_t content_position(const MlmRowLayout& row, int64_t i) {
  return i < row.a_tokens ? 1 + i : 2 + i;
}

// The segment of row position p: 1 for B and the final [SEP], 0 for [CLS], A, the first [SEP] and padding.
int32_t row_type(const MlmRowLayout& row, int64_t p) { return p > row.a_tokens + 1 && p < row.length ? 1 : 0; }

// [CLS] A [SEP] B [SEP] [PAD]..., its segment types, and no targets yet.
void fill_row(const TokenData& data, const MlmSpecialTokens& special, const MlmRowLayout& row, int64_t seq,
              int32_t* tokens, int32_t* types, int32_t* targets) {
  const int64_t a = row.a_tokens;
  const int64_t last = row.length - 1;
  for (int64_t p = 0; p < seq; ++p) {
    targets[p] = kIgnoreTarget;
    types[p] = row_type(row, p);
    if (p >= row.length)
      tokens[p] = special.pad;
    else if (p == 0)
      tokens[p] = special.cls;
    else if (p == a + 1 || p == last)
      tokens[p] = special.sep;
    else
      tokens[p] = data.token(row.offset + (p <= a ? p - 1 : p - 2));
  }
}

// Step 4-5: choose n content positions by a partial Fisher-Yates shuffle, record their targets and
// replace their inputs 80/10/10 by [MASK] / a uniform token in [0, vocab) / themselves.
void mask_row(RowStream& rng, const MlmRowLayout& row, int64_t n, int64_t vocab, int32_t mask_id,
              std::vector<int32_t>& order, int32_t* tokens, int32_t* targets) {
  const int64_t content = row.length - 3;
  for (int64_t i = 0; i < content; ++i) order[static_cast<std::size_t>(i)] = static_cast<int32_t>(i);
  for (int64_t k = 0; k < n; ++k) {
    std::swap(order[static_cast<std::size_t>(k)], order[static_cast<std::size_t>(k + rng.below(content - k))]);
  }
  for (int64_t k = 0; k < n; ++k) {
    const int64_t p = content_position(row, order[static_cast<std::size_t>(k)]);
    targets[p] = tokens[p];
    const int64_t r = rng.below(10);
    if (r < 8) {
      tokens[p] = mask_id;
    } else if (r == 8) {
      tokens[p] = static_cast<int32_t>(rng.below(vocab));
    }
  }
}

}  // namespace

MlmSampler::MlmSampler(const TokenData& data, MlmOptions options) : data_(&data), options_(options) {
  if (!(options.mask_rate > 0.0 && options.mask_rate < 1.0)) {
    throw UsageError(fmt::format("masked-LM option mask_rate must be in (0, 1), got {}", options.mask_rate),
                     "BERT predicts 15% of the content positions: mask_rate 0.15");
  }
  if (!(options.short_rate >= 0.0 && options.short_rate < 1.0)) {
    throw UsageError(fmt::format("masked-LM option short_rate must be in [0, 1), got {}", options.short_rate),
                     "BERT shortens 10% of the rows: short_rate 0.1 (0 keeps every row full)");
  }
  // short_rate * 2^53 is exact; flooring it makes the share of short rows floor(short_rate 2^53) / 2^53.
  short_threshold_ = static_cast<uint64_t>(std::ldexp(options.short_rate, 53));
}

int64_t MlmSampler::vocab() const {
  return data_->vocab() + kMlmSpecialTokens;
}

MlmSpecialTokens MlmSampler::special() const {
  const auto v = static_cast<int32_t>(data_->vocab());
  return MlmSpecialTokens{v, v + 1, v + 2, v + 3};
}

int64_t MlmSampler::masked_count(int64_t length) const {
  const int64_t content = length - 3;
  return std::max<int64_t>(1, std::llround(options_.mask_rate * static_cast<double>(content)));
}

void MlmSampler::check_args(int64_t step, int64_t microbatch, int64_t replica, int64_t b, int64_t seq) const {
  if (seq < kMlmMinRowLength || seq > std::numeric_limits<int32_t>::max()) {
    throw UsageError(fmt::format("masked-LM sequence length must be in [5, 2^31 - 1], got {}", seq),
                     "a row needs room for [CLS] A [SEP] B [SEP]");
  }
  if (b < 1) throw UsageError(fmt::format("masked-LM sample: microbatch size must be >= 1, got {}", b));
  if (step < 0 || microbatch < 0 || replica < 0) {
    throw UsageError(fmt::format("masked-LM sample indices must be >= 0 (step {}, microbatch {}, replica {})", step,
                                 microbatch, replica));
  }
  if (data_->size() < seq) {
    throw UsageError(fmt::format("training data \"{}\" has {} tokens, too few for masked-LM sequences of {} "
                                 "(needs at least {})",
                                 data_->label(), data_->size(), seq, seq),
                     "use a larger data file or a shorter sequence length");
  }
}

MlmRowLayout MlmSampler::row_layout(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t s,
                                    int64_t seq) const {
  check_args(step, microbatch, replica, 1, seq);
  if (s < 0) throw UsageError(fmt::format("masked-LM sample: row index must be >= 0, got {}", s));
  RowStream rng(seed, step, microbatch, replica, s);
  return draw_layout(rng, short_threshold_, data_->size(), seq);
}

int64_t MlmSampler::predicted(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t b,
                              int64_t seq) const {
  check_args(step, microbatch, replica, b, seq);
  int64_t total = 0;
  for (int64_t s = 0; s < b; ++s) {
    RowStream rng(seed, step, microbatch, replica, s);
    total += masked_count(draw_layout(rng, short_threshold_, data_->size(), seq).length);
  }
  return total;
}

void MlmSampler::segments(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t b, int64_t seq,
                          int32_t* token_types, int32_t* lengths) const {
  check_args(step, microbatch, replica, b, seq);
  for (int64_t s = 0; s < b; ++s) {
    RowStream rng(seed, step, microbatch, replica, s);
    const MlmRowLayout row = draw_layout(rng, short_threshold_, data_->size(), seq);
    lengths[s] = static_cast<int32_t>(row.length);
    for (int64_t p = 0; p < seq; ++p) token_types[s * seq + p] = row_type(row, p);
  }
}

void MlmSampler::sample(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t b, int64_t seq,
                        int32_t* tokens, int32_t* token_types, int32_t* lengths, int32_t* targets) const {
  check_args(step, microbatch, replica, b, seq);
  const MlmSpecialTokens sp = special();
  const int64_t data_vocab = data_->vocab();
  std::vector<int32_t> order(static_cast<std::size_t>(seq));  // Fisher-Yates scratch: content indices
  for (int64_t s = 0; s < b; ++s) {
    RowStream rng(seed, step, microbatch, replica, s);
    const MlmRowLayout row = draw_layout(rng, short_threshold_, data_->size(), seq);
    int32_t* row_tokens = tokens + s * seq;
    int32_t* row_targets = targets + s * seq;
    fill_row(*data_, sp, row, seq, row_tokens, token_types + s * seq, row_targets);
    lengths[s] = static_cast<int32_t>(row.length);
    mask_row(rng, row, masked_count(row.length), data_vocab, sp.mask, order, row_tokens, row_targets);
  }
}

}  // namespace pd2bw::executor
