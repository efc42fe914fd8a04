// The CPU device: the reference implementation of every op, and fast enough to train on.
//
// Gemm is a GotoBLAS-style blocked product: op(A) and op(B) are packed (transposes and alpha
// folded in, edges zero-padded) into panels that a register-blocked micro-kernel streams through,
// so all four transpose cases share one kernel. The kernel's tile is kMr x (kNv * kLanes), written
// with GCC/Clang vector extensions: GCC 12 at -O2 does not keep an auto-vectorized accumulator tile
// in registers (measured: 40-50 GFLOP/s against 130 with the vector type). Everything else is plain
// loops that the compiler vectorizes (see BUILD.bazel's copts).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "worker/device/device.h"

namespace pstrain {
namespace {

// ---- Gemm --------------------------------------------------------------------------------------

// The widest vector the target has, and the kernel's rows: kMr * kNv accumulators + kNv B vectors
// + 1 broadcast must fit the register file (32 zmm with AVX-512, else 16).
#if defined(__AVX512F__)
constexpr int kLanes = 16;
constexpr int kMr = 8;
#elif defined(__AVX__)
constexpr int kLanes = 8;
constexpr int kMr = 6;
#else
constexpr int kLanes = 4;
constexpr int kMr = 6;
#endif
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

// Block sizes: a kKc-deep slice; the A block (kMc x kKc, 128 KiB) stays in L2, one B sliver
// (kKc x kNr, <= 32 KiB) in L1, the packed B panel (kKc x kNc, 1 MiB) in L2/L3.
constexpr int64_t kKc = 256;
constexpr int64_t kMc = kMr * 16;
constexpr int64_t kNc = 1024;

inline void LoadVec(Vec* v, const float* p) { std::memcpy(v, p, sizeof(Vec)); }
inline void StoreVec(float* p, const Vec& v) { std::memcpy(p, &v, sizeof(Vec)); }

// A 64-byte-aligned float array that only grows; one per thread for the packed panels.
class ScratchBuffer {
 public:
  ~ScratchBuffer() { ::operator delete(data_, std::align_val_t(64)); }
  float* Get(int64_t floats) {
    if (floats > capacity_) {
      ::operator delete(data_, std::align_val_t(64));
      data_ = static_cast<float*>(
          ::operator new(static_cast<size_t>(floats) * sizeof(float), std::align_val_t(64)));
      capacity_ = floats;
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  int64_t capacity_ = 0;
};

struct GemmArgs {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
};

// Packs op(A)[i0 : i0 + rows, p0 : p0 + kc] (rows <= kMr) as one zero-padded sliver: for each p,
// the kMr values of column p. That is the layout of a transposed A with lda = kMr, so the kernel
// reads it as one.
void PackSliverA(const GemmArgs& g, int64_t i0, int64_t rows, int64_t p0, int64_t kc, float* out) {
  if (g.trans_a && rows == kMr) {  // kMr contiguous values per p: plain copies
    for (int64_t p = 0; p < kc; ++p) {
      std::memcpy(out + p * kMr, g.a + (p0 + p) * g.lda + i0, kMr * sizeof(float));
    }
    return;
  }
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t i = 0; i < kMr; ++i) {
      const int64_t row = i0 + i, col = p0 + p;
      out[p * kMr + i] =
          i >= rows ? 0.0f : (g.trans_a ? g.a[col * g.lda + row] : g.a[row * g.lda + col]);
    }
  }
}

// out[q * ldo + r] = in[r * ldi + q] for r, q in [0, 8): an 8 x 8 transpose in registers
// (unpack, then 2-lane and 4-lane interleaves), 8 loads and 8 stores instead of 64 of each.
void Transpose8x8(const float* in, int64_t ldi, float* out, int64_t ldo) {
  typedef float V8 __attribute__((vector_size(8 * sizeof(float))));
  V8 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) std::memcpy(&r[i], in + i * ldi, sizeof(V8));
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int q = 0; q < 4; ++q) {
    const V8 low = __builtin_shufflevector(u[q], u[q + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    const V8 high = __builtin_shufflevector(u[q], u[q + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(out + q * ldo, &low, sizeof(V8));
    std::memcpy(out + (q + 4) * ldo, &high, sizeof(V8));
  }
}

// Packs op(B)[p0 : p0 + kc, j0 : j0 + nc] as slivers of kNr columns: sliver t holds, for each p,
// the kNr values of row p (columns past n are zero). The kernel reuses each sliver across a whole
// row block, so it pays to make it contiguous and L1-resident.
template <int kNr>
void PackB(const GemmArgs& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* out) {
  for (int64_t t = 0; t < nc; t += kNr) {
    const int64_t cols = std::min<int64_t>(kNr, nc - t);
    float* o = out + t * kc;
    if (!g.trans_b) {  // B is k x n: each p's kNr values are contiguous
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = g.b + (p0 + p) * g.ldb + j0 + t;
        if (cols == kNr) {
          std::memcpy(o + p * kNr, src, kNr * sizeof(float));
        } else {
          for (int64_t j = 0; j < cols; ++j) o[p * kNr + j] = src[j];
          for (int64_t j = cols; j < kNr; ++j) o[p * kNr + j] = 0;
        }
      }
    } else if (cols == kNr && kNr % 8 == 0) {  // B is n x k: transposed 8 x 8 blocks at a time
      int64_t p = 0;
      for (; p + 8 <= kc; p += 8) {
        for (int64_t jb = 0; jb < kNr; jb += 8) {
          Transpose8x8(g.b + (j0 + t + jb) * g.ldb + p0 + p, g.ldb, o + p * kNr + jb, kNr);
        }
      }
      for (; p < kc; ++p) {
        for (int64_t j = 0; j < kNr; ++j) o[p * kNr + j] = g.b[(j0 + t + j) * g.ldb + p0 + p];
      }
    } else {  // B is n x k, an edge sliver: element by element
      for (int64_t j = 0; j < kNr; ++j) {
        const float* src = g.b + (j0 + t + j) * g.ldb + p0;
        for (int64_t p = 0; p < kc; ++p) o[p * kNr + j] = j < cols ? src[p] : 0.0f;
      }
    }
  }
}

// C[0 : mr, 0 : nr] = alpha * A x B + beta * C over kc, for the kMr rows of A at `a` (row i, depth
// p at a[i * lda + p], or at a[p * lda + i] if kTransA) and the packed B sliver `bp`. beta == 0
// never reads C. The kMr x kNr accumulator tile lives in registers.
template <int kNv, bool kTransA>
void MicroKernel(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict bp,
                 float* c, int64_t ldc, int64_t mr, int64_t nr, float alpha, float beta) {
  constexpr int kNr = kNv * kLanes;
  Vec acc[kMr][kNv];
#pragma GCC unroll 16
  for (int i = 0; i < kMr; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < kNv; ++j) acc[i][j] = Vec{};
  }
  for (int64_t p = 0; p < kc; ++p) {
    Vec bv[kNv];
#pragma GCC unroll 4
    for (int j = 0; j < kNv; ++j) LoadVec(&bv[j], bp + j * kLanes);
#pragma GCC unroll 16
    for (int i = 0; i < kMr; ++i) {
      const float ai = kTransA ? a[p * lda + i] : a[i * lda + p];
#pragma GCC unroll 4
      for (int j = 0; j < kNv; ++j) acc[i][j] += ai * bv[j];
    }
    bp += kNr;
  }
  if (mr == kMr && nr == kNr) {
#pragma GCC unroll 16
    for (int i = 0; i < kMr; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < kNv; ++j) {
        float* cp = c + i * ldc + j * kLanes;
        const Vec sum = alpha == 1 ? acc[i][j] : alpha * acc[i][j];
        if (beta == 0) {
          StoreVec(cp, sum);
        } else {
          Vec old;
          LoadVec(&old, cp);
          StoreVec(cp, beta == 1 ? old + sum : beta * old + sum);
        }
      }
    }
    return;
  }
  float tile[kMr][kNr];
  for (int i = 0; i < kMr; ++i) {
    for (int j = 0; j < kNv; ++j) StoreVec(&tile[i][j * kLanes], acc[i][j]);
  }
  for (int64_t i = 0; i < mr; ++i) {
    float* cp = c + i * ldc;
    for (int64_t j = 0; j < nr; ++j) {
      cp[j] = beta == 0 ? alpha * tile[i][j] : alpha * tile[i][j] + beta * cp[j];
    }
  }
}

// Computes the block C[i_begin : i_end, j_begin : j_end] over all of k. A non-transposed A is
// read in place (kMr row streams, each contiguous); a transposed one is packed per row block (read
// in place, each depth step would touch a new cache line for kMr values and crowd B out of L1), as
// is an edge sliver of fewer than kMr rows (zero-padded, so the kernel never reads past m).
template <int kNv>
void GemmBlock(const GemmArgs& g, int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end) {
  constexpr int kNr = kNv * kLanes;
  thread_local ScratchBuffer a_scratch, b_scratch;
  float* packed_a = a_scratch.Get(kMc * kKc);
  float* packed_b = b_scratch.Get(kNc * kKc);
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kNc) {
    const int64_t nc = std::min(kNc, j_end - j0);
    for (int64_t p0 = 0; p0 < g.k; p0 += kKc) {
      const int64_t kc = std::min(kKc, g.k - p0);
      const float beta = p0 == 0 ? g.beta : 1.0f;
      PackB<kNr>(g, p0, kc, j0, nc, packed_b);
      for (int64_t i0 = i_begin; i0 < i_end; i0 += kMc) {
        const int64_t mc = std::min(kMc, i_end - i0);
        // Which slivers are packed, and where: packed_a + ir * kc for the sliver at row i0 + ir.
        for (int64_t ir = 0; ir < mc; ir += kMr) {
          const int64_t mr = std::min<int64_t>(kMr, mc - ir);
          if (g.trans_a || mr < kMr) PackSliverA(g, i0 + ir, mr, p0, kc, packed_a + ir * kc);
        }
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          const int64_t nr = std::min<int64_t>(kNr, nc - jr);
          const float* bp = packed_b + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            const int64_t mr = std::min<int64_t>(kMr, mc - ir);
            const int64_t row = i0 + ir;
            float* c = g.c + row * g.ldc + j0 + jr;
            if (g.trans_a || mr < kMr) {
              MicroKernel<kNv, true>(kc, packed_a + ir * kc, kMr, bp, c, g.ldc, mr, nr, g.alpha,
                                     beta);
            } else {
              MicroKernel<kNv, false>(kc, g.a + row * g.lda + p0, g.lda, bp, c, g.ldc, mr, nr,
                                      g.alpha, beta);
            }
          }
        }
      }
    }
  }
}

