// What the norm kernels (norm_fwd.cu, norm_bwd.cu, norm_bwd_cluster.cu) share: the names their template arguments
// take, and the backward's arithmetic of one 16-byte pack.
#pragma once
#include "rows.cuh"

enum NormMode : int { LAYER = 0, RMS = 1 };
// The backward's src: the forward's input x with its saved mean / rstd, or its output y with rstd (after an in-place
// forward: x-hat recomputed as (y - b) / w, rms y / w).
enum NormSource : int { FROM_X = 0, FROM_Y = 1 };
// A kernel's MODE / SRC taken from its run-time arguments (mode, source) instead of compiled in: one instance for
// both ops (and both sources) where that costs no spill or occupancy (host: norm._fwd_compiled, _bwd_compiled). Every
// kernel with a MODE takes the arguments, read only there.
constexpr int ANY_MODE = -1, ANY_SOURCE = -1;
// A row kernel's form, flags combined with | in its template argument FORM:
//   STAGED      the next row copied into shared memory (cp.async) while this one is processed
//   FULL_PACKS  every thread holds the kernel's MAXP whole packs of every row segment (the host checks): no pack
//               count or bounds test at run time
//   SHIFTED     rows that are not whole packs of 16-byte aligned arrays, read as the packs around them (shift_row)
//   NO_DBIAS    no dbias column sums (the host sums dy's columns instead)
//   WARP_ROWS   a warp a row (norm_bwd_shared)
enum RowForm : unsigned { PLAIN = 0, STAGED = 1, FULL_PACKS = 2, SHIFTED = 4, NO_DBIAS = 8, WARP_ROWS = 16 };
// The GT of a row kernel that takes its group at run time (rows.cuh fix_group; else 1..32 or ROW_BLOCK).
constexpr int ANY_GROUP = 0;

// The backward's arithmetic, shared by norm_bwd, norm_bwd_parts, norm_bwd_shared and norm_bwd_ring:
//   g = dy * w,  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (rms: no mean(g) term)
//   dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy

// The op a backward kernel runs: its MODE and SRC, or where they are ANY_MODE / ANY_SOURCE its run-time arguments (a
// compiled-in one folds every test of it).
template <int MODE, int SRC> struct NormOp {
  bool layer, from_y;
  __device__ __forceinline__ NormOp(NormMode mode, NormSource source)
      : layer(MODE == ANY_MODE ? mode == LAYER : MODE == LAYER),
        from_y(SRC == ANY_SOURCE ? source == FROM_Y : SRC == FROM_Y) {}
};

// f(NormOp<M, S>) with the op compiled in. The pack arithmetic below branches so on a run-time op (uniform), each op
// to its own code, to round as that op's instance does: one form for the ops, equal in exact arithmetic (rms dx as
// rstd * (g - c1 - xhat * c2), c1 = 0), changes which products the compiler contracts into FMAs.
template <int MODE, int SRC, typename F>
__device__ __forceinline__ void with_op(const NormOp<MODE, SRC>& op, F f) {
  const NormSource source = op.from_y ? FROM_Y : FROM_X;
  if constexpr (MODE == ANY_MODE) {
    if (op.layer) with_op(NormOp<LAYER, SRC>(LAYER, source), f);
    else with_op(NormOp<RMS, SRC>(RMS, source), f);
  } else if constexpr (SRC == ANY_SOURCE) {
    if (op.from_y) f(NormOp<MODE, FROM_Y>(NormMode(MODE), FROM_Y));
    else f(NormOp<MODE, FROM_X>(NormMode(MODE), FROM_X));
  } else {
    f(op);
  }
}

// c + a * b in one FMA, as the compiler contracts these sums in one op's instance: pinned, as where the ops' pack
// arithmetic meets (with_op) it could leave each op's product in its branch and their common sum after it.
template <typename A> __device__ __forceinline__ A fma_acc(A a, A b, A c);
template <> __device__ __forceinline__ float fma_acc<float>(float a, float b, float c) { return __fmaf_rn(a, b, c); }
template <> __device__ __forceinline__ double fma_acc<double>(double a, double b, double c) { return __fma_rn(a, b, c); }

// xhat of one element: from x, (x - mean) * rstd; from the output y, (y - b) / w (rms: y / w). A zero weight gives
// NaN there (0 / 0: y = b in that column), as a division by zero would.
template <int MODE, int FROM_OUTPUT, typename A>
__device__ __forceinline__ A bwd_xhat(A v, A wv, A bv, A mean, A rstd) {
  if (FROM_OUTPUT) return acc_div<A>(MODE == LAYER ? v - bv : v, wv);
  return (v - mean) * rstd;
}

