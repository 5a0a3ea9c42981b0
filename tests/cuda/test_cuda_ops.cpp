// CUDA-vs-CPU parity of every op of the cuda backend, table-driven over odd sizes (1, 7, 127 and one
// either side of the kernels' block sizes: 32, 64 and 256), in fp32 (max-norm relative error < 1e-5)
// and bf16 (< 1e-2) against the cpu backend in the same dtype on the same inputs: GPT's ops and BERT's
// (bidirectional attention with key padding, erf GELU, ignored targets, token types). Optimizer steps
// and casts are compared bit for bit: their kernels promise the reference's bits. Data errors (a bad
// sequence length or token type) must surface as Error at the next synchronising call.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "cuda_test_util.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/data.hpp"
#include "pd2bw/executor/optimizer.hpp"

using namespace pd2bw::executor;
using pd2bw::test::random_ids;
using pd2bw::test::Twin;

namespace {

constexpr DType kDtypes[] = {DType::f32, DType::bf16};

struct Backends {
  std::unique_ptr<Backend> cpu = make_backend("cpu");
  std::unique_ptr<Backend> gpu = make_backend("cuda");
};

struct AttentionCase {
  int64_t b, t, c, h;
  std::vector<int32_t> lengths;  // (B) for a key padding mask, or empty
};

// Attention forward and backward of one case on both backends (causal, or bidirectional with the case's
// lengths), compared at the dtype's tolerance.
void check_attention(Backends& be, DType t, const AttentionCase& s, bool causal) {
  const int64_t n = s.b * s.t;
  const AttentionStash cpu_stash = be.cpu->attention_stash(t, s.b, s.t, s.h);
  const AttentionStash gpu_stash = be.gpu->attention_stash(t, s.b, s.t, s.h);
  CHECK(gpu_stash.dtype == DType::f32);
  CHECK(gpu_stash.numel == s.b * s.h * s.t);  // the log-sum-exp, never (T, T)
  Twin qkv = Twin::random(*be.gpu, t, n * 3 * s.c, 31, 2.0), out = Twin::random(*be.gpu, t, n * s.c, 0);
  Twin dout = Twin::random(*be.gpu, t, n * s.c, 32), dqkv = Twin::random(*be.gpu, t, n * 3 * s.c, 0);
  Twin lengths = Twin::ids(*be.gpu, s.lengths);
  const AttentionMask cpu_mask = causal ? AttentionMask{} : AttentionMask::bidirectional(lengths.cpu());
  const AttentionMask gpu_mask = causal ? AttentionMask{} : AttentionMask::bidirectional(lengths.gpu());
  std::vector<std::byte> probs(static_cast<size_t>(cpu_stash.numel * dtype_bytes(cpu_stash.dtype)));
  const View cpu_probs{probs.data(), cpu_stash.dtype, cpu_stash.numel};
  Buffer lse = be.gpu->alloc(gpu_stash.dtype, gpu_stash.numel);
  be.cpu->attention_forward(qkv.cpu(), out.cpu(), cpu_probs, s.b, s.t, s.c, s.h, cpu_mask);
  be.gpu->attention_forward(qkv.gpu(), out.gpu(), lse.view(), s.b, s.t, s.c, s.h, gpu_mask);
  PD2BW_CHECK_PARITY(out, t, "out");
  be.cpu->attention_backward(dout.cpu(), qkv.cpu(), out.cpu(), cpu_probs, dqkv.cpu(), s.b, s.t, s.c, s.h, cpu_mask);
  be.gpu->attention_backward(dout.gpu(), qkv.gpu(), out.gpu(), lse.view(), dqkv.gpu(), s.b, s.t, s.c, s.h, gpu_mask);
  PD2BW_CHECK_PARITY(dqkv, t, "dqkv");
}

// Targets: (n) ids in [0, v), each row ignored (kIgnoreTarget) with probability about 1/3.
std::vector<int32_t> targets_with_ignored(int64_t n, int64_t v, uint64_t seed) {
  std::vector<int32_t> ids = random_ids(n, static_cast<int32_t>(v), seed);
  const std::vector<int32_t> coin = random_ids(n, 3, seed + 1);
  for (size_t i = 0; i < ids.size(); ++i)
    if (coin[i] == 0) ids[i] = kIgnoreTarget;
  return ids;
}

// The cpu's and the gpu's cross-entropy on the same logits and targets: loss, lse and dlogits (also in
// place), at the dtype's tolerance.
void check_cross_entropy(Backends& be, DType t, int64_t n, int64_t v, const std::vector<int32_t>& ids) {
  Twin targets = Twin::ids(*be.gpu, ids);
  Twin logits = Twin::random(*be.gpu, t, n * v, 52, 5.0), dlogits = Twin::random(*be.gpu, t, n * v, 0);
  Twin lse = Twin::random(*be.gpu, DType::f32, n, 0);
  double cpu_loss = 0, gpu_loss = 0;
  Buffer loss = be.gpu->alloc(DType::f64, 1);
  be.cpu->cross_entropy_forward(logits.cpu(), targets.cpu(), lse.cpu(), view_of(&cpu_loss, 1), n, v);
  be.gpu->cross_entropy_forward(logits.gpu(), targets.gpu(), lse.gpu(), loss.view(), n, v);
  be.gpu->to_host(loss.view(), &gpu_loss);
  INFO("loss: cpu " << cpu_loss << ", gpu " << gpu_loss);
  CHECK(std::abs(gpu_loss - cpu_loss) <= pd2bw::test::kFp32Tolerance * std::abs(cpu_loss));
  PD2BW_CHECK_PARITY(lse, DType::f32, "lse");
  be.cpu->cross_entropy_backward(logits.cpu(), targets.cpu(), lse.cpu(), dlogits.cpu(), n, v, 1.0 / 3.0);
  be.gpu->cross_entropy_backward(logits.gpu(), targets.gpu(), lse.gpu(), dlogits.gpu(), n, v, 1.0 / 3.0);
  PD2BW_CHECK_PARITY(dlogits, t, "dlogits");
  const std::vector<float> grads = dlogits.gpu_values();
  for (int64_t i = 0; i < n; ++i)  // an ignored row's gradient is exactly zero
    if (ids[static_cast<size_t>(i)] == kIgnoreTarget)
      CHECK(std::all_of(grads.begin() + i * v, grads.begin() + (i + 1) * v, [](float g) { return g == 0.0F; }));
  be.cpu->cross_entropy_backward(logits.cpu(), targets.cpu(), lse.cpu(), logits.cpu(), n, v, 1.0 / 3.0);
  be.gpu->cross_entropy_backward(logits.gpu(), targets.gpu(), lse.gpu(), logits.gpu(), n, v, 1.0 / 3.0);
  PD2BW_CHECK_PARITY(logits, t, "dlogits in place");
}

}  // namespace

