// Token data sources (built-in corpus, byte files, llm.c token files) and the stateless sampler.
#include "pd2bw/executor/data.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "data_builtin_corpus.hpp"
#include "file_bytes.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/rng.hpp"

namespace pd2bw::executor {
namespace {

// Little-endian reads, independent of the host's byte order.
uint32_t load_u32le(const std::string& bytes, std::size_t at) {
  uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return v;
}
uint16_t load_u16le(const std::string& bytes, std::size_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(bytes[at]) |
                               (static_cast<unsigned char>(bytes[at + 1]) << 8));
}

std::vector<uint16_t> bytes_to_tokens(std::string_view bytes) {
  std::vector<uint16_t> out(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<unsigned char>(bytes[i]);
  return out;
}

bool starts_with_llmc_magic(const std::string& bytes) {
  return bytes.size() >= 4 && load_u32le(bytes, 0) == static_cast<uint32_t>(kLlmcMagic);
}

[[noreturn]] void llmc_fail(const std::string& path, const std::string& what) {
  throw SchemaError(fmt::format("{}: not a valid llm.c token file: {}", path, what),
                    "llm.c token files (e.g. from llm.c's dev/data scripts) have a 1024-byte header "
                    "(magic 20240520, version 1, token count) followed by uint16 GPT-2 tokens");
}

// Validates the header and the exact length, then decodes the tokens.
std::vector<uint16_t> parse_llmc(const std::string& bytes, const std::string& path) {
  const auto size = static_cast<int64_t>(bytes.size());
  if (size < kLlmcHeaderBytes) llmc_fail(path, fmt::format("{} bytes is shorter than the 1024-byte header", size));
  const auto magic = static_cast<int32_t>(load_u32le(bytes, 0));
  const auto version = static_cast<int32_t>(load_u32le(bytes, 4));
  const auto count = static_cast<int32_t>(load_u32le(bytes, 8));
  if (magic != kLlmcMagic) llmc_fail(path, fmt::format("magic is {}, expected {}", magic, kLlmcMagic));
  if (version != kLlmcVersion) {
    llmc_fail(path, fmt::format("version is {}, only version {} (uint16 GPT-2 tokens) is supported", version,
                                kLlmcVersion));
  }
  if (count <= 0) llmc_fail(path, fmt::format("token count is {}, must be > 0", count));
  const int64_t expected = kLlmcHeaderBytes + 2 * static_cast<int64_t>(count);
  if (size != expected) {
    llmc_fail(path, fmt::format("the header announces {} tokens ({} bytes in all) but the file has {} bytes", count,
                                expected, size));
  }
  std::vector<uint16_t> tokens(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = load_u16le(bytes, static_cast<std::size_t>(kLlmcHeaderBytes) + 2 * i);
    if (tokens[i] >= kGpt2Vocab) {
      llmc_fail(path, fmt::format("token {} at index {} is outside the GPT-2 vocabulary (< {})", tokens[i], i,
                                  kGpt2Vocab));
    }
  }
  return tokens;
}

// The file's bytes; an empty file is a usage error (nothing to train on), not a format error.
std::string read_nonempty(const std::string& path) {
  std::string bytes = detail::read_file_bytes(path, "training data");
  if (bytes.empty()) {
    throw UsageError(fmt::format("training data \"{}\" is empty", path),
                     "give a non-empty text file or an llm.c .bin token file, or omit it to use the built-in corpus");
  }
  return bytes;
}

}  // namespace

TokenData::TokenData(std::vector<uint16_t> tokens, int64_t vocab, std::string label)
    : tokens_(std::move(tokens)), vocab_(vocab), label_(std::move(label)) {
  max_token_ = tokens_.empty() ? 0 : *std::max_element(tokens_.begin(), tokens_.end());
}

TokenData TokenData::builtin() {
  return TokenData(bytes_to_tokens(detail::builtin_corpus_text()), kByteVocab, "built-in corpus");
}

TokenData TokenData::from_text_file(const std::string& path) {
  const std::string bytes = read_nonempty(path);
  return TokenData(bytes_to_tokens(bytes), kByteVocab, path);
}

TokenData TokenData::from_llmc_file(const std::string& path) {
  const std::string bytes = read_nonempty(path);
  return TokenData(parse_llmc(bytes, path), kGpt2Vocab, path);
}

TokenData TokenData::open(const std::string& path) {
  const std::string bytes = read_nonempty(path);
  if (starts_with_llmc_magic(bytes)) return TokenData(parse_llmc(bytes, path), kGpt2Vocab, path);
  return TokenData(bytes_to_tokens(bytes), kByteVocab, path);
}

int64_t TokenData::sample_offset(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t s,
                                 int64_t seq) const {
  if (seq < 1 || size() < seq + 2) {
    throw UsageError(fmt::format("training data \"{}\" has {} tokens, too few for sequences of {} (needs at least {})",
                                 label_, size(), seq, seq + 2),
                     "use a larger data file or a shorter sequence length");
  }
  if (step < 0 || microbatch < 0 || replica < 0 || s < 0) {
    throw UsageError(fmt::format("data sample indices must be >= 0 (step {}, microbatch {}, replica {}, row {})",
                                 step, microbatch, replica, s));
  }
  // "pd2bwdat": separates this stream from others.
  const uint64_t h = row_seed(seed, 0x7064326277646174ULL, step, microbatch, replica, s);
  // Offsets 0 .. size - seq - 1 keep the shifted target window inside the data.
  return static_cast<int64_t>(h % static_cast<uint64_t>(size() - seq));
}

void TokenData::sample(uint64_t seed, int64_t step, int64_t microbatch, int64_t replica, int64_t b, int64_t seq,
                       int32_t* tokens, int32_t* targets) const {
  if (b < 1) throw UsageError(fmt::format("data sample: microbatch size must be >= 1, got {}", b));
  for (int64_t s = 0; s < b; ++s) {
    const int64_t offset = sample_offset(seed, step, microbatch, replica, s, seq);
    int32_t* row_tokens = tokens + s * seq;
    int32_t* row_targets = targets + s * seq;
    for (int64_t t = 0; t < seq; ++t) {
      row_tokens[t] = token(offset + t);
      row_targets[t] = token(offset + t + 1);
    }
  }
}

}  // namespace pd2bw::executor
