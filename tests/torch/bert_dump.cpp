// bert_dump OUT_DIR: writes what tests/torch/bert_parity.py checks pd2bw's BERT against. For a tiny BERT in
// double and in float, post-LN and pre-LN, it builds SequentialModel<T>, moves every parameter off its
// initialisation (biases and layer-norm betas start at 0 and gammas at 1, which would hide a swapped or
// ignored tensor), samples one masked-LM microbatch over the built-in corpus with at least one padded row,
// runs forward_backward with loss scale 1 and writes OUT_DIR/bert_<ln>_<f64|f32>.safetensors holding
//   every parameter under its layout name, every gradient under "grad/" + name, the batch
//   ("batch/tokens", "batch/types", "batch/lengths", "batch/targets", I64) and the loss ("loss", F64, [1]),
// with the model's sizes in the metadata. Exits 1 with a message on any failure.
#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pd2bw/executor/data.hpp"
#include "pd2bw/executor/data_mlm.hpp"
#include "pd2bw/executor/model.hpp"
#include "pd2bw/executor/safetensors.hpp"
#include "pd2bw/executor/sequential_model.hpp"

namespace ex = pd2bw::executor;

namespace {

constexpr uint64_t kModelSeed = 1234;
constexpr uint64_t kDataSeed = 77;
constexpr int64_t kBatch = 3;

ex::ModelConfig tiny_bert(ex::LnPlacement ln) {
  ex::ModelConfig c = ex::ModelConfig::of(ex::ModelFamily::bert);
  c.vocab = 260;  // 256 bytes + [PAD] [CLS] [SEP] [MASK]
  c.seq_len = 16;
  c.d_model = 32;
  c.heads = 4;
  c.blocks = 2;
  c.ln = ln;
  c.validate();
  return c;
}

// splitmix64 -> a double in [-1, 1): the same perturbation for float and double (rounded to T).
struct Noise {
  uint64_t state;
  double next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0;
  }
};

// Adds 0.05 * U(-1, 1) to every 1-D tensor (biases, gammas, betas) and 0.01 * U(-1, 1) to every matrix.
template <typename T>
void perturb(const ex::ParamLayout& layout, std::span<T> params, Noise& noise) {
  for (const ex::TensorInfo& t : layout) {
    const double scale = t.is_matrix() ? 0.01 : 0.05;
    for (int64_t i = 0; i < t.numel(); ++i) {
      T& p = params[static_cast<size_t>(t.offset + i)];
      p = static_cast<T>(static_cast<double>(p) + scale * noise.next());
    }
  }
}

// Owns the bytes of the I64 batch tensors and the loss until the file is written.
struct Store {
  std::vector<std::vector<int64_t>> ints;
  std::vector<std::vector<double>> doubles;
};

template <typename T>
void add_layer(std::vector<ex::TensorView>& views, const ex::ParamLayout& layout, std::span<const T> params,
               std::span<const T> grads) {
  for (const ex::TensorInfo& t : layout) {
    const auto n = static_cast<size_t>(t.numel());
    const auto off = static_cast<size_t>(t.offset);
    views.push_back(ex::make_tensor_view<T>(t.name, t.shape, params.subspan(off, n)));
    views.push_back(ex::make_tensor_view<T>("grad/" + t.name, t.shape, grads.subspan(off, n)));
  }
}

