// Internal: the packed GEMM driver shared by the AVX2 and AVX-512 builds. Include it only from a file
// that defines PD2BW_SIMD_TARGET (a target attribute) and a vector type V before including; everything
// here has internal linkage, so each instruction-set build keeps its own copy. Not a public header.
//
// V provides: using T (float or double); using reg; static constexpr int kWidth (lanes), kRows (MR, rows
// of the register tile); static reg zero(), load(const T*), bcast(T), fma(reg a, reg b, reg c) = a*b+c
// with one rounding, add(reg, reg); static void store(T*, reg).
//
// Arithmetic (the same for every shape and buffer address): C is cut into tiles of kRows x 2*kWidth;
// each element's products over a block of kKc consecutive p are summed in order of p with FMA, starting
// from zero, and the block's sum is added to C (overwrites C for the first block unless accumulating).
// Blocks follow one another in order of p. Edge tiles run through a full-size scratch tile.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#ifndef PD2BW_SIMD_TARGET
#error "define PD2BW_SIMD_TARGET before including gemm_packed.hpp"
#endif

namespace {

constexpr int64_t kKc = 256;   // depth of one packed block (p)
constexpr int64_t kNc = 1024;  // columns of packed B per block (a block fits the L2 cache)

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Packs op(A)[i0 .. i0+mc, p0 .. p0+kc) into panels of MR rows: panel r holds [p][MR], zero rows past mc.
template <typename T, int MR>
PD2BW_SIMD_TARGET void pack_a(bool trans, const T* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                              T* out) {
  for (int64_t ir = 0; ir < mc; ir += MR) {
    const int64_t rows = min64(MR, mc - ir);
    T* panel = out + ir * kc;
    for (int64_t i = 0; i < MR; ++i) {
      if (i < rows) continue;
      for (int64_t p = 0; p < kc; ++p) panel[p * MR + i] = T(0);
    }
    if (trans) {
      for (int64_t p = 0; p < kc; ++p) {
        const T* src = a + (p0 + p) * lda + i0 + ir;
        for (int64_t i = 0; i < rows; ++i) panel[p * MR + i] = src[i];
      }
    } else {
      for (int64_t i = 0; i < rows; ++i) {
        const T* src = a + (i0 + ir + i) * lda + p0;
        for (int64_t p = 0; p < kc; ++p) panel[p * MR + i] = src[p];
      }
    }
  }
}

// Transposes the 8 x 8 floats of r in registers: r[q] becomes column q of the input.
PD2BW_SIMD_TARGET inline void transpose8x8(__m256 r[8]) {
  __m256 t[8];
  for (int q = 0; q < 8; q += 2) {
    t[q] = _mm256_unpacklo_ps(r[q], r[q + 1]);
    t[q + 1] = _mm256_unpackhi_ps(r[q], r[q + 1]);
  }
  __m256 s[8];
  for (int q = 0; q < 8; q += 4) {
    s[q] = _mm256_shuffle_ps(t[q], t[q + 2], 0x44);
    s[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], 0xEE);
    s[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0x44);
    s[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0xEE);
  }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm256_permute2f128_ps(s[q], s[q + 4], 0x20);
    r[q + 4] = _mm256_permute2f128_ps(s[q], s[q + 4], 0x31);
  }
}

// Copies columns [j, j + cols) of a transposed float B panel (source row j at src + j * ldb, kc long) into
// panel[p][NR]: whole groups of 8 columns and 8 p through register transposes, the rest one by one.
template <int NR>
PD2BW_SIMD_TARGET void pack_b_trans_f32(const float* src, int64_t ldb, int64_t kc, int64_t cols, float* panel) {
  int64_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
      __m256 r[8];
      for (int q = 0; q < 8; ++q) r[q] = _mm256_loadu_ps(src + (j + q) * ldb + p);
      transpose8x8(r);
      for (int q = 0; q < 8; ++q) _mm256_storeu_ps(panel + (p + q) * NR + j, r[q]);
    }
    for (; p < kc; ++p)
      for (int64_t q = 0; q < 8; ++q) panel[p * NR + j + q] = src[(j + q) * ldb + p];
  }
  for (; j < cols; ++j)
    for (int64_t p = 0; p < kc; ++p) panel[p * NR + j] = src[j * ldb + p];
}