TEST_CASE("linear forward and backward match the cpu backend") {
  Backends be;
  struct Case {
    int64_t n, in, out;
    bool bias;
  };
  // (7, 3, 5): the bias sits 30 bytes into the buffer, too unaligned for the epilogue (bias kernel path).
  const Case cases[] = {{1, 1, 1, true}, {7, 3, 5, true}, {7, 8, 24, true}, {65, 33, 17, false},
                        {127, 64, 96, true}, {257, 127, 65, true}, {63, 256, 257, false}};
  for (DType t : kDtypes)
    for (const Case& c : cases) {
      CAPTURE(to_string(t));
      CAPTURE(c.n);
      CAPTURE(c.in);
      CAPTURE(c.out);
      Twin x = Twin::random(*be.gpu, t, c.n * c.in, 1);
      Twin wb = Twin::random(*be.gpu, t, c.out * c.in + c.out, 2, 0.3);  // weight then bias, one buffer
      Twin y = Twin::random(*be.gpu, t, c.n * c.out, 0), dy = Twin::random(*be.gpu, t, c.n * c.out, 3);
      Twin dx = Twin::random(*be.gpu, t, c.n * c.in, 0);
      Twin dw = Twin::random(*be.gpu, DType::f32, c.out * c.in, 4), db = Twin::random(*be.gpu, DType::f32, c.out, 5);
      const int64_t wn = c.out * c.in;
      const auto bias = [&](Twin& tw, bool gpu) { return c.bias ? (gpu ? tw.gpu_slice(wn, c.out) : tw.cpu_slice(wn, c.out)) : View{}; };
      be.cpu->linear_forward(x.cpu(), wb.cpu_slice(0, wn), bias(wb, false), y.cpu(), c.n, c.in, c.out);
      be.gpu->linear_forward(x.gpu(), wb.gpu_slice(0, wn), bias(wb, true), y.gpu(), c.n, c.in, c.out);
      PD2BW_CHECK_PARITY(y, t, "y");
      be.cpu->linear_backward(dy.cpu(), x.cpu(), wb.cpu_slice(0, wn), dx.cpu(), dw.cpu(), c.bias ? db.cpu() : View{}, c.n,
                              c.in, c.out);
      be.gpu->linear_backward(dy.gpu(), x.gpu(), wb.gpu_slice(0, wn), dx.gpu(), dw.gpu(), c.bias ? db.gpu() : View{}, c.n,
                              c.in, c.out);
      PD2BW_CHECK_PARITY(dx, t, "dx");
      PD2BW_CHECK_PARITY(dw, DType::f32, "dweight (+=)");
      PD2BW_CHECK_PARITY(db, DType::f32, "dbias (+=)");
      // Without dx (the first layer's input needs none): dweight accumulates a second time.
      be.cpu->linear_backward(dy.cpu(), x.cpu(), wb.cpu_slice(0, wn), {}, dw.cpu(), {}, c.n, c.in, c.out);
      be.gpu->linear_backward(dy.gpu(), x.gpu(), wb.gpu_slice(0, wn), {}, dw.gpu(), {}, c.n, c.in, c.out);
      PD2BW_CHECK_PARITY(dw, DType::f32, "dweight twice");
    }
}