template <typename T>
void dump_case(const std::string& dir, ex::LnPlacement ln, const char* dtype) {
  const ex::ModelConfig config = tiny_bert(ln);
  ex::SequentialModel<T> model(config, kModelSeed);
  Noise noise{kModelSeed};
  perturb<T>(model.embedding().layout(), model.embedding().params(), noise);
  for (int64_t i = 0; i < config.blocks; ++i) perturb<T>(model.block(i).layout(), model.block(i).params(), noise);
  perturb<T>(model.head().layout(), model.head().params(), noise);

  const ex::TokenData data = ex::TokenData::builtin();
  ex::MlmOptions options;
  options.short_rate = 0.5;  // some rows padded, some full (the sampler's default is 0.1)
  options.mask_rate = 0.3;   // more predicted positions than BERT's 0.15, for more head gradient
  const ex::MlmSampler sampler(data, options);
  if (sampler.vocab() != config.vocab) throw std::runtime_error("sampler vocabulary != model vocabulary");
  const int64_t seq = config.seq_len;
  const auto n = static_cast<size_t>(kBatch * seq);
  std::vector<int32_t> tokens(n), types(n), targets(n), lengths(static_cast<size_t>(kBatch));
  // The first step whose microbatch has a padded row and a full one (both likely at this short_rate).
  bool padded = false, full = false;
  for (int64_t step = 0; step < 100 && !(padded && full); ++step) {
    sampler.sample(kDataSeed, step, 0, 0, kBatch, seq, tokens.data(), types.data(), lengths.data(), targets.data());
    padded = full = false;
    for (int32_t len : lengths) {
      padded = padded || len < seq;
      full = full || len == seq;
    }
  }
  if (!padded || !full) throw std::runtime_error("no microbatch with both a padded and a full row in 100 steps");
  int64_t counted = 0;
  for (int32_t t : targets) counted += t != ex::kIgnoreTarget ? 1 : 0;
  if (counted == 0) throw std::runtime_error("the microbatch predicts no position");

  model.zero_grads();
  const double loss = model.forward_backward(tokens.data(), targets.data(), kBatch, seq, 1.0, types.data(),
                                             lengths.data());
  if (!std::isfinite(loss)) throw std::runtime_error("non-finite loss");

  std::vector<ex::TensorView> views;
  add_layer<T>(views, model.embedding().layout(), model.embedding().params(), model.embedding().grads());
  for (int64_t i = 0; i < config.blocks; ++i)
    add_layer<T>(views, model.block(i).layout(), model.block(i).params(), model.block(i).grads());
  add_layer<T>(views, model.head().layout(), model.head().params(), model.head().grads());

  Store store;
  store.ints.reserve(4);
  const auto add_ints = [&](const std::string& name, const std::vector<int32_t>& v, std::vector<int64_t> shape) {
    store.ints.emplace_back(v.begin(), v.end());
    views.push_back(ex::make_tensor_view<int64_t>(name, std::move(shape), std::span<const int64_t>(store.ints.back())));
  };
  add_ints("batch/tokens", tokens, {kBatch, seq});
  add_ints("batch/types", types, {kBatch, seq});
  add_ints("batch/lengths", lengths, {kBatch});
  add_ints("batch/targets", targets, {kBatch, seq});
  store.doubles.push_back({loss});
  views.push_back(ex::make_tensor_view<double>("loss", {1}, std::span<const double>(store.doubles.back())));

  const std::map<std::string, std::string> metadata = {
      {"vocab", std::to_string(config.vocab)},     {"seq_len", std::to_string(config.seq_len)},
      {"d_model", std::to_string(config.d_model)}, {"heads", std::to_string(config.heads)},
      {"blocks", std::to_string(config.blocks)},   {"ln", std::string(ex::to_string(ln))},
      {"dtype", dtype},                            {"counted", std::to_string(counted)}};
  const std::string path = dir + "/bert_" + std::string(ex::to_string(ln)) + "_" + dtype + ".safetensors";
  ex::write_safetensors(path, views, metadata);
  std::cout << path << ": loss " << loss << ", lengths";
  for (int32_t len : lengths) std::cout << ' ' << len;
  std::cout << ", " << counted << " predicted positions\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: bert_dump OUT_DIR\n";
    return 2;
  }
  try {
    const std::string dir = argv[1];
    for (ex::LnPlacement ln : {ex::LnPlacement::post, ex::LnPlacement::pre}) {
      dump_case<double>(dir, ln, "f64");
      dump_case<float>(dir, ln, "f32");
    }
  } catch (const std::exception& e) {
    std::cerr << "bert_dump: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
