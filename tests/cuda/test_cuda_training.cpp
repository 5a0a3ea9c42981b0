// The cuda backend under the model layers and the stage runtime: a whole GPT step (loss and every
// parameter gradient) in fp32 on the GPU against the cpu within 1e-4; the tiny 2BW plan with d = 2 run
// as two stages on one GPU (threads transport, device-to-device messages) against the same plan on the
// cpu for 10 steps, and a tiny BERT's (2BW and zb-h1) for 5; bf16 2BW with two weight versions and one
// fp32 master; bit-for-bit repeatability and resume from saved state; device messages and sums of the
// threads transport; the device arena's statistics; and the data-dependent errors the kernels flag.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/comm.hpp"
#include "pd2bw/executor/layers.hpp"
#include "pipeline_reference.hpp"

using namespace pd2bw::executor;
using pd2bw::test::max_norm_error;
using pd2bw::test::random_ids;
using pd2bw::testing::HashSource;
using pd2bw::testing::RecordedLosses;
using pd2bw::schemas::Schedule;

namespace {

constexpr double kStepTolerance = 1e-4;  // whole-step and pipeline parity in fp32

struct StepResult {
  double loss = 0;
  std::vector<std::vector<float>> grads;  // per layer
  std::vector<float> tied_dwte;           // the head's part of a tied table's gradient
};

std::vector<float> to_host_f32(Backend& be, const Buffer& b) {
  std::vector<float> out(static_cast<size_t>(b.numel()));
  be.to_host(b.view(), out.data());
  return out;
}

// One forward and backward of the whole model on `be` in fp32, from the same initial weights.
StepResult gpt_step(Backend& be, const ModelConfig& cfg, int64_t batch, int64_t seq, uint64_t seed) {
  const int64_t layers = cfg.layer_count(), n = batch * seq, c = cfg.d_model, table = cfg.vocab * c;
  std::vector<Buffer> p, g;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<float> init(static_cast<size_t>(layout_numel(layer_layout(cfg, l))));
    init_layer<float>(cfg, l, seed, std::span<float>(init));
    p.push_back(be.alloc(DType::f32, static_cast<int64_t>(init.size())));
    be.from_host(init.data(), p.back().view());
    g.push_back(be.alloc(DType::f32, static_cast<int64_t>(init.size())));
    be.fill_zero(g.back().view());
  }
  const auto tokens = random_ids(n, static_cast<int32_t>(cfg.vocab), seed + 1);
  const auto targets = random_ids(n, static_cast<int32_t>(cfg.vocab), seed + 2);
  Buffer tok = be.alloc(DType::i32, n), tgt = be.alloc(DType::i32, n), loss = be.alloc(DType::f64, 1);
  be.from_host(tokens.data(), tok.view());
  be.from_host(targets.data(), tgt.view());
  EmbeddingLayer embedding(cfg, be, DType::f32);
  std::vector<BlockLayer> blocks;
  for (int64_t j = 0; j < cfg.blocks; ++j) blocks.emplace_back(cfg, j, be, DType::f32);
  HeadLayer head(cfg, be, DType::f32);
  EmbeddingStash es;
  std::vector<BlockStash> bs(static_cast<size_t>(cfg.blocks));
  HeadStash hs;
  std::vector<Buffer> acts;
  acts.push_back(be.alloc(DType::f32, n * c));
  embedding.forward(p[0].view(), tok.view(), batch, seq, es, acts.back().view());
  for (size_t j = 0; j < blocks.size(); ++j) {
    Buffer out = be.alloc(DType::f32, n * c);
    blocks[j].forward(p[j + 1].view(), acts.back().view(), batch, seq, bs[j], out.view());
    acts.push_back(std::move(out));
  }
  const auto last = static_cast<size_t>(layers - 1);
  const ConstView wte = cfg.tie_embeddings ? ConstView(p[0].view().slice(0, table)) : ConstView{};
  Buffer dwte = be.alloc(DType::f32, table);
  be.fill_zero(dwte.view());
  head.forward(p[last].view(), wte, acts.back().view(), tgt.view(), batch, seq, hs, loss.view());
  Buffer ga = be.alloc(DType::f32, n * c), gb = be.alloc(DType::f32, n * c);
  head.backward(p[last].view(), wte, hs, 0.5, ga.view(), g[last].view(), cfg.tie_embeddings ? dwte.view() : View{});
  for (size_t j = blocks.size(); j-- > 0;) {
    blocks[j].backward(p[j + 1].view(), bs[j], ga.view(), gb.view(), g[j + 1].view());
    std::swap(ga, gb);
  }
  embedding.backward(es, ga.view(), g[0].view());
  StepResult r;
  be.to_host(loss.view(), &r.loss);
  for (const Buffer& b : g) r.grads.push_back(to_host_f32(be, b));
  if (cfg.tie_embeddings) r.tied_dwte = to_host_f32(be, dwte);
  return r;
}