// C = beta * C, the whole product when k == 0 or alpha == 0.
void ScaleC(const GemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    float* row = g.c + i * g.ldc;
    if (g.beta == 0) {
      std::fill(row, row + g.n, 0.0f);
    } else if (g.beta != 1) {
      for (int64_t j = 0; j < g.n; ++j) row[j] *= g.beta;
    }
  }
}

// Splits C into pieces for the pool. A piece packs the part of B its columns need, and (A
// transposed) the part of A its rows need: so a non-transposed A is split by columns first (nothing
// is packed twice), a transposed one by rows. There are up to kPiecesPerThread pieces per thread,
// claimed dynamically, so that a thread the OS preempts (or a busy pool) delays the op by a small
// piece, not half of it.
template <int kNv>
void GemmParallel(const GemmArgs& g, ThreadPool* pool, int64_t min_flops_per_piece) {
  constexpr int64_t kNr = kNv * kLanes;
  constexpr int64_t kPiecesPerThread = 4;
  const int64_t row_slivers = (g.m + kMr - 1) / kMr;
  const int64_t col_slivers = (g.n + kNr - 1) / kNr;
  const double flops = 2.0 * g.m * g.n * g.k;
  const int64_t threads = pool == nullptr ? 1 : pool->num_threads() + 1;
  int64_t pieces = 1;
  if (threads > 1) {
    pieces = static_cast<int64_t>(
        std::min<double>(threads * kPiecesPerThread,
                         flops / std::max<int64_t>(1, min_flops_per_piece)));
    pieces = std::max<int64_t>(1, pieces);
  }
  int64_t row_pieces, col_pieces;
  if (g.trans_a) {
    row_pieces = std::min(pieces, row_slivers);
    col_pieces = std::max<int64_t>(1, std::min(pieces / row_pieces, col_slivers));
  } else {
    col_pieces = std::min(pieces, col_slivers);
    row_pieces = std::max<int64_t>(1, std::min(pieces / col_pieces, row_slivers));
  }
  ParallelFor(pool, row_pieces * col_pieces, [&](int64_t piece) {
    const int64_t r = piece / col_pieces, cidx = piece % col_pieces;
    const int64_t i_begin = std::min(g.m, row_slivers * r / row_pieces * kMr);
    const int64_t i_end = std::min(g.m, row_slivers * (r + 1) / row_pieces * kMr);
    const int64_t j_begin = std::min(g.n, col_slivers * cidx / col_pieces * kNr);
    const int64_t j_end = std::min(g.n, col_slivers * (cidx + 1) / col_pieces * kNr);
    if (i_begin < i_end && j_begin < j_end) GemmBlock<kNv>(g, i_begin, i_end, j_begin, j_end);
  });
}