TEST_CASE("layer norm forward and backward match the cpu backend") {
  Backends be;
  const std::pair<int64_t, int64_t> cases[] = {{1, 1}, {7, 7}, {63, 32}, {64, 33}, {65, 127}, {257, 256}, {3, 1000}};
  for (DType t : kDtypes)
    for (const auto& shape : cases) {
      const int64_t n = shape.first, c = shape.second;  // not a structured binding: CAPTURE's lambda uses them
      CAPTURE(to_string(t));
      CAPTURE(n);
      CAPTURE(c);
      Twin x = Twin::random(*be.gpu, t, n * c, 11, 2.0), gamma = Twin::random(*be.gpu, t, c, 12),
           beta = Twin::random(*be.gpu, t, c, 13), y = Twin::random(*be.gpu, t, n * c, 0),
           dy = Twin::random(*be.gpu, t, n * c, 14), dx = Twin::random(*be.gpu, t, n * c, 0);
      Twin mean = Twin::random(*be.gpu, DType::f32, n, 0), rstd = Twin::random(*be.gpu, DType::f32, n, 0),
           dgamma = Twin::random(*be.gpu, DType::f32, c, 15), dbeta = Twin::random(*be.gpu, DType::f32, c, 16);
      be.cpu->layernorm_forward(x.cpu(), gamma.cpu(), beta.cpu(), y.cpu(), mean.cpu(), rstd.cpu(), n, c);
      be.gpu->layernorm_forward(x.gpu(), gamma.gpu(), beta.gpu(), y.gpu(), mean.gpu(), rstd.gpu(), n, c);
      PD2BW_CHECK_PARITY(y, t, "y");
      PD2BW_CHECK_PARITY(mean, DType::f32, "mean");
      PD2BW_CHECK_PARITY(rstd, DType::f32, "rstd");
      // Each backward reads its own forward's statistics (they agree to the tolerance above).
      be.cpu->layernorm_backward(dy.cpu(), x.cpu(), gamma.cpu(), mean.cpu(), rstd.cpu(), dx.cpu(), dgamma.cpu(),
                                 dbeta.cpu(), n, c);
      be.gpu->layernorm_backward(dy.gpu(), x.gpu(), gamma.gpu(), mean.gpu(), rstd.gpu(), dx.gpu(), dgamma.gpu(),
                                 dbeta.gpu(), n, c);
      PD2BW_CHECK_PARITY(dx, t, "dx");
      PD2BW_CHECK_PARITY(dgamma, DType::f32, "dgamma (+=)");
      PD2BW_CHECK_PARITY(dbeta, DType::f32, "dbeta (+=)");
    }
}