void check_step(const ModelConfig& cfg, int64_t batch, int64_t seq) {
  auto cpu = make_backend("cpu"), gpu = make_backend("cuda");
  const StepResult a = gpt_step(*cpu, cfg, batch, seq, 7), b = gpt_step(*gpu, cfg, batch, seq, 7);
  CHECK(std::abs(b.loss - a.loss) <= kStepTolerance * std::abs(a.loss));
  for (int64_t l = 0; l < cfg.layer_count(); ++l)
    for (const TensorInfo& t : layer_layout(cfg, l)) {
      const auto at = a.grads[static_cast<size_t>(l)].begin() + t.offset, bt = b.grads[static_cast<size_t>(l)].begin() + t.offset;
      const std::vector<float> ga(at, at + t.numel()), gb(bt, bt + t.numel());
      const double err = max_norm_error(gb, ga);
      INFO(t.name << ": max-norm relative error " << err);
      CHECK(err <= kStepTolerance);
    }
  if (cfg.tie_embeddings) CHECK(max_norm_error(b.tied_dwte, a.tied_dwte) <= kStepTolerance);
}

using Job = ThreadsJob<float>;

std::unique_ptr<Job> run(const PipelineConfig& c, const MicrobatchSource& data, int64_t steps, RecordedLosses& losses) {
  auto job = std::make_unique<Job>(c);
  job->run(data, 0, steps, &losses);
  return job;
}

// Per (step, replica, microbatch) loss within `tolerance` (relative).
void check_losses(const RecordedLosses& gpu, const RecordedLosses& cpu, double tolerance) {
  REQUIRE(gpu.by_key.size() == cpu.by_key.size());
  for (const auto& entry : cpu.by_key) {
    const auto& key = entry.first;
    const double loss = entry.second;
    const double other = gpu.by_key.at(key);
    INFO("step " << std::get<0>(key) << " microbatch " << std::get<2>(key) << ": cpu " << loss << ", cuda " << other);
    CHECK(std::abs(other - loss) <= tolerance * std::abs(loss));
  }
}

// Rank r's weights of `version` on the GPU within kStepTolerance (max-norm relative) of the cpu's.
void check_weights(Job& cpu, Job& gpu, int64_t r, int64_t version) {
  const auto a = cpu.worker(r).weights(version);
  const std::vector<float> wa(a.begin(), a.end());
  const auto b = gpu.worker(r).weights(version);
  const std::vector<float> wb(b.begin(), b.end());
  CHECK(max_norm_error(wb, wa) <= kStepTolerance);
}

}  // namespace

TEST_CASE("a whole GPT step in fp32 on the GPU matches the cpu: the loss and every gradient within 1e-4") {
  SUBCASE("2 blocks, head dim 16, untied") { check_step({67, 33, 48, 3, 2, false}, 2, 33); }
  SUBCASE("2 blocks, tied embeddings, a shorter microbatch") { check_step({67, 33, 48, 3, 2, true}, 3, 17); }
  SUBCASE("1 block, head dim 64, 65 positions") { check_step({301, 70, 128, 2, 1, false}, 2, 65); }
}

TEST_CASE("the tiny 2BW plan, d = 2 as two stages on one GPU, equals the cpu run for 10 steps") {
  for (const bool sgd : {false, true}) {
    CAPTURE(sgd);
    PipelineConfig c = pd2bw::testing::tiny_pipeline(Schedule::two_bw, 2, 3, 1, 2);  // stage 0 recomputes
    if (sgd) c.optimizer.kind = pd2bw::schemas::Optimizer::sgd;
    const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
    RecordedLosses cpu_losses, gpu_losses;
    auto cpu = run(c, data, 10, cpu_losses);
    c.backend = "cuda";
    auto gpu = run(c, data, 10, gpu_losses);
    check_losses(gpu_losses, cpu_losses, kStepTolerance);
    for (int64_t r = 0; r < c.ranks_total(); ++r) {
      CAPTURE(r);
      CHECK(gpu->worker(r).versions_allocated() == 2);
      if (!sgd) continue;  // AdamW's m / sqrt(v) flips with the sign of a near-zero gradient: compare SGD's
      for (int64_t version : {9, 10}) check_weights(*cpu, *gpu, r, version);
    }
  }
}