// ---- Convolution and pooling -------------------------------------------------------------------

// A convolution's column matrix (im2col) for a group of images stays under this many bytes, or
// holds one image's if that is larger (device.h).
constexpr int64_t kConvScratchBytes = int64_t{8} << 20;

// 64-byte-aligned floats freed on destruction; null after a failed allocation.
struct AlignedFloats {
  explicit AlignedFloats(int64_t n)
      : data(static_cast<float*>(std::aligned_alloc(
            64, (static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float) + 63) / 64 * 64))) {}
  ~AlignedFloats() { std::free(data); }
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  float* const data;
};

// A convolution's sizes, as its loops use them.
struct ConvDims {
  ConvDims(const Window2D& window, const Window2DOutput& output, int64_t out_channels)
      : w(window),
        o(output),
        oc(out_channels),
        row(w.window_width * w.channels),
        k(w.window_height * row),
        pixels(o.height * o.width),
        image(w.height * w.width * w.channels) {}

  // A 1x1 window with stride 1 (no padding either way): the images are their own column matrix.
  bool identity() const {
    return w.window_height == 1 && w.window_width == 1 && w.stride_height == 1 &&
           w.stride_width == 1;
  }
  // Images per column matrix.
  int64_t chunk() const {
    if (identity()) return w.batch;
    const int64_t per_image = std::max<int64_t>(1, pixels * k * int64_t{sizeof(float)});
    return std::max<int64_t>(1, std::min(w.batch, kConvScratchBytes / per_image));
  }

  const Window2D& w;
  const Window2DOutput& o;
  const int64_t oc;
  const int64_t row;     // floats of one window row: window_width * channels
  const int64_t k;       // floats of one window: the column matrix's width
  const int64_t pixels;  // output pixels per image: the column matrix's rows per image
  const int64_t image;   // floats of one input image
};

// Calls fn(at, lo, hi, dst) for every window row of every output pixel of one image, in output
// pixel order: `dst` is that row's place in the column matrix (d.row floats), [lo, hi) the part of
// it inside the image (empty for a row above or below the image), and x[at + j] its element j for
// j in [lo, hi) (`at` itself may lie outside the image when the row starts in the padding).
template <typename T, typename Fn>
void ForEachWindowRow(const ConvDims& d, T* col, Fn fn) {
  const Window2D& w = d.w;
  const int64_t c = w.channels;
  for (int64_t oy = 0; oy < d.o.height; ++oy) {
    const int64_t y0 = oy * w.stride_height - d.o.pad_top;
    for (int64_t ox = 0; ox < d.o.width; ++ox) {
      const int64_t x0 = ox * w.stride_width - d.o.pad_left;
      const int64_t lo = std::max<int64_t>(0, -x0) * c;
      const int64_t hi = std::max(lo, std::min(w.window_width, w.width - x0) * c);
      T* dst = col + (oy * d.o.width + ox) * d.k;
      for (int64_t ky = 0; ky < w.window_height; ++ky, dst += d.row) {
        const int64_t y = y0 + ky;
        const bool inside = y >= 0 && y < w.height;
        fn((y * w.width + x0) * c, inside ? lo : 0, inside ? hi : 0, dst);
      }
    }
  }
}

// Unfolds one image x [height, width, channels] into col [pixels, k]: row oy * out.width + ox is
// output pixel (oy, ox)'s window, (ky, kx, c) in order, with zeros where it leaves the image. Plain
// loops, not memcpy: rows are short (3 floats for a 3x3 window over one channel).
void Im2Col(const ConvDims& d, const float* __restrict x, float* __restrict col) {
  const int64_t row = d.row;
  ForEachWindowRow(d, col, [&](int64_t at, int64_t lo, int64_t hi, float* __restrict dst) {
    for (int64_t j = 0; j < lo; ++j) dst[j] = 0;
    for (int64_t j = lo; j < hi; ++j) dst[j] = x[at + j];
    for (int64_t j = hi; j < row; ++j) dst[j] = 0;
  });
}

