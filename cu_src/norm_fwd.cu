// Layer norm and RMS norm forward over the last axis of a C-contiguous (rows, n) matrix, out of place or in place
// (y may be x), the row statistics (mean, rstd) saved in float (double for float64).
//
// Same row layout and dispatch as softmax.cu (common/rows.cuh): sub-warp groups for short rows, a block a row,
// co-resident blocks a row for very long rows (pipelined: norm_fwd_parts), shared-memory tiles for short rows that
// are not whole packs (norm_fwd_tiled). Template arguments name their form (common/norm.cuh): e.g.
// norm_fwd<half, ANY_MODE, ROW_BLOCK, STAGED | FULL_PACKS>. norm_fwd and norm_fwd_tiled take the op as their last
// argument (mode: LAYER or RMS), read where MODE is ANY_MODE (norm_fwd_tiled: always); a few forms compile it in
// (host: norm._fwd_compiled), and norm_fwd_parts always.
#include "common/rows.cuh"
#include "common/norm.cuh"

// The row statistics from the parts' (segment mean, M2) pairs (layer, Chan et al.: M2 = sum over parts
// of M2_q + n_q * (mean_q - mean)^2) or sums of squares (rms: m2 = their sum, mean unchanged), parts
// segments of `chunk` elements; by every warp alike (warp_combine: no block barrier, the same result in
// every block of the row).
template <int MODE, typename A>
__device__ __forceinline__ void combine_norm_parts(const A* sl, int parts, long long chunk, long long n, A inv_n,
                                                   A& mean, A& m2) {
  if (MODE == LAYER) {
    auto len = [&](int q) { return A(min(chunk, n - q * chunk)); };
    mean = warp_combine<SumOp, A>(parts, [&](int q) { return ld_part(sl + 2 * q) * len(q); }) * inv_n;
    m2 = warp_combine<SumOp, A>(parts, [&](int q) {
      const A dq = ld_part(sl + 2 * q) - mean;
      return ld_part(sl + 2 * q + 1) + len(q) * dq * dq;
    });
  } else {
    A t[1];
    sum_parts<A, 1>(sl, parts, t);
    m2 = t[0];
  }
}

// Output element e of a pack from x: (x - mean) * rstd * w + b (layer), x * rstd * w (rms: mean 0). With FMA, a
// half type's layer output takes x * rstd + shift, shift = -mean * rstd (computed once a row by the caller): one FMA
// instead of a subtraction and a product. Its rounding, ~2^-24 * |mean| / std, stays far below a half type's; float32
// keeps the subtraction (exact where |mean| >> std), and so does the run-time-group element path: there a row of one
// element (x = mean) must give exactly b, which x * rstd + shift misses by the rounding of x * rstd.
// ANY_MODE (the mode at run time): the layer form throughout, rms rows passing mean 0, shift -0 and a bias of -0
// (out_shift, bias_fill): x * rstd + -0 and xhat * w + -0 are x * rstd and xhat * w to the bit, contracted into FMAs
// or not, at no cost an element.
template <int MODE, typename T, bool FMA = true, typename A>
__device__ __forceinline__ A norm_out(const typename Vec16<T>::type& xp, const typename Vec16<T>::type& wp,
                                      const typename Vec16<T>::type& bp, int e, A mean, A rstd, A shift) {
  const A xh = MODE != RMS && sizeof(T) == 2 && FMA ? elem<A>(xp, e) * rstd + shift : (elem<A>(xp, e) - mean) * rstd;
  return MODE == RMS ? xh * elem<A>(wp, e) : xh * elem<A>(wp, e) + elem<A>(bp, e);
}
// norm_out's shift, and the bias fill of a pack without bias (the host passes rms rows no bias), by the run-time mode
template <typename A>
__device__ __forceinline__ A out_shift(NormMode mode, A mean, A rstd) { return mode == LAYER ? -mean * rstd : A(-0.0); }
__device__ __forceinline__ float bias_fill(NormMode mode) { return mode == LAYER ? 0.f : -0.f; }