TEST_CASE("GELU forward and backward match the cpu backend in both forms (tanh, erf), also in place") {
  Backends be;
  for (GeluKind kind : {GeluKind::tanh, GeluKind::erf})
    for (DType t : kDtypes)
      for (int64_t n : {1, 7, 255, 256, 257, 100003}) {
        CAPTURE(kind == GeluKind::erf ? "erf" : "tanh");
        CAPTURE(to_string(t));
        CAPTURE(n);
        Twin x = Twin::random(*be.gpu, t, n, 21, 4.0), y = Twin::random(*be.gpu, t, n, 0);
        Twin dy = Twin::random(*be.gpu, t, n, 22), dx = Twin::random(*be.gpu, t, n, 0);
        be.cpu->gelu_forward(x.cpu(), y.cpu(), n, kind);
        be.gpu->gelu_forward(x.gpu(), y.gpu(), n, kind);
        PD2BW_CHECK_PARITY(y, t, "y");
        be.cpu->gelu_backward(dy.cpu(), x.cpu(), dx.cpu(), n, kind);
        be.gpu->gelu_backward(dy.gpu(), x.gpu(), dx.gpu(), n, kind);
        PD2BW_CHECK_PARITY(dx, t, "dx");
        be.cpu->gelu_backward(dy.cpu(), x.cpu(), dy.cpu(), n, kind);  // dx may alias dy
        be.gpu->gelu_backward(dy.gpu(), x.gpu(), dy.gpu(), n, kind);
        PD2BW_CHECK_PARITY(dy, t, "dx in place");
        be.cpu->gelu_forward(x.cpu(), x.cpu(), n, kind);  // y may alias x
        be.gpu->gelu_forward(x.gpu(), x.gpu(), n, kind);
        PD2BW_CHECK_PARITY(x, t, "y in place");
      }
}

TEST_CASE("causal attention forward and backward match the cpu backend over head dims 1 to 128") {
  Backends be;
  // Head dims 1, 7, 16, 32, 33, 64, 65, 128 (one, two and four lanes per row); T on either side of the
  // 32-row tiles and 64-row blocks.
  const AttentionCase cases[] = {{1, 1, 2, 2, {}},   {2, 7, 21, 3, {}},   {3, 32, 96, 3, {}},   {1, 33, 64, 2, {}},
                                 {2, 65, 66, 2, {}}, {1, 64, 128, 2, {}}, {1, 129, 130, 2, {}}, {1, 63, 256, 2, {}},
                                 {2, 31, 48, 3, {}}, {1, 127, 64, 4, {}}};
  for (DType t : kDtypes)
    for (const AttentionCase& s : cases) {
      CAPTURE(to_string(t));
      CAPTURE(s.b);
      CAPTURE(s.t);
      CAPTURE(s.c);
      CAPTURE(s.h);
      check_attention(be, t, s, true);
    }
}

TEST_CASE("bidirectional attention, with and without key padding lengths, matches the cpu backend") {
  Backends be;
  // Lengths of 1 and T, T off the 32-row tiles and 64-row blocks, several heads of one, two and four lanes
  // per row; (3, 129): a 64-key block that is all padding in the sequences of length 1 and 40.
  const AttentionCase cases[] = {{1, 1, 2, 2, {}},
                                 {1, 1, 2, 2, {1}},
                                 {2, 7, 21, 3, {}},
                                 {2, 7, 21, 3, {1, 7}},
                                 {3, 33, 64, 4, {33, 1, 17}},
                                 {2, 65, 66, 2, {64, 65}},
                                 {2, 65, 66, 2, {}},
                                 {3, 129, 96, 3, {1, 40, 129}},
                                 {2, 31, 256, 2, {31, 2}},
                                 {1, 97, 128, 1, {70}}};
  for (DType t : kDtypes)
    for (const AttentionCase& s : cases) {
      CAPTURE(to_string(t));
      CAPTURE(s.b);
      CAPTURE(s.t);
      CAPTURE(s.c);
      CAPTURE(s.h);
      CAPTURE(s.lengths.size());
      check_attention(be, t, s, false);
    }
}