// Packs op(B)[p0 .. p0+kc, j0 .. j0+nc) into panels of NR columns: panel holds [p][NR], zero past nc.
template <typename T, int NR>
PD2BW_SIMD_TARGET void pack_b(bool trans, const T* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                              T* out) {
  for (int64_t jr = 0; jr < nc; jr += NR) {
    const int64_t cols = min64(NR, nc - jr);
    T* panel = out + jr * kc;
    if constexpr (std::is_same_v<T, float> && NR % 8 == 0) {
      if (trans) pack_b_trans_f32<NR>(b + (j0 + jr) * ldb + p0, ldb, kc, cols, panel);
    } else if (trans) {
      for (int64_t j = 0; j < cols; ++j) {
        const T* src = b + (j0 + jr + j) * ldb + p0;
        for (int64_t p = 0; p < kc; ++p) panel[p * NR + j] = src[p];
      }
    }
    if (!trans) {
      for (int64_t p = 0; p < kc; ++p) {
        const T* src = b + (p0 + p) * ldb + j0 + jr;
        for (int64_t j = 0; j < cols; ++j) panel[p * NR + j] = src[j];
      }
    }
    for (int64_t j = cols; j < NR; ++j)
      for (int64_t p = 0; p < kc; ++p) panel[p * NR + j] = T(0);
  }
}

// Where a tile's operands are read: A's element (row i, depth p) at a[i * ars + p * acs] (packed: ars 1,
// acs kRows; transposed A in place: ars 1, acs lda; A in place: ars lda, acs 1) and B's row p at
// b + p * 2 * kWidth (always packed: a panel read in place from rows 1 KiB or more apart keeps only a few
// L1 cache sets, and is fetched again for every tile).
// bias: nullptr, or the 2 * kWidth values added to each row of the tile after the sum.
template <typename T>
struct TileSource {
  const T* a;
  int64_t ars, acs;
  const T* b;
  const T* bias;
};

// One kRows x 2*kWidth tile: c (row stride ldc) = ((add ? c : 0) + sum_p A[i][p] * B[p][j]) + bias[j], the
// products summed in order of p with FMA (no bias term without a bias). kRowsApart: A's rows are ars
// apart (else adjacent, ars ignored).
template <typename V, bool kRowsApart>
PD2BW_SIMD_TARGET void micro_tile(int64_t kc, TileSource<typename V::T> src, typename V::T* c, int64_t ldc, bool add) {
  constexpr int MR = V::kRows;
  constexpr int W = V::kWidth;
  typename V::reg lo[MR];
  typename V::reg hi[MR];
  // The tile lives in registers only when every loop over its rows is unrolled.
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) lo[i] = hi[i] = V::zero();
  const typename V::T* a = src.a;
  const typename V::T* b = src.b;
  for (int64_t p = 0; p < kc; ++p) {
    const typename V::reg b0 = V::load(b);
    const typename V::reg b1 = V::load(b + W);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const typename V::reg av = V::bcast(kRowsApart ? a[i * src.ars] : a[i]);
      lo[i] = V::fma(av, b0, lo[i]);
      hi[i] = V::fma(av, b1, hi[i]);
    }
    a += src.acs;
    b += 2 * W;
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    typename V::T* ci = c + i * ldc;
    typename V::reg r0 = add ? V::add(V::load(ci), lo[i]) : lo[i];
    typename V::reg r1 = add ? V::add(V::load(ci + W), hi[i]) : hi[i];
    if (src.bias != nullptr) {
      r0 = V::add(r0, V::load(src.bias));
      r1 = V::add(r1, V::load(src.bias + W));
    }
    V::store(ci, r0);
    V::store(ci + W, r1);
  }
}

template <typename V>
PD2BW_SIMD_TARGET void run_tile(int64_t kc, TileSource<typename V::T> src, typename V::T* c, int64_t ldc, bool add) {
  if (src.ars == 1) {
    micro_tile<V, false>(kc, src, c, ldc, add);
  } else {
    micro_tile<V, true>(kc, src, c, ldc, add);
  }
}

// One (mc x kc) block of op(A) times one (kc x nc) block of op(B) into c. Whole tiles read A in place
// where the layout allows (direct: element (0, 0) of the block, with op's strides, or a nullptr), else
// the packed copy ap (A's partial last panel or all of a far-strided transposed A), and B from its packed
// copy bp; edge tiles go through a scratch tile. bias: nullptr, or the block's nc values to add.
template <typename V>
struct Block {
  int64_t mc, nc, kc;
  const typename V::T* ap;
  const typename V::T* bp;
  TileSource<typename V::T> direct;  // a nullptr: A is read packed (direct.b and .bias are unused)
  const typename V::T* bias;
};