// norm_fwd's launch bounds: FwdBounds, but the unstaged rows of a compile-time sub-warp group come in 128-thread
// blocks (_rowwise.TUNING.subwarp_block): shifted ones of a half type bounded for 7 an SM (72 registers: at 64 its
// layer instances spilled 96-112 bytes; float32's did not), the others for 9 (half types, 56 registers) or 12
// (float32, 40), no spill: the run-time mode's instances, left at 64, took up to 63 (8 an SM) where the layer ones
// took 55-56 (bfloat16 on sm_90) and 44 where they took 40 (float32 FULL_PACKS on sm_80).
template <typename T, int GT, unsigned FORM> struct NormFwdBounds {
  static constexpr int STAGE = FORM & STAGED ? 1 : 0;
  static constexpr bool sub = !STAGE && GT > 0 && GT <= 32, shifted = FORM & SHIFTED;
  static constexpr int threads = sub ? 128 : FwdBounds<T, STAGE, GT>::threads;
  static constexpr int blocks = !sub ? FwdBounds<T, STAGE, GT>::blocks
                                : shifted ? (sizeof(T) == 2 ? 7 : 8) : (sizeof(T) == 2 ? 9 : 12);
};

// Launch: 1-D grid of blocks of G * groups threads (<= FwdThreads: 1024, float64 512; G = block when G > 32); block b
// takes segment b % parts of rows (b / parts) * groups + group + k * (grid / parts) * groups. w / b may be null (no
// affine), mean / rstd may be null (not saved). n <= parts * packs * G * V. inv_n = 1 / n, rounded by the host (the
// kernels multiply: an IEEE division is ~10 instructions and a slow path). phase, sync, slots: rows.cuh row_parts
// (parts > 1: 0 one launch, 1 and 2 two). MODE, or with ANY_MODE the argument mode:
//   layer: y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps), var biased: shifted sums in
//          one paired reduction, the exact two-pass where they would cancel (see below)
//   rms:   y = x * rstd * w,               rstd = 1 / sqrt(mean(x^2) + eps)
// GT (fix_group, rows.cuh): the group known at compile time (1..32, or ROW_BLOCK), one aligned segment a row;
// ANY_GROUP: G, parts and aligned at run time (the element path, float64, long rows).
// FORM (common/norm.cuh):
//   STAGED: the next row staged in dynamic shared memory while this one is processed, as softmax_fwd (blocks of
//     >= 512 threads a row, float32 sub-warp groups of 8, and long rms rows split over two launches).
//   FULL_PACKS (with GT): every thread holds MAXP whole packs of every row (n = MAXP * V * G).
//   SHIFTED (unstaged, ANY_GROUP or a sub-warp group, one segment a row): shifted rows as softmax_fwd's (shift_row,
//     rows.cuh: 16-byte aligned x, y, w, b, n not a multiple of V, planned for n + V - 1 elements), w / b read under
//     each pack by column_window; sub-warp groups take 16 bytes of dynamic shared memory a group (store_shifted).
template <typename T, int MODE, int GT, unsigned FORM>
__global__ void __launch_bounds__(NormFwdBounds<T, GT, FORM>::threads, NormFwdBounds<T, GT, FORM>::blocks)
norm_fwd(
    const T* x, T* y, const T* __restrict__ w, const T* __restrict__ b,
    typename AccOf<T>::type* __restrict__ mean_out, typename AccOf<T>::type* __restrict__ rstd_out, long long rows,
    long long n, long long chunk, int G, int packs, int parts, int aligned, typename AccOf<T>::type eps,
    typename AccOf<T>::type inv_n, int phase, int* sync, typename AccOf<T>::type* slots, NormMode mode) {
  constexpr int STAGE = FORM & STAGED ? 1 : 0;
  constexpr bool FULL = FORM & FULL_PACKS, SHIFT = FORM & SHIFTED;
  constexpr bool FMA = GT != ANY_GROUP || SHIFT;  // norm_out's
  fix_group<GT>(G, parts, aligned);
  if (MODE != ANY_MODE) mode = NormMode(MODE);  // (a compiled-in mode folds every test of it)
  typedef typename AccOf<T>::type A;
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  constexpr int MAXP = FwdPacks<T>::value;
  static_assert(!FULL || GT, "FULL rows are one aligned segment of a compile-time group");
  static_assert(!SHIFT || (!STAGE && !FULL && GT != ROW_BLOCK), "shifted rows: unstaged, a run-time or sub-warp group");
  if (FULL) packs = MAXP;
  if (SHIFT) parts = 1;  // (the host plans shifted rows as one segment)
  __shared__ A scratch_mem[2 * 3 * 32];
  RowScratch<A, 3> scratch{scratch_mem};  // one barrier a reduction
  const RowGrid at(G, parts, GT == ROW_BLOCK);
  const int part = at.part;
  const long long begin = part * chunk;
  const RowLayout<T> L{(int)min(chunk, n - begin), (int)(threadIdx.x & (G - 1)), G, packs, !SHIFT && aligned != 0,
                       FULL, SHIFT};
  // (shifted rows: whole warps loop together, but the exact second pass below is a group's own branch)
  const unsigned mask = group_mask(G);
  const T* wb = w ? w + begin : nullptr;
  const T* bb = b ? b + begin : nullptr;
  extern __shared__ int4 staged[];
  P* const sx = reinterpret_cast<P*>(staged);  // SHIFT: store_shifted's slots
  const long long step = at.nrg * at.gpb, ahead = STAGE == 2 ? 2 * step : step;  // the row staged next
  long long row = at.rg * at.gpb + at.gi;
  stage_first<STAGE, T, MAXP>(sx, x, row * n + begin, row < rows, L, step * n, row + step < rows);
  const A inv_len = parts == 1 ? inv_n : A(1) / A(L.len);  // the host's 1 / n: no IEEE division a row
  const int lead = SHIFT ? at.lead : 0;  // (RowGrid::lead)
  for (; row - lead < rows; row += step, scratch.next_row()) {
    const bool live = !SHIFT || row < rows;
    RowLayout<T> R = L;  // the row's layout (SHIFT; past the end: the last row again, not stored)
    const long long from = shift_row(R, live ? row : rows - 1, rows, n, begin, chunk);
    P r[MAXP];
    load_row<STAGE, T, MAXP>(r, sx + (STAGE == 2 ? scratch.odd() * MAXP * blockDim.x : 0), x, from,
                             ahead * n, row + ahead < rows, R, 0.f);
    // a pack's elements inside the segment: all of a whole pack, else those inside(p, e) says
    auto whole = [&](int p) { return FULL || (SHIFT ? R.whole(R.at(p)) : R.len - R.at(p) >= V); };
    auto inside = [&](int p, int e) { return SHIFT ? R.mine(R.at(p) + e) : e < R.len - R.at(p); };
    A mean = A(0), m2;  // (rms: m2 the sum of squares)
    if (mode == LAYER) {
      // One reduction for both moments: sums shifted by K, the segment's first element (the same for
      // every thread: a broadcast load), s1 = sum(x - K), s2 = sum((x - K)^2), reduced as a pair;
      // M2 = s2 - s1^2 / len. That cancels when K is far from the mean (relative error ~ eps * s2 /
      // M2 = eps * (1 + r^2), r = |K - mean| / std), so when s1^2 / len > 7/8 s2 (r^2 > 7: K more
      // than 2.6 standard deviations off, under 1% of the rows of normal data) the segment takes the
      // exact second pass around the mean instead. The decision is uniform: every thread of the
      // group holds the same reduced sums (a butterfly adds commutatively).
      // (K is loaded after the packs: a fill value taken from it would hold their loads back; loaded one
      // row ahead it measured 3-8% slower.)
      const A K = cast<A>(x[from + R.lo]);
      A s1 = A(0), s2 = A(0);
#pragma unroll
      for (int p = 0; p < MAXP; ++p)
        if (p < packs) {
          if (whole(p)) {  // no per-element test
#pragma unroll
            for (int e = 0; e < V; ++e) {
              const A d = elem<A>(r[p], e) - K;
              s1 += d;
              s2 += d * d;
            }
          } else {
#pragma unroll
            for (int e = 0; e < V; ++e) {
              const A d = inside(p, e) ? elem<A>(r[p], e) - K : A(0);  // slots outside: 0
              s1 += d;
              s2 += d * d;
            }
          }
        }
      row_reduce2<true>(s1, s2, G, mask, scratch.at(0));  // at(0), at(1)
      m2 = s2 - s1 * s1 * inv_len;
      const A seg_mean = K + s1 * inv_len;
      if (!(s1 * s1 * inv_len <= A(0.875) * s2)) {  // also NaN: the exact pass propagates it
        opaque<T, MAXP>(r);
        m2 = A(0);
#pragma unroll
        for (int p = 0; p < MAXP; ++p)
          if (p < packs) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
              const A d = (whole(p) || inside(p, e)) ? elem<A>(r[p], e) - seg_mean : A(0);
              m2 += d * d;
            }
          }
        m2 = row_reduce<SumOp, true>(m2, G, mask, scratch.at(2));
      }
      if (m2 < A(0)) m2 = A(0);  // rounding; NaN stays NaN
      mean = seg_mean;
      if (parts > 1) {
        // Chan et al. over the parts: M2 = sum over parts of m2_q + n_q * (mean_q - mean)^2.
        const A mine[2] = {seg_mean, m2};
        const A* sl = row_parts<A, 2>(mine, slots, sync, row, part, parts, phase);
        if (phase == 1) continue;
        combine_norm_parts<LAYER>(sl, parts, chunk, n, inv_n, mean, m2);  // after the exchange's barrier
      }
    } else {
      A ss = A(0);
#pragma unroll
      for (int p = 0; p < MAXP; ++p)
        if (p < packs)
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const A v = elem<A>(r[p], e);
            ss += v * v;
          }
      m2 = row_reduce<SumOp, true>(ss, G, mask, scratch.at(0));
      if (parts > 1) {
        const A mine[1] = {m2};
        const A* sl = row_parts<A, 1>(mine, slots, sync, row, part, parts, phase);
        if (phase == 1) continue;
        combine_norm_parts<RMS>(sl, parts, chunk, n, inv_n, mean, m2);
      }
    }
    const A rstd = acc_rsqrt<A>(m2 * inv_n + eps);  // (after the branches: one FMA, as each op's instance contracts)
    if (part == 0 && L.lane == 0 && live) {
      if (mean_out) mean_out[row] = mean;
      if (rstd_out) rstd_out[row] = rstd;
    }
    opaque<T, MAXP>(r);
    const A shift = out_shift(mode, mean, rstd);  // norm_out's, for a half type's rows
    if constexpr (SHIFT) {
      store_shifted<T, MAXP>(y + from, R, live, row + 1 < rows, sx, [&](int p) {
        const P wp = column_at<T>(w, p, R, 1.f), bp = column_at<T>(b, p, R, bias_fill(mode));
        P o;
        auto out = [&](int e) -> A { return norm_out<MODE, T, FMA>(r[p], wp, bp, e, mean, rstd, shift); };
#pragma unroll
        for (int e = 0; e < V; e += 2) store2(&o.v[e], out(e), out(e + 1));
        return o;
      });
      continue;
    }
    T* yr = y + row * n + begin;
    // The weight / bias loads, unconditional in FULL rows, stay here: hoisted out of the loop they spilled.
    const T *wr = wb, *br = bb;
    if (FULL) asm volatile("" : "+l"(wr), "+l"(br));