TEST_CASE("a sequence length outside [1, T] raises Error at the next synchronising call, then clears") {
  Backends be;
  const int64_t b = 2, t = 5, c = 4, h = 2;
  Twin qkv = Twin::random(*be.gpu, DType::f32, b * t * 3 * c, 81);
  Twin out = Twin::random(*be.gpu, DType::f32, b * t * c, 0);
  Twin dqkv = Twin::random(*be.gpu, DType::f32, b * t * 3 * c, 0);
  Buffer lse = be.gpu->alloc(DType::f32, b * h * t);
  std::vector<float> probs(static_cast<size_t>(b * h * t * t));
  const View cpu_probs = view_of(probs.data(), b * h * t * t);
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{5, 0}, std::vector<int32_t>{6, 5}}) {
    const int32_t wrong = bad[0] == 6 ? 6 : 0;
    CAPTURE(wrong);
    Twin lengths = Twin::ids(*be.gpu, bad);
    const AttentionMask mask = AttentionMask::bidirectional(lengths.gpu());
    CHECK_NOTHROW(be.gpu->attention_forward(qkv.gpu(), out.gpu(), lse.view(), b, t, c, h, mask));  // asynchronous
    try {
      be.gpu->synchronize();
      FAIL("a bad length was not reported");
    } catch (const pd2bw::Error& e) {
      CHECK(std::string(e.what()).find("has length " + std::to_string(wrong)) != std::string::npos);
    }
    CHECK_NOTHROW(be.gpu->synchronize());  // the flag cleared
    be.gpu->attention_backward(out.gpu(), qkv.gpu(), out.gpu(), lse.view(), dqkv.gpu(), b, t, c, h, mask);
    CHECK_THROWS_AS(be.gpu->synchronize(), pd2bw::Error);  // the backward checks them too
    CHECK_THROWS_AS(be.cpu->attention_forward(qkv.cpu(), out.cpu(), cpu_probs, b, t, c, h,
                                              AttentionMask::bidirectional(lengths.cpu())),
                    pd2bw::Error);  // as the reference
  }
}

TEST_CASE("embedding forward and backward match the cpu backend, with repeated and GPT-2-sized vocabularies") {
  Backends be;
  struct Case {
    int64_t b, t, c, v;
  };
  const Case cases[] = {{1, 1, 1, 1}, {2, 7, 7, 5}, {3, 65, 33, 11}, {2, 64, 256, 50257}, {4, 257, 32, 3}};
  for (DType t : kDtypes)
    for (const Case& s : cases) {
      CAPTURE(to_string(t));
      CAPTURE(s.b);
      CAPTURE(s.t);
      CAPTURE(s.c);
      CAPTURE(s.v);
      const int64_t n = s.b * s.t, tmax = s.t + 3;
      Twin tokens = Twin::ids(*be.gpu, random_ids(n, static_cast<int32_t>(s.v), 41));
      Twin wte = Twin::random(*be.gpu, t, s.v * s.c, 42), wpe = Twin::random(*be.gpu, t, tmax * s.c, 43);
      Twin out = Twin::random(*be.gpu, t, n * s.c, 0), dout = Twin::random(*be.gpu, t, n * s.c, 44);
      Twin dwte = Twin::random(*be.gpu, DType::f32, s.v * s.c, 45), dwpe = Twin::random(*be.gpu, DType::f32, tmax * s.c, 46);
      be.cpu->embedding_forward(tokens.cpu(), wte.cpu(), wpe.cpu(), out.cpu(), s.b, s.t, s.c, s.v);
      be.gpu->embedding_forward(tokens.gpu(), wte.gpu(), wpe.gpu(), out.gpu(), s.b, s.t, s.c, s.v);
      PD2BW_CHECK_PARITY(out, t, "out");
      be.cpu->embedding_backward(tokens.cpu(), dout.cpu(), dwte.cpu(), dwpe.cpu(), s.b, s.t, s.c);
      be.gpu->embedding_backward(tokens.gpu(), dout.gpu(), dwte.gpu(), dwpe.gpu(), s.b, s.t, s.c);
      PD2BW_CHECK_PARITY(dwte, DType::f32, "dwte (+=)");
      PD2BW_CHECK_PARITY(dwpe, DType::f32, "dwpe (+=)");
    }
}

