// Training data: a token stream (the built-in corpus, any file's bytes, or an llm.c token file) and a
// stateless sampler that picks each microbatch's rows from (seed, step, microbatch, replica) alone, so
// a resumed run sees the same data as an uninterrupted one and every rank can sample independently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pd2bw::executor {

// Magic number and version in the first two int32 of an llm.c token file (GPT-2 tokens as uint16).
inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
// Bytes of the llm.c header: 256 little-endian int32.
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;
// Vocabulary of byte-level data and of GPT-2 (llm.c files).
inline constexpr int64_t kByteVocab = 256;
inline constexpr int64_t kGpt2Vocab = 50257;
// A target that no loss counts (a position a masked-LM batch does not predict, or padding): the
// cross-entropy ops skip it and average over the others. PyTorch's ignore_index default.
inline constexpr int32_t kIgnoreTarget = -100;

// An immutable sequence of token ids with its vocabulary size. Cheap to move; copying copies the tokens.
class TokenData {
 public:
  // The corpus compiled into the library (English prose, about 15 KB), byte-level, vocab 256. Needs no
  // file or network. Label "built-in corpus".
  static TokenData builtin();
  // Every byte of the file is one token (vocab 256). Throws UsageError naming the path when the file
  // is missing, unreadable or empty.
  static TokenData from_text_file(const std::string& path);
  // An llm.c .bin file: a header of 256 little-endian int32 ([0] magic 20240520, [1] version 1,
  // [2] token count), then that many little-endian uint16 tokens, all < 50257 (vocab 50257).
  // Throws UsageError if unreadable, SchemaError naming the path and the defect otherwise.
  static TokenData from_llmc_file(const std::string& path);
  // from_llmc_file when the file's first int32 is the llm.c magic, from_text_file otherwise.
  static TokenData open(const std::string& path);

  // Vocabulary size: 256 for byte-level data, 50257 for llm.c files.
  int64_t vocab() const { return vocab_; }
  // Number of tokens (> 0).
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // Largest token id present (< vocab()).
  int32_t max_token() const { return max_token_; }
  // "built-in corpus" or the path the data came from (for logs and checkpoint manifests).
  const std::string& label() const { return label_; }
  // Token i, 0 <= i < size() (unchecked).
  int32_t token(int64_t i) const { return tokens_[static_cast<std::size_t>(i)]; }

  // Fills `tokens` and `targets`, each (b, seq) row-major int32 arrays owned by the caller, for
  // microbatch `microbatch` of optimizer step `step` on data-parallel replica `replica`. Row s is the
  // window starting at an offset that is a fixed function of (seed, step, microbatch, replica, s) in
  // [0, size - seq - 1]; targets are the same window shifted by one token. Integer arithmetic only:
  // the same arguments give the same rows on every platform. Throws UsageError when size < seq + 2,
  // when b or seq < 1, or when step, microbatch or replica < 0.
  void sample(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t b, int64_t seq,
              int32_t* tokens, int32_t* targets) const;

  // The offset of row s as used by sample() (exposed for tests and logging); same throws as sample().
  int64_t sample_offset(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t s,
                        int64_t seq) const;

 private:
  TokenData(std::vector<uint16_t> tokens, int64_t vocab, std::string label);

  std::vector<uint16_t> tokens_;  // both vocabularies fit in 16 bits; halves memory for big files
  int64_t vocab_ = 0;
  int32_t max_token_ = 0;
  std::string label_;
};

}  // namespace pd2bw::executor