// The reverse, adding: dx [height, width, channels] += each column-matrix element at the image
// element it was unfolded from (padding's dropped). Adds in output pixel order.
void Col2ImAdd(const ConvDims& d, const float* col, float* __restrict dx) {
  ForEachWindowRow(d, col, [&](int64_t at, int64_t lo, int64_t hi, const float* __restrict src) {
    for (int64_t j = lo; j < hi; ++j) dx[at + j] += src[j];
  });
}

// The rows [lo, hi) of the window at output row (or column) o that lie inside the image.
struct Span1D {
  int64_t start;  // the window's first image row (may be negative: padding)
  int64_t lo, hi;
};
inline Span1D WindowSpan(int64_t o, int64_t stride, int64_t pad, int64_t window, int64_t in) {
  const int64_t start = o * stride - pad;
  return {start, std::max<int64_t>(0, -start), std::min(window, in - start)};
}

// Max pooling of one image x [height, width, channels] into y and arg [out.height, out.width,
// channels]. Every window overlaps the image (device.h): its first element in the image starts
// each channel's max, the others challenge it in window order, all channels at once (the compares
// and selects vectorize; indices are int32, as images are below 2^31 elements).
void MaxPoolImage(const Window2D& w, const Window2DOutput& o, const float* __restrict x,
                  float* __restrict y, int32_t* __restrict arg) {
  const int32_t c = static_cast<int32_t>(w.channels);
  for (int64_t oy = 0; oy < o.height; ++oy) {
    const Span1D rows = WindowSpan(oy, w.stride_height, o.pad_top, w.window_height, w.height);
    for (int64_t ox = 0; ox < o.width; ++ox) {
      const Span1D cols = WindowSpan(ox, w.stride_width, o.pad_left, w.window_width, w.width);
      float* __restrict out = y + (oy * o.width + ox) * c;
      int32_t* __restrict a = arg + (oy * o.width + ox) * c;
      const auto element = [&](int64_t ky, int64_t kx) {
        return static_cast<int32_t>(((rows.start + ky) * w.width + cols.start + kx) * c);
      };
      const int32_t first = element(rows.lo, cols.lo);
      for (int32_t ch = 0; ch < c; ++ch) {
        out[ch] = x[first + ch];
        a[ch] = first + ch;
      }
      for (int64_t ky = rows.lo; ky < rows.hi; ++ky) {
        for (int64_t kx = cols.lo; kx < cols.hi; ++kx) {
          if (ky == rows.lo && kx == cols.lo) continue;
          const int32_t at = element(ky, kx);
          const float* __restrict v = x + at;
          // Written as masks, not `bigger ? ... : ...`, which GCC turns back into branches
          // (mispredicted half the time on real data) instead of vector selects.
          for (int32_t ch = 0; ch < c; ++ch) {
            const float value = v[ch], best = out[ch];
            const int32_t mask = -static_cast<int32_t>(value > best);
            out[ch] = std::max(best, value);
            a[ch] = (a[ch] & ~mask) | ((at + ch) & mask);
          }
        }
      }
    }
  }
}

// The first output element of one image's whose argmax is not in its window (same channel), or
// -1. The channels of a pixel are checked together, so that the compares vectorize.
int64_t BadArgmax(const Window2D& w, const Window2DOutput& o, const int32_t* arg) {
  const int64_t c = w.channels;
  std::vector<uint8_t> found(c);
  for (int64_t oy = 0; oy < o.height; ++oy) {
    const Span1D rows = WindowSpan(oy, w.stride_height, o.pad_top, w.window_height, w.height);
    for (int64_t ox = 0; ox < o.width; ++ox) {
      const Span1D cols = WindowSpan(ox, w.stride_width, o.pad_left, w.window_width, w.width);
      const int32_t* __restrict a = arg + (oy * o.width + ox) * c;
      uint8_t* __restrict f = found.data();
      std::fill(f, f + c, 0);
      for (int64_t ky = rows.lo; ky < rows.hi; ++ky) {
        for (int64_t kx = cols.lo; kx < cols.hi; ++kx) {
          // Image elements are < 2^31 (Device checked): int32 compares.
          const int32_t at =
              static_cast<int32_t>(((rows.start + ky) * w.width + cols.start + kx) * c);
          for (int64_t ch = 0; ch < c; ++ch) f[ch] |= a[ch] == at + static_cast<int32_t>(ch);
        }
      }
      uint8_t all = 1;
      for (int64_t ch = 0; ch < c; ++ch) all &= f[ch];
      if (all) continue;
      for (int64_t ch = 0; ch < c; ++ch) {
        if (!f[ch]) return (oy * o.width + ox) * c + ch;
      }
    }
  }
  return -1;
}

// ---- Unique ------------------------------------------------------------------------------------

struct HashSlot {
  int64_t key;
  int32_t position;  // in unique_ids; -1 = empty
};

// ---- The device --------------------------------------------------------------------------------