TEST_CASE("cross-entropy forward and backward match the cpu backend, in place too") {
  Backends be;
  const std::pair<int64_t, int64_t> cases[] = {{1, 1}, {7, 7}, {65, 127}, {257, 33}, {3, 50257}, {64, 256}};
  for (DType t : kDtypes)
    for (const auto& shape : cases) {
      const int64_t n = shape.first, v = shape.second;
      CAPTURE(to_string(t));
      CAPTURE(n);
      CAPTURE(v);
      check_cross_entropy(be, t, n, v, random_ids(n, static_cast<int32_t>(v), 51));
    }
}

TEST_CASE("cross-entropy counts only rows whose target is not ignored; all ignored gives 0 and no gradient") {
  Backends be;
  const std::pair<int64_t, int64_t> cases[] = {{7, 7}, {65, 127}, {257, 33}, {300, 5}};
  for (DType t : kDtypes) {
    CAPTURE(to_string(t));
    for (const auto& shape : cases) {
      const int64_t n = shape.first, v = shape.second;
      CAPTURE(n);
      CAPTURE(v);
      check_cross_entropy(be, t, n, v, targets_with_ignored(n, v, 57));
    }
    CAPTURE("all ignored");
    check_cross_entropy(be, t, 9, 11, std::vector<int32_t>(9, kIgnoreTarget));  // loss 0, dlogits 0, exactly
  }
  // Any other target outside [0, V) is still an error.
  const int64_t n = 3, v = 5;
  Twin targets = Twin::ids(*be.gpu, {kIgnoreTarget, -1, 3});
  Twin logits = Twin::random(*be.gpu, DType::f32, n * v, 60), lse = Twin::random(*be.gpu, DType::f32, n, 0);
  Buffer loss = be.gpu->alloc(DType::f64, 1);
  double value = 0;
  be.gpu->cross_entropy_forward(logits.gpu(), targets.gpu(), lse.gpu(), loss.view(), n, v);
  CHECK_THROWS_AS(be.gpu->to_host(loss.view(), &value), pd2bw::Error);
  CHECK_THROWS_AS(be.cpu->cross_entropy_forward(logits.cpu(), targets.cpu(), lse.cpu(), view_of(&value, 1), n, v),
                  pd2bw::Error);
}

TEST_CASE("token type embedding forward and backward match the cpu backend; a bad type raises Error") {
  Backends be;
  struct Case {
    int64_t n, c, r;
  };
  const Case cases[] = {{1, 1, 1}, {7, 5, 2}, {257, 33, 2}, {64, 256, 3}, {130, 768, 2}};
  for (DType t : kDtypes)
    for (const Case& s : cases) {
      CAPTURE(to_string(t));
      CAPTURE(s.n);
      CAPTURE(s.c);
      CAPTURE(s.r);
      Twin types = Twin::ids(*be.gpu, random_ids(s.n, static_cast<int32_t>(s.r), 71));
      Twin table = Twin::random(*be.gpu, t, s.r * s.c, 72), out = Twin::random(*be.gpu, t, s.n * s.c, 73);
      Twin dout = Twin::random(*be.gpu, t, s.n * s.c, 74), dtable = Twin::random(*be.gpu, DType::f32, s.r * s.c, 75);
      be.cpu->type_embedding_forward(types.cpu(), table.cpu(), out.cpu(), s.n, s.c, s.r);
      be.gpu->type_embedding_forward(types.gpu(), table.gpu(), out.gpu(), s.n, s.c, s.r);
      PD2BW_CHECK_PARITY(out, t, "out (+=)");
      be.cpu->type_embedding_backward(types.cpu(), dout.cpu(), dtable.cpu(), s.n, s.c, s.r);
      be.gpu->type_embedding_backward(types.gpu(), dout.gpu(), dtable.gpu(), s.n, s.c, s.r);
      PD2BW_CHECK_PARITY(dtable, DType::f32, "dtable (+=)");
      if (t == DType::f32) CHECK(dtable.gpu_values() == dtable.cpu_values());  // same sums in the same order
    }
  const int64_t n = 4, c = 3, r = 2;
  Twin types = Twin::ids(*be.gpu, {0, 1, 2, -1});
  Twin table = Twin::random(*be.gpu, DType::f32, r * c, 76), out = Twin::random(*be.gpu, DType::f32, n * c, 0);
  CHECK_NOTHROW(be.gpu->type_embedding_forward(types.gpu(), table.gpu(), out.gpu(), n, c, r));  // asynchronous
  try {
    be.gpu->synchronize();
    FAIL("a bad token type was not reported");
  } catch (const pd2bw::Error& e) {
    CHECK(std::string(e.what()).find("token type 2 at position 2") != std::string::npos);
  }
  CHECK_NOTHROW(be.gpu->synchronize());
  CHECK_THROWS_AS(be.cpu->type_embedding_forward(types.cpu(), table.cpu(), out.cpu(), n, c, r), pd2bw::Error);
}