TEST_CASE("bert: 2BW and zb-h1 with two stages on one GPU equal the cpu run (padded rows, ignored targets)") {
  for (const Schedule s : {Schedule::two_bw, Schedule::zb_h1}) {
    CAPTURE(static_cast<int>(s));
    PipelineConfig c = pd2bw::testing::tiny_pipeline(s, 2, 3, 1, 0);
    c.model.family = ModelFamily::bert;
    c.model.ln = LnPlacement::post;
    c.model.tie_embeddings = true;
    c.optimizer.kind = pd2bw::schemas::Optimizer::sgd;
    const HashSource data(c.model.vocab, c.microbatch_size, c.seq, true);
    RecordedLosses cpu_losses, gpu_losses;
    auto cpu = run(c, data, 5, cpu_losses);
    c.backend = "cuda";
    auto gpu = run(c, data, 5, gpu_losses);
    check_losses(gpu_losses, cpu_losses, kStepTolerance);
    for (int64_t r = 0; r < c.ranks_total(); ++r) {
      CAPTURE(r);
      check_weights(*cpu, *gpu, r, 5);
    }
  }
}

TEST_CASE("two stages on one GPU with replicas and tied embeddings: device messages, sums and the tied gradient") {
  PipelineConfig c = pd2bw::testing::tiny_pipeline(Schedule::two_bw, 2, 2, 2, 0);
  c.model.tie_embeddings = true;
  c.optimizer.kind = pd2bw::schemas::Optimizer::sgd;
  const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
  RecordedLosses cpu_losses, gpu_losses;
  auto cpu = run(c, data, 6, cpu_losses);
  c.backend = "cuda";
  auto gpu = run(c, data, 6, gpu_losses);
  check_losses(gpu_losses, cpu_losses, kStepTolerance);
  // The replicas' sums keep the two replicas of a stage bit-identical.
  for (int64_t stage = 0; stage < 2; ++stage) {
    const auto a = gpu->worker(stage * 2).weights(6);
    const std::vector<float> wa(a.begin(), a.end());
    const auto b = gpu->worker(stage * 2 + 1).weights(6);
    CHECK(std::equal(wa.begin(), wa.end(), b.begin(), b.end()));
  }
}

TEST_CASE("bf16 2BW on the GPU: two bf16 versions and one fp32 master per stage, losses near the cpu's bf16 run") {
  PipelineConfig c = pd2bw::testing::tiny_pipeline(Schedule::two_bw, 2, 2, 1, 0);
  c.compute = DType::bf16;
  const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
  RecordedLosses cpu_losses, gpu_losses;
  auto cpu = run(c, data, 10, cpu_losses);
  c.backend = "cuda";
  auto gpu = run(c, data, 10, gpu_losses);
  check_losses(gpu_losses, cpu_losses, 2e-2);  // bf16 roundings differ in order, not in kind
  for (int64_t r = 0; r < c.ranks_total(); ++r) {
    CHECK(gpu->worker(r).versions_allocated() == 2);
    CHECK(gpu->worker(r).master_buffers() == 1);
    CHECK(gpu->worker(r).compute_dtype() == DType::bf16);
    const auto older = gpu->worker(r).weights(9);  // the bf16 copy, widened exactly
    CHECK(std::all_of(older.begin(), older.end(), [](float x) { return static_cast<float>(bf16(x)) == x; }));
    CHECK(gpu->worker(r).peak_bytes() > 0);
  }
}

TEST_CASE("GPU runs repeat bit for bit, and resuming from the saved state continues exactly") {
  PipelineConfig c = pd2bw::testing::tiny_pipeline(Schedule::two_bw, 2, 3, 1, 2);
  c.backend = "cuda";
  const HashSource data(c.model.vocab, c.microbatch_size, c.seq);
  RecordedLosses whole_losses, again_losses, parts;
  auto whole = run(c, data, 6, whole_losses);
  auto again = run(c, data, 6, again_losses);
  CHECK(again_losses.by_key == whole_losses.by_key);
  Job first(c), second(c);
  first.run(data, 0, 3, &parts);
  for (int64_t r = 0; r < first.ranks(); ++r) {
    auto& a = first.worker(r);
    const auto prev = a.weights(2);
    const std::vector<float> previous(prev.begin(), prev.end());
    const auto cur = a.weights(3);
    const std::vector<float> current(cur.begin(), cur.end());
    const auto m1 = a.moment1();
    const std::vector<float> first_moment(m1.begin(), m1.end());
    second.worker(r).restore(3, previous, current, first_moment, a.moment2());
  }
  second.run(data, 3, 3, &parts);
  CHECK(parts.by_key == whole_losses.by_key);
  for (int64_t r = 0; r < second.ranks(); ++r) {
    const auto a = whole->worker(r).weights(6);
    const std::vector<float> wa(a.begin(), a.end());
    const auto b = second.worker(r).weights(6);
    CHECK(std::equal(wa.begin(), wa.end(), b.begin(), b.end()));
  }
}