// First pass over one pack, added to this thread's share: c1 += sum(g), c2 += sum(g * xhat), g = dy * w. From
// x: sum(g * (x - mean)), times rstd by the caller; from the output, g * xhat = dy * (y - b): no division.
template <typename T, int MODE, int SRC, typename A = typename AccOf<T>::type, typename P = typename Vec16<T>::type,
          typename WP = P>
__device__ __forceinline__ void bwd_sums_pack(const NormOp<MODE, SRC>& op, const P& x, const P& d, const WP& wp,
                                              const P& bp, A mean, A rstd, A& c1, A& c2) {
  if constexpr (MODE == ANY_MODE || SRC == ANY_SOURCE) {
    with_op(op, [&](auto fixed) { bwd_sums_pack<T>(fixed, x, d, wp, bp, mean, rstd, c1, c2); });
  } else {
    if (MODE == RMS) mean = A(0);  // (the kernel's is a run-time 0 in rms rows; as its own instance, a constant)
#pragma unroll
    for (int e = 0; e < Vec16<T>::N; ++e) {
      const A dv = elem<A>(d, e), xv = elem<A>(x, e);
      if (MODE == LAYER) c1 = fma_acc(dv, elem<A>(wp, e), c1);
      if (SRC == FROM_Y) c2 = fma_acc(dv, MODE == LAYER ? xv - elem<A>(bp, e) : xv, c2);
      else c2 = fma_acc(dv * elem<A>(wp, e), xv - mean, c2);
    }
  }
}

// Second pass over one pack: o = its dx (c1, c2: the row means of g and g * xhat), and the column sums
// of its V elements accumulated: aw[e] += dy * xhat, with DBS ab[e] += dy (layer rows). Layer norm's dx from x as two
// FMAs, g * rstd - rstd * c1 - xhat * rstd * c2; a half type's xhat from x as x * rstd - mean * rstd (as the
// forward: its rounding, ~2^-24 |mean| rstd, is far below the input's own 2^-8..2^-11 |x| rstd).
template <typename T, bool DBS, int MODE, int SRC, typename A = typename AccOf<T>::type,
          typename P = typename Vec16<T>::type, typename WP = P>
__device__ __forceinline__ void bwd_write_pack(const NormOp<MODE, SRC>& op, const P& x, const P& d, const WP& wp,
                                               const P& bp, A mean, A rstd, A c1, A c2, P& o, A* aw, A* ab) {
  if constexpr (MODE == ANY_MODE || SRC == ANY_SOURCE) {
    with_op(op, [&](auto fixed) { bwd_write_pack<T, DBS>(fixed, x, d, wp, bp, mean, rstd, c1, c2, o, aw, ab); });
  } else {
    constexpr int V = Vec16<T>::N;
    constexpr int S = sizeof(T) == 2 ? 2 : 1;  // elements converted together (store2)
    constexpr bool SHIFT = MODE == LAYER && SRC == FROM_X && sizeof(T) == 2;
    if (MODE == RMS) mean = A(0);
    const A shift = -mean * rstd, rc1 = -rstd * c1, rc2 = rstd * c2;
#pragma unroll
    for (int e0 = 0; e0 < V; e0 += S) {
      A pair[2];
#pragma unroll
      for (int h = 0; h < S; ++h) {
        const int e = e0 + h;
        const A wv = elem<A>(wp, e), dv = elem<A>(d, e);
        const A xh = SHIFT ? elem<A>(x, e) * rstd + shift
                           : bwd_xhat<MODE, SRC>(elem<A>(x, e), wv, elem<A>(bp, e), mean, rstd);
        const A g = dv * wv;
        pair[h] = MODE == LAYER && SRC == FROM_X ? g * rstd + rc1 - xh * rc2  // (from y: one more register spilled)
                                                 : rstd * (MODE == LAYER ? g - c1 - xh * c2 : g - xh * c2);
        aw[e] = fma_acc(dv, xh, aw[e]);
        if constexpr (DBS && MODE == LAYER) ab[e] += dv;
      }
      if (S == 2) store2(&o.v[e0], pair[0], pair[1]);
      else o.v[e0] = cast<T>(pair[0]);
    }
  }
}