// Stateless apart from its options: thread-safe.
class CpuDevice : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options) : options_(options) {}

  std::string name() const override { return "cpu"; }
  bool host_memory() const override { return true; }
  absl::Status Synchronize() override { return absl::OkStatus(); }

 protected:
  absl::StatusOr<void*> DoAllocate(int64_t bytes) override {
    const size_t rounded = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu: cannot allocate ", bytes, " bytes"));
    }
    return p;
  }
  void DoFree(void* data) override { std::free(data); }
  absl::Status DoCopyToDevice(const void* host, void* device, int64_t bytes) override {
    Copy(host, device, bytes);
    return absl::OkStatus();
  }
  absl::Status DoCopyToHost(const void* device, void* host, int64_t bytes) override {
    Copy(device, host, bytes);
    return absl::OkStatus();
  }
  absl::Status DoCopyOnDevice(const void* from, void* to, int64_t bytes) override {
    Copy(from, to, bytes);
    return absl::OkStatus();
  }
  absl::Status DoZero(void* device, int64_t bytes) override {
    ParallelRanges(options_.pool, bytes, BytePieces(bytes), [&](int64_t begin, int64_t end) {
      std::memset(static_cast<char*>(device) + begin, 0, end - begin);
    });
    return absl::OkStatus();
  }

  absl::Status DoGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc) override {
    const GemmArgs g{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
    if (k == 0 || alpha == 0) {
      ScaleC(g);
    } else if (n <= kLanes) {
      GemmParallel<1>(g, options_.pool, options_.min_flops_per_piece);
    } else {
      GemmParallel<2>(g, options_.pool, options_.min_flops_per_piece);
    }
    return absl::OkStatus();
  }

  absl::Status DoBiasAdd(int64_t rows, int64_t cols, const float* bias, float* x) override {
    ParallelRanges(options_.pool, rows, BytePieces(2 * rows * cols * 4),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       float* __restrict row = x + r * cols;
                       const float* __restrict bv = bias;
                       for (int64_t j = 0; j < cols; ++j) row[j] += bv[j];
                     }
                   });
    return absl::OkStatus();
  }

  absl::Status DoBiasGrad(int64_t rows, int64_t cols, const float* dy, float* dbias) override {
    // Column sums, accumulated row by row (vectorized across columns): piece 0 into dbias, the
    // others into their own buffers, added at the end.
    const int64_t pieces = std::max<int64_t>(1, std::min(BytePieces(rows * cols * 4), rows));
    std::vector<std::vector<float>> partial(pieces - 1, std::vector<float>(cols));
    ParallelFor(options_.pool, pieces, [&](int64_t p) {
      float* __restrict sum = p == 0 ? dbias : partial[p - 1].data();
      for (int64_t j = 0; j < cols; ++j) sum[j] = 0;
      for (int64_t r = rows * p / pieces; r < rows * (p + 1) / pieces; ++r) {
        const float* __restrict row = dy + r * cols;
        for (int64_t j = 0; j < cols; ++j) sum[j] += row[j];
      }
    });
    for (const std::vector<float>& sum : partial) {
      for (int64_t j = 0; j < cols; ++j) dbias[j] += sum[j];
    }
    return absl::OkStatus();
  }

  absl::Status DoRelu(int64_t n, const float* x, float* y) override {
    Elementwise(n, [&](int64_t begin, int64_t end) {
#pragma GCC ivdep
      for (int64_t i = begin; i < end; ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
    });
    return absl::OkStatus();
  }

  absl::Status DoReluGrad(int64_t n, const float* y, const float* dy, float* dx) override {
    Elementwise(n, [&](int64_t begin, int64_t end) {
#pragma GCC ivdep
      for (int64_t i = begin; i < end; ++i) {
        const float g = dy[i];  // read unconditionally, so the loop vectorizes
        dx[i] = y[i] > 0 ? g : 0.0f;
      }
    });
    return absl::OkStatus();
  }

  absl::Status DoSigmoid(int64_t n, const float* x, float* y) override {
    Elementwise(n, [&](int64_t begin, int64_t end) {
#pragma GCC ivdep
      for (int64_t i = begin; i < end; ++i) y[i] = StableSigmoid(x[i]);
    });
    return absl::OkStatus();
  }

  absl::Status DoSoftmaxCrossEntropy(int64_t rows, int64_t classes, const float* logits,
                                     const int32_t* labels, float* probs, float* loss) override {
    RETURN_IF_ERROR(CheckLabels("SoftmaxCrossEntropy", rows, classes, labels));
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = logits + r * classes;
      float* p = probs + r * classes;
      const float x_label = x[labels[r]];  // read before p (which may be x) is written
      float max = x[0];
      for (int64_t j = 1; j < classes; ++j) max = std::max(max, x[j]);
      float sum = 0;
      for (int64_t j = 0; j < classes; ++j) {
        p[j] = std::exp(x[j] - max);
        sum += p[j];
      }
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j < classes; ++j) p[j] *= inv;
      total += std::log(static_cast<double>(sum)) - (x_label - max);  // -log softmax[label]
    }
    *loss = rows == 0 ? 0.0f : static_cast<float>(total / rows);
    return absl::OkStatus();
  }

  absl::Status DoSoftmaxCrossEntropyGrad(int64_t rows, int64_t classes, const float* probs,
                                         const int32_t* labels, float* dlogits) override {
    RETURN_IF_ERROR(CheckLabels("SoftmaxCrossEntropyGrad", rows, classes, labels));
    const float scale = 1.0f / rows;
    Elementwise(rows * classes, [&](int64_t begin, int64_t end) {
#pragma GCC ivdep
      for (int64_t i = begin; i < end; ++i) dlogits[i] = probs[i] * scale;
    });
    for (int64_t r = 0; r < rows; ++r) dlogits[r * classes + labels[r]] -= scale;
    return absl::OkStatus();
  }

  absl::Status DoSigmoidCrossEntropy(int64_t n, const float* logits, const float* labels,
                                     float* loss, float* dlogits) override {
    double total = 0;
    const float scale = n == 0 ? 0.0f : 1.0f / n;
    for (int64_t i = 0; i < n; ++i) {
      const float x = logits[i], y = labels[i];
      total += std::max(x, 0.0f) - x * y + std::log1p(std::exp(-std::fabs(x)));
      if (dlogits != nullptr) dlogits[i] = (StableSigmoid(x) - y) * scale;
    }
    *loss = n == 0 ? 0.0f : static_cast<float>(total / n);
    return absl::OkStatus();
  }

  absl::Status DoMeanSquaredError(int64_t n, const float* predictions, const float* targets,
                                  float* loss, float* dpred) override {
    double total = 0;
    const float scale = n == 0 ? 0.0f : 2.0f / n;
    for (int64_t i = 0; i < n; ++i) {
      const float d = predictions[i] - targets[i];
      total += static_cast<double>(d) * d;
      if (dpred != nullptr) dpred[i] = d * scale;
    }
    *loss = n == 0 ? 0.0f : static_cast<float>(total / n);
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> DoUnique(int64_t n, const int64_t* ids, int64_t* unique_ids,
                                   int32_t* index) override {
    // Open addressing with linear probing, at most half full; a multiplicative hash spreads
    // sequential ids (the common case for small vocabularies) across the table.
    int shift = 64;
    int64_t capacity = 1;
    while (capacity < 2 * n) {
      capacity <<= 1;
      --shift;
    }
    thread_local std::vector<HashSlot> table;
    table.assign(capacity, HashSlot{0, -1});
    const uint64_t mask = capacity - 1;
    int32_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids[i];
      uint64_t h = shift == 64 ? 0 : (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ULL) >> shift;
      while (true) {
        HashSlot& slot = table[h];
        if (slot.position < 0) {
          slot.key = id;
          slot.position = count;
          unique_ids[count] = id;
          index[i] = count++;
          break;
        }
        if (slot.key == id) {
          index[i] = slot.position;
          break;
        }
        h = (h + 1) & mask;
      }
    }
    if (capacity > (int64_t{1} << 20)) {
      std::vector<HashSlot>().swap(table);  // don't keep a big table per thread
    }
    return count;
  }

  absl::Status DoGatherRows(int64_t num_rows, int64_t dim, const float* table,
                            const int32_t* index, int64_t n, float* out) override {
    RETURN_IF_ERROR(CheckIndex("GatherRows", n, index, num_rows));
    ParallelRanges(options_.pool, n, BytePieces(2 * n * dim * 4), [&](int64_t begin, int64_t end) {
      // A loop the compiler vectorizes, not memcpy: rows are short (a libc call per 64-byte row
      // halves the rate at dim 16).
      for (int64_t i = begin; i < end; ++i) {
        const float* __restrict row = table + static_cast<int64_t>(index[i]) * dim;
        float* __restrict o = out + i * dim;
        for (int64_t j = 0; j < dim; ++j) o[j] = row[j];
      }
    });
    return absl::OkStatus();
  }

  absl::Status DoSumPool(int64_t batch, int64_t features, int64_t dim, const float* in,
                         float* out) override {
    ParallelRanges(options_.pool, batch, BytePieces(batch * features * dim * 4),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t b = begin; b < end; ++b) {
                       float* __restrict o = out + b * dim;
                       const float* __restrict x = in + b * features * dim;
                       if (features == 0) {
                         std::fill(o, o + dim, 0.0f);
                         continue;
                       }
                       for (int64_t j = 0; j < dim; ++j) o[j] = x[j];
                       for (int64_t f = 1; f < features; ++f) {
                         const float* __restrict xf = x + f * dim;
                         for (int64_t j = 0; j < dim; ++j) o[j] += xf[j];
                       }
                     }
                   });
    return absl::OkStatus();
  }

  absl::Status DoSumPoolGrad(int64_t batch, int64_t features, int64_t dim, const float* dout,
                             float* din) override {
    ParallelRanges(options_.pool, batch, BytePieces(batch * features * dim * 4),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t b = begin; b < end; ++b) {
                       const float* __restrict g = dout + b * dim;
                       for (int64_t f = 0; f < features; ++f) {
                         float* __restrict o = din + (b * features + f) * dim;
                         for (int64_t j = 0; j < dim; ++j) o[j] = g[j];
                       }
                     }
                   });
    return absl::OkStatus();
  }

  absl::Status DoSegmentSum(int64_t n, int64_t dim, const float* grads, const int32_t* index,
                            int64_t num_unique, float* out) override {
    RETURN_IF_ERROR(CheckIndex("SegmentSum", n, index, num_unique));
    // Each piece owns a range of output rows and scans every index for its own: no two threads
    // add into one row, and each piece reads only its share of the gradients.
    const int64_t pieces = BytePieces(2 * n * dim * 4);
    ParallelRanges(options_.pool, num_unique, pieces, [&](int64_t lo, int64_t hi) {
      std::memset(out + lo * dim, 0, (hi - lo) * dim * sizeof(float));
      const bool all = lo == 0 && hi == num_unique;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t u = index[i];
        if (!all && (u < lo || u >= hi)) continue;  // another piece's row
        float* __restrict o = out + u * dim;
        const float* __restrict gi = grads + i * dim;
        for (int64_t j = 0; j < dim; ++j) o[j] += gi[j];
      }
    });
    return absl::OkStatus();
  }

  absl::Status DoConcatColumns(int64_t rows, absl::Span<const ConstColumnBlock> blocks,
                               float* out) override {
    int64_t width = 0;
    for (const ConstColumnBlock& block : blocks) width += block.cols;
    ParallelRanges(options_.pool, rows, BytePieces(2 * rows * width * 4),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       float* o = out + r * width;
                       for (const ConstColumnBlock& block : blocks) {
                         std::memcpy(o, block.data + r * block.ld, block.cols * sizeof(float));
                         o += block.cols;
                       }
                     }
                   });
    return absl::OkStatus();
  }

  absl::Status DoSplitColumns(int64_t rows, const float* in,
                              absl::Span<const ColumnBlock> blocks) override {
    int64_t width = 0;
    for (const ColumnBlock& block : blocks) width += block.cols;
    ParallelRanges(options_.pool, rows, BytePieces(2 * rows * width * 4),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       const float* x = in + r * width;
                       for (const ColumnBlock& block : blocks) {
                         std::memcpy(block.data + r * block.ld, x, block.cols * sizeof(float));
                         x += block.cols;
                       }
                     }
                   });
    return absl::OkStatus();
  }

  absl::Status DoConv2D(const Window2D& window, const Window2DOutput& out, int64_t out_channels,
                        const float* input, const float* filter, float* output) override {
    const ConvDims d(window, out, out_channels);
    const int64_t chunk = d.chunk();
    std::unique_ptr<AlignedFloats> col;
    if (!d.identity()) RETURN_IF_ERROR(AllocateColumns(d, chunk, &col));
    for (int64_t n0 = 0; n0 < window.batch; n0 += chunk) {
      const int64_t images = std::min(chunk, window.batch - n0);
      const float* a = input + n0 * d.image;
      if (!d.identity()) {
        Unfold(d, images, a, col->data);
        a = col->data;
      }
      RETURN_IF_ERROR(DoGemm(/*trans_a=*/false, /*trans_b=*/false, images * d.pixels, d.oc, d.k,
                             /*alpha=*/1, a, d.k, filter, d.oc, /*beta=*/0,
                             output + n0 * d.pixels * d.oc, d.oc));
    }
    return absl::OkStatus();
  }

  absl::Status DoConv2DGrad(const Window2D& window, const Window2DOutput& out,
                            int64_t out_channels, const float* input, const float* filter,
                            const float* d_output, float* d_input, float* d_filter) override {
    const ConvDims d(window, out, out_channels);
    const int64_t chunk = d.chunk();
    std::unique_ptr<AlignedFloats> col;
    if (!d.identity()) RETURN_IF_ERROR(AllocateColumns(d, chunk, &col));
    for (int64_t n0 = 0; n0 < window.batch; n0 += chunk) {
      const int64_t images = std::min(chunk, window.batch - n0);
      const int64_t rows = images * d.pixels;
      const float* dy = d_output + n0 * d.pixels * d.oc;
      if (d_filter != nullptr) {
        // d_filter (+)= columns^T dy, summed over the groups of images.
        const float* a = input + n0 * d.image;
        if (!d.identity()) {
          Unfold(d, images, a, col->data);
          a = col->data;
        }
        RETURN_IF_ERROR(DoGemm(/*trans_a=*/true, /*trans_b=*/false, d.k, d.oc, rows, /*alpha=*/1,
                               a, d.k, dy, d.oc, /*beta=*/n0 == 0 ? 0.0f : 1.0f, d_filter, d.oc));
      }
      if (d_input != nullptr) {
        // The columns' gradient dy filter^T, folded back onto the images.
        float* dx = d_input + n0 * d.image;
        float* dcol = d.identity() ? dx : col->data;
        RETURN_IF_ERROR(DoGemm(/*trans_a=*/false, /*trans_b=*/true, rows, d.k, d.oc, /*alpha=*/1,
                               dy, d.oc, filter, d.oc, /*beta=*/0, dcol, d.k));
        if (!d.identity()) {
          ParallelRanges(options_.pool, images, BytePieces(2 * rows * d.k * 4),
                         [&](int64_t begin, int64_t end) {
                           for (int64_t i = begin; i < end; ++i) {
                             float* image = dx + i * d.image;
                             std::fill(image, image + d.image, 0.0f);
                             Col2ImAdd(d, dcol + i * d.pixels * d.k, image);
                           }
                         });
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status DoMaxPool2D(const Window2D& window, const Window2DOutput& out, const float* input,
                           float* output, int32_t* argmax) override {
    const int64_t image = window.height * window.width * window.channels;
    const int64_t out_image = out.height * out.width * window.channels;
    ParallelRanges(options_.pool, window.batch,
                   BytePieces(window.batch * (image + 2 * out_image) * 4),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t n = begin; n < end; ++n) {
                       MaxPoolImage(window, out, input + n * image, output + n * out_image,
                                    argmax + n * out_image);
                     }
                   });
    return absl::OkStatus();
  }

  absl::Status DoMaxPool2DGrad(const Window2D& window, const Window2DOutput& out,
                               const float* d_output, const int32_t* argmax,
                               float* d_input) override {
    const int64_t image = window.height * window.width * window.channels;
    const int64_t out_image = out.height * out.width * window.channels;
    // Every argmax checked before anything is written.
    for (int64_t n = 0; n < window.batch; ++n) {
      const int64_t bad = BadArgmax(window, out, argmax + n * out_image);
      if (bad >= 0) {
        const int64_t at = n * out_image + bad;
        return absl::InvalidArgumentError(absl::StrCat(
            "MaxPool2DGrad: argmax[", at, "] = ", argmax[at],
            " is not an element of its output's window in the same channel (images of ",
            window.height, " x ", window.width, " x ", window.channels, ")"));
      }
    }
    ParallelRanges(options_.pool, window.batch,
                   BytePieces(window.batch * (image + 2 * out_image) * 4),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t n = begin; n < end; ++n) {
                       float* __restrict dx = d_input + n * image;
                       const float* __restrict dy = d_output + n * out_image;
                       const int32_t* __restrict a = argmax + n * out_image;
                       std::fill(dx, dx + image, 0.0f);
                       for (int64_t i = 0; i < out_image; ++i) dx[a[i]] += dy[i];
                     }
                   });
    return absl::OkStatus();
  }

  absl::Status DoAxpy(int64_t n, float alpha, const float* x, float* y) override {
    Elementwise(n, [&](int64_t begin, int64_t end) {
#pragma GCC ivdep
      for (int64_t i = begin; i < end; ++i) y[i] += alpha * x[i];
    });
    return absl::OkStatus();
  }

  absl::Status DoScale(int64_t n, float alpha, float* x) override {
    Elementwise(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) x[i] *= alpha;
    });
    return absl::OkStatus();
  }

  absl::Status DoRowDot(int64_t rows, int64_t dim, const float* a, const float* b,
                        float* out) override {
    ParallelRanges(options_.pool, rows, BytePieces(2 * rows * dim * 4),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       out[r] = Dot(dim, a + r * dim, b + r * dim);
                     }
                   });
    return absl::OkStatus();
  }

  absl::Status DoRowDotGrad(int64_t rows, int64_t dim, const float* a, const float* b,
                            const float* dout, float* da, float* db) override {
    ParallelRanges(options_.pool, rows, BytePieces(4 * rows * dim * 4),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       const float g = dout[r];
                       if (da != nullptr) {
                         float* __restrict o = da + r * dim;
                         const float* __restrict x = b + r * dim;
                         for (int64_t j = 0; j < dim; ++j) o[j] = g * x[j];
                       }
                       if (db != nullptr) {
                         float* __restrict o = db + r * dim;
                         const float* __restrict x = a + r * dim;
                         for (int64_t j = 0; j < dim; ++j) o[j] = g * x[j];
                       }
                     }
                   });
    return absl::OkStatus();
  }

  absl::Status DoAllReduceSum(absl::Span<float* const> buffers, int64_t n) override {
    // Chunk by chunk (small enough to stay in L1): sum into buffers[0], then copy it out.
    constexpr int64_t kChunk = 2048;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const int64_t bytes = static_cast<int64_t>(buffers.size()) * 2 * n * 4;
    ParallelRanges(options_.pool, chunks, BytePieces(bytes), [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t lo = c * kChunk, len = std::min(kChunk, n - lo);
        float* __restrict sum = buffers[0] + lo;
        for (size_t r = 1; r < buffers.size(); ++r) {
          const float* __restrict x = buffers[r] + lo;
          for (int64_t j = 0; j < len; ++j) sum[j] += x[j];
        }
        for (size_t r = 1; r < buffers.size(); ++r) {
          std::memcpy(buffers[r] + lo, sum, len * sizeof(float));
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  static float StableSigmoid(float x) {
    const float e = std::exp(-std::fabs(x));  // in (0, 1]: never overflows
    return x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
  }

  static float Dot(int64_t n, const float* a, const float* b) {
    // Vector accumulators (a plain float sum would be kept in order and not vectorize).
    Vec acc{};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      Vec x, y;
      LoadVec(&x, a + i);
      LoadVec(&y, b + i);
      acc += x * y;
    }
    float sum = 0;
    for (int j = 0; j < kLanes; ++j) sum += acc[j];
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
  }

  static absl::Status CheckLabels(const char* op, int64_t rows, int64_t classes,
                                  const int32_t* labels) {
    for (int64_t r = 0; r < rows; ++r) {
      if (labels[r] < 0 || labels[r] >= classes) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": labels[", r, "] = ", labels[r],
                                                       " is outside [0, ", classes, ")"));
      }
    }
    return absl::OkStatus();
  }

  static absl::Status CheckIndex(const char* op, int64_t n, const int32_t* index, int64_t limit) {
    bool bad = false;
    for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>(index[i]) >= limit;
    if (!bad) return absl::OkStatus();
    for (int64_t i = 0; i < n; ++i) {
      if (index[i] < 0 || index[i] >= limit) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": index[", i, "] = ", index[i],
                                                       " is outside [0, ", limit, ")"));
      }
    }
    return absl::OkStatus();
  }

  // The column matrix of `chunk` images. Errors: kResourceExhausted.
  static absl::Status AllocateColumns(const ConvDims& d, int64_t chunk,
                                      std::unique_ptr<AlignedFloats>* col) {
    *col = std::make_unique<AlignedFloats>(chunk * d.pixels * d.k);
    if ((*col)->data != nullptr) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        "cpu: cannot allocate the convolution's ", chunk * d.pixels * d.k * 4,
        " bytes of columns"));
  }

  // Im2Col of `images` images from x into col, the images split across the pool.
  void Unfold(const ConvDims& d, int64_t images, const float* x, float* col) const {
    ParallelRanges(options_.pool, images, BytePieces(2 * images * d.pixels * d.k * 4),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t i = begin; i < end; ++i) {
                       Im2Col(d, x + i * d.image, col + i * d.pixels * d.k);
                     }
                   });
  }

  // How many pieces an op touching `bytes` of memory is split into.
  int64_t BytePieces(int64_t bytes) const {
    if (options_.pool == nullptr) return 1;
    return std::max<int64_t>(
        1, std::min<int64_t>(options_.pool->num_threads() + 1,
                             bytes / std::max<int64_t>(1, options_.min_bytes_per_piece)));
  }

  void Elementwise(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const {
    ParallelRanges(options_.pool, n, BytePieces(2 * n * 4), fn);
  }

  static void Copy(const void* from, void* to, int64_t bytes) { std::memcpy(to, from, bytes); }

  const CpuDeviceOptions options_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> CreateCpuDevice(const CpuDeviceOptions& options) {
  if (options.min_flops_per_piece < 0 || options.min_bytes_per_piece < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CreateCpuDevice: min_flops_per_piece (", options.min_flops_per_piece,
        ") and min_bytes_per_piece (", options.min_bytes_per_piece, ") must be >= 0"));
  }
  return std::unique_ptr<Device>(std::make_unique<CpuDevice>(options));
}

}  // namespace pstrain