TEST_CASE("the threads transport moves device buffers between threads and sums them in the fixed order") {
  auto comms = make_threads_comms(2);
  REQUIRE(comms[0]->accepts(MemoryKind::device));
  const int64_t n = 100003;
  const auto a = pd2bw::test::random_values<float>(n, 5), b = pd2bw::test::random_values<float>(n, 6);
  std::vector<float> received(static_cast<size_t>(n)), summed0(received), summed1(received);
  run_on_threads(comms, [&](Comm& comm) {
    auto be = make_backend("cuda");
    Buffer mine = be->alloc(DType::f32, n), other = be->alloc(DType::f32, n);
    be->from_host((comm.rank() == 0 ? a : b).data(), mine.view());
    const Stream stream{be->native_stream()};
    const MessageBuffer m{mine.data<void>(), static_cast<size_t>(mine.bytes()), MemoryKind::device};
    const MessageBuffer o{other.data<void>(), static_cast<size_t>(other.bytes()), MemoryKind::device};
    if (comm.rank() == 0) {
      comm.send(1, 1, m, stream);
      be->fill_zero(mine.view());  // after the send on the same stream: the message is already copied
      be->from_host(a.data(), mine.view());
    } else {
      comm.recv(0, 1, o, stream);
      be->to_host(other.view(), received.data());
    }
    const Group g = comm.group({0, 1});
    comm.allreduce_sum(g, ScalarType::f32, m, stream);
    be->to_host(mine.view(), (comm.rank() == 0 ? summed0 : summed1).data());
  });
  CHECK(received == a);
  std::vector<float> expected(static_cast<size_t>(n));
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = a[i] + b[i];
  CHECK(summed0 == expected);
  CHECK(summed1 == expected);
}

TEST_CASE("the device arena counts current and peak bytes like the cpu's and reuses blocks by size") {
  auto be = make_backend("cuda");
  CHECK(be->name() == "cuda");
  CHECK_FALSE(be->host_visible());
  CHECK(be->native_stream() != nullptr);
  CHECK(be->supports(DType::bf16));
  CHECK(be->supports(DType::f32));
  CHECK_FALSE(be->supports(DType::f64));
  Buffer x = be->alloc(DType::f32, 10), y = be->alloc(DType::bf16, 7);
  CHECK(be->memory().current_bytes == 54);
  CHECK(be->memory().peak_bytes == 54);
  void* first = x.data<void>();
  x.reset();
  CHECK(be->memory().current_bytes == 14);
  Buffer again = be->alloc(DType::f32, 10);
  CHECK(again.data<void>() == first);
  CHECK(be->memory().fresh_allocations == 2);
  be->reset_peak();
  CHECK(be->memory().peak_bytes == 54);
  const TimerMark t0 = be->mark(), t1 = be->mark();
  CHECK(be->elapsed_ms(t0, t1) >= 0.0);
  CHECK_THROWS_AS(be->alloc(DType::f32, int64_t{1} << 46), pd2bw::Error);  // 256 TiB: out of memory, reported
  Buffer after = be->alloc(DType::f32, 1000);  // and the backend still works
  be->fill_zero(after.view());
  std::vector<float> host(1000, 1.0F);
  be->to_host(after.view(), host.data());
  CHECK(host[999] == 0.0F);
}

TEST_CASE("kernels flag a token or target out of range; the next synchronising call throws and the flag clears") {
  auto be = make_backend("cuda");
  const int64_t v = 5, c = 4, n = 3;
  Buffer wte = be->alloc(DType::f32, v * c), wpe = be->alloc(DType::f32, n * c), out = be->alloc(DType::f32, n * c);
  be->fill_zero(wte.view());
  be->fill_zero(wpe.view());
  const std::vector<int32_t> bad = {1, 9, 2};
  Buffer tokens = be->alloc(DType::i32, n);
  be->from_host(bad.data(), tokens.view());
  be->embedding_forward(tokens.view(), wte.view(), wpe.view(), out.view(), 1, n, c, v);
  try {
    be->synchronize();
    FAIL("a bad token was not reported");
  } catch (const pd2bw::Error& e) {
    CHECK(std::string(e.what()).find("token 9") != std::string::npos);
  }
  CHECK_NOTHROW(be->synchronize());
  Buffer logits = be->alloc(DType::f32, n * v), lse = be->alloc(DType::f32, n), loss = be->alloc(DType::f64, 1);
  be->fill_zero(logits.view());
  be->cross_entropy_forward(logits.view(), tokens.view(), lse.view(), loss.view(), n, v);
  double value = 0;
  CHECK_THROWS_AS(be->to_host(loss.view(), &value), pd2bw::Error);
  CHECK_THROWS_AS(be->linear_forward(out.view(), wte.view(), {}, out.view(), n, c, v), pd2bw::UsageError);  // sizes
  Buffer half = be->alloc(DType::bf16, n * c);
  CHECK_THROWS_AS(be->gelu_forward(out.view(), half.view(), n * c, GeluKind::tanh), pd2bw::UsageError);  // mixed dtypes
}