#pragma unroll
    for (int p = 0; p < MAXP; ++p) {
      if (p < packs) {
        const P wp = column_pack<T>(wr, p, L, 1.f), bp = column_pack<T>(br, p, L, bias_fill(mode));
        P o;
        auto out = [&](int e) -> A { return norm_out<MODE, T, FMA>(r[p], wp, bp, e, mean, rstd, shift); };
#pragma unroll
        for (int e = 0; e < V; e += 2) store2(&o.v[e], out(e), out(e + 1));
        store_pack<T>(yr, o, p, L);
      }
    }
  }
}

// Short rows through shared-memory tiles (tile_in / tile_out, rows.cuh; as softmax_tiled): thread t normalises rows
// t, t + blockDim.x, ... of its block's tile alone (fold_span / map_span: 2-byte types by words), with exact two-pass
// statistics from shared memory (mean, then the sum of squares around it; rms: around 0), w / b read by column.
// Launch: 1-D grid of ceil(rows / (rows_per_thread * blockDim.x)) blocks of <= 256 threads (a multiple of 32),
// dynamic shared memory of one tile (ceil(tile rows * n / V) 16-byte slots), x and y 16-byte aligned; any n >= 1;
// w / b / mean_out / rstd_out may be null. y may be x.
template <typename T>
__global__ void __launch_bounds__(256) norm_fwd_tiled(const T* x, T* y, const T* __restrict__ w,
                                                      const T* __restrict__ b,
                                                      typename AccOf<T>::type* __restrict__ mean_out,
                                                      typename AccOf<T>::type* __restrict__ rstd_out, long long rows,
                                                      int n, int rows_per_thread, typename AccOf<T>::type eps,
                                                      typename AccOf<T>::type inv_n, NormMode mode) {
  typedef typename AccOf<T>::type A;
  extern __shared__ int4 tile_mem[];
  const RowTile t(rows, n, rows_per_thread * blockDim.x);
  tile_in<T>(tile_mem, x, t);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  for (int i = threadIdx.x; i < t.nrows; i += blockDim.x) {
    T* const r = reinterpret_cast<T*>(tile_mem) + i * n;
    const A mean = mode == LAYER ? fold_span<SumOp>(r, r, n, A(0), [](A v, A) { return v; }) * inv_n : A(0);
    const A m2 = fold_span<SumOp>(r, r, n, A(0), [&](A v, A) { const A d = v - mean; return d * d; });
    const A rstd = acc_rsqrt<A>(m2 * inv_n + eps);
    if (mean_out) mean_out[t.row0 + i] = mean;
    if (rstd_out) rstd_out[t.row0 + i] = rstd;
    map_span<A>(r, r, n, [&](A v, A, int k) {
      A o = (v - mean) * rstd;
      if (w) o *= cast<A>(w[k]);
      if (b) o += cast<A>(b[k]);  // (rms: no bias)
      return o;
    });
  }
  __syncthreads();
  tile_out<T>(y, tile_mem, t);
}