TEST_CASE("add and accumulate match the cpu backend") {
  Backends be;
  for (DType t : kDtypes)
    for (int64_t n : {1, 7, 257, 65537}) {
      CAPTURE(to_string(t));
      CAPTURE(n);
      Twin a = Twin::random(*be.gpu, t, n, 61), b = Twin::random(*be.gpu, t, n, 62);
      Twin out = Twin::random(*be.gpu, t, n, 0), acc = Twin::random(*be.gpu, t, n, 63);
      be.cpu->add(a.cpu(), b.cpu(), out.cpu(), n);
      be.gpu->add(a.gpu(), b.gpu(), out.gpu(), n);
      CHECK(out.gpu_values() == out.cpu_values());  // one rounded addition: the same bits
      be.cpu->accumulate(acc.cpu(), a.cpu(), n);
      be.gpu->accumulate(acc.gpu(), a.gpu(), n);
      CHECK(acc.gpu_values() == acc.cpu_values());
      be.cpu->add(a.cpu(), b.cpu(), a.cpu(), n);  // out may alias a
      be.gpu->add(a.gpu(), b.gpu(), a.gpu(), n);
      CHECK(a.gpu_values() == a.cpu_values());
    }
}

TEST_CASE("copy casts like the cpu backend, bit for bit, and fill_zero zeroes") {
  Backends be;
  auto values = pd2bw::test::random_values<double>(1000, 71, 100.0);
  // Doubles just off bf16 midpoints, which rounding through float would get wrong.
  for (double d : {1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), 1.0 + 3 * std::ldexp(1.0, -8) - std::ldexp(1.0, -30),
                   -0.0, 1e300, -1e-300})
    values.push_back(d);
  const auto n = static_cast<int64_t>(values.size());
  Buffer d64 = be.gpu->alloc(DType::f64, n), f32 = be.gpu->alloc(DType::f32, n), h16 = be.gpu->alloc(DType::bf16, n),
         back = be.gpu->alloc(DType::f64, n);
  be.gpu->from_host(values.data(), d64.view());
  std::vector<float> cpu_f(values.size());
  std::vector<bf16> cpu_h(values.size()), cpu_hd(values.size()), gpu_h(values.size());
  be.cpu->copy(view_of(values.data(), n), view_of(cpu_f.data(), n));
  be.cpu->copy(view_of(cpu_f.data(), n), view_of(cpu_h.data(), n));
  be.cpu->copy(view_of(values.data(), n), view_of(cpu_hd.data(), n));
  be.gpu->copy(d64.view(), f32.view());
  be.gpu->copy(f32.view(), h16.view());
  be.gpu->to_host(h16.view(), gpu_h.data());
  CHECK(gpu_h == cpu_h);  // float -> bf16
  be.gpu->copy(d64.view(), h16.view());
  be.gpu->to_host(h16.view(), gpu_h.data());
  CHECK(gpu_h == cpu_hd);  // double -> bf16, one rounding
  be.gpu->copy(h16.view(), back.view());
  std::vector<double> widened(values.size());
  be.gpu->to_host(back.view(), widened.data());
  for (size_t i = 0; i < widened.size(); ++i) CHECK(widened[i] == static_cast<double>(static_cast<float>(cpu_hd[i])));
  be.gpu->fill_zero(f32.view());
  std::vector<float> zeros(values.size(), 1.0F);
  be.gpu->to_host(f32.view(), zeros.data());
  CHECK(std::all_of(zeros.begin(), zeros.end(), [](float x) { return x == 0.0F; }));
  CHECK_THROWS_AS(be.gpu->copy(f32.view(), h16.view().slice(0, n - 1)), pd2bw::UsageError);
}