template <typename V>
PD2BW_SIMD_TARGET void multiply_block(const Block<V>& blk, typename V::T* c, int64_t ldc, bool add) {
  using T = typename V::T;
  constexpr int MR = V::kRows;
  constexpr int NR = 2 * V::kWidth;
  const int64_t kc = blk.kc;
  for (int64_t jr = 0; jr < blk.nc; jr += NR) {
    const int64_t cols = min64(NR, blk.nc - jr);
    for (int64_t ir = 0; ir < blk.mc; ir += MR) {
      const int64_t rows = min64(MR, blk.mc - ir);
      T* ct = c + ir * ldc + jr;
      TileSource<T> src{blk.ap + ir * kc, 1, MR, blk.bp + jr * kc, blk.bias == nullptr ? nullptr : blk.bias + jr};
      if (rows == MR && blk.direct.a != nullptr) {
        src.a = blk.direct.a + ir * blk.direct.ars;
        src.ars = blk.direct.ars;
        src.acs = blk.direct.acs;
      }
      if (rows == MR && cols == NR) {
        run_tile<V>(kc, src, ct, ldc, add);
        continue;
      }
      T tile[MR * NR];
      T bias[NR] = {};  // the edge's bias, zero past its columns
      if (src.bias != nullptr) {
        for (int64_t j = 0; j < cols; ++j) bias[j] = src.bias[j];
        src.bias = bias;
      }
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) tile[i * NR + j] = add ? ct[i * ldc + j] : T(0);
      run_tile<V>(kc, src, tile, NR, add);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) ct[i * ldc + j] = tile[i * NR + j];
    }
  }
}

// C (m x n) = op(A) op(B) (+= when accumulate) (+ bias after the last depth block), as gemm.hpp's gemm;
// abuf holds kMc * kKc elements and bbuf kKc * (kNc rounded up to NR).
template <typename V, int64_t kMc>
void gemm_packed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const typename V::T* a, int64_t lda,
                 const typename V::T* b, int64_t ldb, typename V::T* c, int64_t ldc, bool accumulate,
                 const typename V::T* bias, typename V::T* abuf, typename V::T* bbuf) {
  using T = typename V::T;
  static_assert(kMc % V::kRows == 0, "A blocks hold whole panels");
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        if (!accumulate) c[i * ldc + j] = T(0);
        if (bias != nullptr) c[i * ldc + j] += bias[j];
      }
    return;
  }
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = min64(kNc, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = min64(kKc, k - pc);
      pack_b<T, 2 * V::kWidth>(trans_b, b, ldb, pc, kc, jc, nc, bbuf);
      const bool add = accumulate || pc > 0;
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = min64(kMc, m - ic);
        // A in place but for its last, partial panel; a transposed A with rows 1 KiB or more apart is
        // packed whole (a tile in place would touch a page per p).
        const bool pack_all_a = trans_a && lda * static_cast<int64_t>(sizeof(T)) >= 1024;
        const int64_t a_packed_from = pack_all_a ? 0 : mc - mc % V::kRows;
        pack_a<T, V::kRows>(trans_a, a, lda, ic + a_packed_from, mc - a_packed_from, pc, kc, abuf + a_packed_from * kc);
        const T* block_bias = bias != nullptr && pc + kc == k ? bias + jc : nullptr;
        Block<V> blk{mc, nc, kc, abuf, bbuf, {nullptr, 0, 0, nullptr, nullptr}, block_bias};
        if (!pack_all_a) {
          blk.direct.a = trans_a ? a + pc * lda + ic : a + ic * lda + pc;
          blk.direct.ars = trans_a ? 1 : lda;
          blk.direct.acs = trans_a ? lda : 1;
        }
        multiply_block<V>(blk, c + ic * ldc + jc, ldc, add);
      }
    }
  }
}

// gemm_packed with this thread's packing buffers (kept between calls: they are reused, never shared).
template <typename V, int64_t kMc>
void gemm_packed_here(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const typename V::T* a, int64_t lda,
                      const typename V::T* b, int64_t ldb, typename V::T* c, int64_t ldc, bool accumulate,
                      const typename V::T* bias) {
  thread_local std::vector<typename V::T> abuf(static_cast<size_t>(kMc * kKc));
  thread_local std::vector<typename V::T> bbuf(static_cast<size_t>(kKc * (kNc + 2 * V::kWidth)));
  gemm_packed<V, kMc>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate, bias, abuf.data(), bbuf.data());
}

}  // namespace