// The sum of f(element) over this thread's elements of a pipelined_parts set (one input).
template <typename T, int MAXP, typename F>
__device__ __forceinline__ float own_sum(const typename Vec16<T>::type* set, const RowLayout<T>& L, F f) {
  float acc = 0.f;
  for_own_packs<MAXP>(L, [&](int p) {
    const typename Vec16<T>::type v = own_slot<MAXP>(set, 0, p);
#pragma unroll
    for (int e = 0; e < L.V; ++e) acc += f(elem<float>(v, e));
  });
  return acc;
}

// Long rows over `parts` co-resident blocks, pipelined (pipelined_parts in rows.cuh, as softmax_fwd_parts):
// one read of x, one write of y, each row's exchange overlapped with the next row's reduction. A segment's
// statistics are exact two-pass sums from shared memory (mean, then M2 around it).
// Launch: grid = parts * row groups, every block resident; blocks of <= 512 threads; dynamic shared memory
// of 3 * MAXP * blockDim.x 16-byte slots (as softmax_fwd_parts); n <= parts * packs * blockDim.x * V; aligned
// rows, float accumulators (words: rows * parts * 2 tagged 64-bit slots,
// zero before the first publish: zero_words). In place allowed (y == x). FORM: PLAIN or FULL_PACKS. MODE compiled
// in: it sets the words a part publishes (K) and float32 layer norm's bias registers.
template <typename T, int MODE, int MAXP, unsigned FORM = PLAIN>
__global__ void __launch_bounds__(512, MAXP > 4 ? 1 : 2) norm_fwd_parts(const T* x, T* y, const T* __restrict__ w,
                                                         const T* __restrict__ b, float* __restrict__ mean_out,
                                                         float* __restrict__ rstd_out, long long rows, long long n,
                                                         long long chunk, int packs, int parts, float eps,
                                                         float inv_n, unsigned long long* words) {
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  constexpr int K = MODE == LAYER ? 2 : 1;  // published per part: (mean, M2) or the sum of squares
  __shared__ float scratch_mem[2 * 2 * 32];
  RowScratch<float, 2> scratch{scratch_mem};
  constexpr bool FULL = FORM & FULL_PACKS;
  const int part = blockIdx.x % parts;
  const long long begin = part * chunk;
  // FULL: every part holds MAXP packs of every thread (the host checks): no pack count or bounds test a pass.
  if (FULL) packs = MAXP;
  const RowLayout<T> L{(int)min(chunk, n - begin), (int)threadIdx.x, (int)blockDim.x, packs, true, FULL};
  const float inv_len = 1.f / L.len;
  const T* wb = w ? w + begin : nullptr;
  const T* bb = b ? b + begin : nullptr;
  // The thread's weight packs, the same every row: loaded once; float32's bias packs too (62 registers; a half
  // type's spilled 124 bytes: its bias reloads a row, 32 KB a block from L2).
  constexpr bool BIAS_REGS = MODE == LAYER && sizeof(T) == 4;
  P wr[MAXP], br[MAXP];
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    wr[p] = column_pack<T>(wb, p, L, 1.f);
    if (BIAS_REGS) br[p] = column_pack<T>(bb, p, L, 0.f);
  }
  const T* const src[1] = {x};
  auto reduce = [&](long long row, const P* set) {
    float mine[K];
    if (MODE == LAYER) {
      const float mean = block_reduce<SumOp, true>(own_sum<T, MAXP>(set, L, [](float v) { return v; }),
                                                   scratch.at(0)) * inv_len;
      const float m2 = own_sum<T, MAXP>(set, L, [=](float v) { return (v - mean) * (v - mean); });
      mine[0] = mean;
      mine[K - 1] = block_reduce<SumOp, true>(m2, scratch.at(1));
    } else {
      mine[0] = block_reduce<SumOp, true>(own_sum<T, MAXP>(set, L, [](float v) { return v * v; }), scratch.at(0));
    }
    scratch.next_row();
    publish_tagged<K>(mine, words, row, part, parts);
  };
  auto write = [&](long long row, const P* set, unsigned long long early) {
    float mean = 0.f, m2;
    combine_norm_parts<MODE>(collect_tagged<K>(words, row, parts, early), parts, chunk, n, inv_n, mean, m2);
    const float rstd = acc_rsqrt<float>(m2 * inv_n + eps);
    if (part == 0 && threadIdx.x == 0) {
      if (mean_out) mean_out[row] = mean;
      if (rstd_out) rstd_out[row] = rstd;
    }
    T* yr = y + row * n + begin;
    const float shift = -mean * rstd;  // norm_out's, for a half type's layer rows
#pragma unroll
    for (int p = 0; p < MAXP; ++p) {
      if (p < packs) {
        const P v = own_slot<MAXP>(set, 0, p), bp = BIAS_REGS ? br[p] : column_pack<T>(bb, p, L, 0.f);
        P o;
        auto out = [&](int e) -> float { return norm_out<MODE, T>(v, wr[p], bp, e, mean, rstd, shift); };
#pragma unroll
        for (int e = 0; e < V; e += 2) store2(&o.v[e], out(e), out(e + 1));
        store_pack<T>(yr, o, p, L);
      }
    }
  };
  pipelined_parts<T, MAXP, 1, K, true>(src, rows, n, begin, chunk, parts, L, words, reduce, write);
}