TEST_CASE("AdamW and SGD steps give the reference's bits, in place and out of place, across chunks") {
  Backends be;
  ParamLayout layout;
  push_tensor(layout, "w", {257, 300});  // 77100 elements: two chunks of the update kernels
  push_tensor(layout, "b", {300});
  push_tensor(layout, "w2", {7, 3});
  const int64_t n = layout_numel(layout);
  const AdamWConfig adamw{0.9, 0.95, 1e-8, 0.1};
  const SgdConfig sgd{0.9, 0.01};
  auto p = pd2bw::test::random_values<float>(n, 81), g = pd2bw::test::random_values<float>(n, 82, 0.01);
  std::vector<float> m(static_cast<size_t>(n), 0.0F), v(m), out(m);
  Buffer dp = be.gpu->alloc(DType::f32, n), dg = be.gpu->alloc(DType::f32, n), dm = be.gpu->alloc(DType::f32, n),
         dv = be.gpu->alloc(DType::f32, n), dout = be.gpu->alloc(DType::f32, n);
  be.gpu->from_host(p.data(), dp.view());
  be.gpu->from_host(g.data(), dg.view());
  be.gpu->fill_zero(dm.view());
  be.gpu->fill_zero(dv.view());
  const auto host = [&](Buffer& b) {
    std::vector<float> x(static_cast<size_t>(n));
    be.gpu->to_host(b.view(), x.data());
    return x;
  };
  for (int64_t step = 1; step <= 3; ++step) {
    CAPTURE(step);
    adamw_step<float>(adamw, layout, 1e-3, step, 0.5, p, g, m, v, out);
    be.gpu->adamw_step(adamw, layout, 1e-3, step, 0.5, dp.view(), dg.view(), dm.view(), dv.view(), dout.view());
    CHECK(host(dout) == out);
    CHECK(host(dm) == m);
    CHECK(host(dv) == v);
    p = out;
    be.gpu->copy(dout.view(), dp.view());
  }
  adamw_step<float>(adamw, layout, 1e-3, 4, 1.0, p, g, m, v, p);  // in place
  be.gpu->adamw_step(adamw, layout, 1e-3, 4, 1.0, dp.view(), dg.view(), dm.view(), dv.view(), dp.view());
  CHECK(host(dp) == p);
  std::fill(m.begin(), m.end(), 0.0F);
  be.gpu->fill_zero(dm.view());
  for (int step = 0; step < 2; ++step) {
    sgd_step<float>(sgd, layout, 0.1, 1.0, p, g, m, p);
    be.gpu->sgd_step(sgd, layout, 0.1, 1.0, dp.view(), dg.view(), dm.view(), dp.view());
    CHECK(host(dp) == p);
    CHECK(host(dm) == m);
  }
  CHECK_THROWS_AS(be.gpu->adamw_step(adamw, layout, 1e-3, 0, 1.0, dp.view(), dg.view(), dm.view(), dv.view(), dout.view()),
                  pd2bw::Error);
}

TEST_CASE("sum of squares matches the cpu's in double and repeats bit for bit") {
  Backends be;
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1025}, (int64_t{1} << 20) + 3}) {
    CAPTURE(n);
    Twin x = Twin::random(*be.gpu, DType::f32, n, 91);
    const double cpu = be.cpu->sum_of_squares(x.cpu()), gpu = be.gpu->sum_of_squares(x.gpu());
    CHECK(std::abs(gpu - cpu) <= 1e-10 * cpu);  // n x eps of double at most: squares do not cancel
    CHECK(be.gpu->sum_of_squares(x.gpu()) == gpu);  // a fixed order: the same bits again
  }
}
