// Layer norm and RMS norm over the last axis of a C-contiguous (rows, n) matrix, forward and
// backward, out of place or in place (y may be x). Statistics in float (double for float64).
//
// Same row layout and dispatch as softmax.cu (common/rows.cuh): sub-warp groups for short rows, a
// block per row, co-resident blocks per row for very long rows. The backward also reduces dweight /
// dbias across rows without atomics: each thread accumulates its own columns (in registers) over the
// rows its group visits, the block sums its groups in a fixed order and writes one partial row per
// block; column_sum then adds the partial rows in order. Deterministic.
#include "common/rows.cuh"
#include "common/cluster.cuh"

enum { LAYER = 0, RMS = 1 };
// norm_bwd: PACKS 16-byte packs of each of x and dy per thread. Two for float32 / float64 (8 / 4 elements):
// both rows and the thread's dweight / dbias column accumulators (one per element) fit 64 registers
// (float64 128). A half type has two forms: PACKS = 1 (8 elements; 1024-thread blocks, one per SM, so an
// 8192-element row fits one block) fits without spilling; PACKS = 2 (16 elements, 512-thread blocks, two
// per SM) spills accumulators (128 bytes rms, ~700 layer) yet measured faster on long rows, where the
// second resident block hides the row's exchange (the host picks; benchmarks/notes.md).
template <typename T, int PACKS> struct NormBwdThreads {
  static constexpr int value = sizeof(T) == 8 ? 256 : sizeof(T) == 2 && PACKS == 1 ? 1024 : 512;
};
template <typename T, int PACKS> struct NormBwdMinBlocks { static constexpr int value = sizeof(T) == 2 && PACKS == 1 ? 1 : 2; };

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

// Output element e of a pack from x: (x - mean) * rstd * w + b (layer), x * rstd * w (rms: mean 0).
// A half type's layer output takes x * rstd + shift, shift = -mean * rstd (computed once a row by the caller):
// one FMA instead of a subtraction and a product. Its rounding, ~2^-24 * |mean| / std, stays far below
// a half type's; float32 keeps the subtraction (exact where |mean| >> std).
template <int MODE, typename T, typename A>
__device__ __forceinline__ A norm_out(const typename Vec16<T>::type& xp, const typename Vec16<T>::type& wp,
                                      const typename Vec16<T>::type& bp, int e, A mean, A rstd, A shift) {
  const A xh = MODE == LAYER && sizeof(T) == 2 ? elem<A>(xp, e) * rstd + shift : (elem<A>(xp, e) - mean) * rstd;
  return MODE == LAYER ? xh * elem<A>(wp, e) + elem<A>(bp, e) : xh * elem<A>(wp, e);
}

// norm_fwd's launch bounds: FwdBounds, but shifted rows of a compile-time sub-warp group (128-thread blocks:
// _rowwise.SUBWARP_BLOCK) of a half type bounded for 7 an SM (72 registers: at 64 its layer instances spilled 96-112
// bytes; float32's did not).
template <typename T, int STAGE, int GT, bool SHIFT> struct NormFwdBounds {
  static constexpr bool sub = SHIFT && GT > 0 && GT <= 32;
  static constexpr int threads = sub ? 128 : FwdBounds<T, STAGE, GT>::threads;
  static constexpr int blocks = sub ? (sizeof(T) == 2 ? 7 : 8) : FwdBounds<T, STAGE, GT>::blocks;
};

// Launch: 1-D grid of blocks of G * groups threads (<= FwdThreads: 1024, float64 512; G = block when
// G > 32); block b takes
// segment b % parts of rows (b / parts) * groups + group + k * (grid / parts) * groups. w / b may be
// null (no affine), mean / rstd may be null (not saved). n <= parts * packs * G * V. inv_n = 1 / n,
// rounded by the host (the kernels multiply: an IEEE division is ~10 instructions and a slow path).
//   layer: y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps), var biased: shifted sums in
//          one paired reduction, the exact two-pass where they would cancel (see below)
//   rms:   y = x * rstd * w,               rstd = 1 / sqrt(mean(x^2) + eps)
// STAGE: the next row staged in dynamic shared memory while this one is processed, as softmax_fwd (blocks of
// >= 512 threads a row, and float32 sub-warp groups of 8: norm.STAGE_SHORT_FWD).
// GT (fix_group, rows.cuh): the group known at compile time (1..32, or ROW_BLOCK), one aligned segment a row.
// FULL (with GT): every thread holds MAXP whole packs of every row (n = MAXP * V * G; the host checks): no pack
// count or bounds test a pass.
// SHIFT (unstaged, a run-time or sub-warp group, one segment a row): shifted rows as softmax_fwd's (shift_row,
// rows.cuh: 16-byte aligned x, y, w, b, n not a multiple of V, planned for n + V - 1 elements), w / b read under each
// pack by column_window; sub-warp groups take 16 bytes of dynamic shared memory a group (store_shifted).
template <typename T, int MODE, int STAGE, int GT = 0, bool FULL = false, bool SHIFT = false>
__global__ void __launch_bounds__(NormFwdBounds<T, STAGE, GT, SHIFT>::threads, NormFwdBounds<T, STAGE, GT, SHIFT>::blocks)
norm_fwd(
    const T* x, T* y, const T* __restrict__ w, const T* __restrict__ b,
    typename AccOf<T>::type* __restrict__ mean_out, typename AccOf<T>::type* __restrict__ rstd_out, long long rows,
    long long n, long long chunk, int G, int packs, int parts, int aligned, typename AccOf<T>::type eps,
    typename AccOf<T>::type inv_n, int phase, int* sync, typename AccOf<T>::type* slots) {
  fix_group<GT>(G, parts, aligned);
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
    A mean = A(0), rstd;
    if (MODE == LAYER) {
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
      A m2 = s2 - s1 * s1 * inv_len;
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
      rstd = acc_rsqrt<A>(m2 * inv_n + eps);
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
      ss = row_reduce<SumOp, true>(ss, G, mask, scratch.at(0));
      if (parts > 1) {
        const A mine[1] = {ss};
        const A* sl = row_parts<A, 1>(mine, slots, sync, row, part, parts, phase);
        if (phase == 1) continue;
        combine_norm_parts<RMS>(sl, parts, chunk, n, inv_n, mean, ss);
      }
      rstd = acc_rsqrt<A>(ss * inv_n + eps);
    }
    if (part == 0 && L.lane == 0 && live) {
      if (mean_out) mean_out[row] = mean;
      if (rstd_out) rstd_out[row] = rstd;
    }
    opaque<T, MAXP>(r);
    const A shift = -mean * rstd;  // norm_out's, for a half type's layer rows
    if constexpr (SHIFT) {
      store_shifted<T, MAXP>(y + from, R, live, row + 1 < rows, sx, [&](int p) {
        const P wp = column_at<T>(w, p, R, 1.f), bp = column_at<T>(b, p, R, 0.f);
        P o;
        auto out = [&](int e) -> A { return norm_out<MODE, T>(r[p], wp, bp, e, mean, rstd, shift); };
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
        const P wp = column_pack<T>(wr, p, L, 1.f), bp = column_pack<T>(br, p, L, 0.f);
        P o;
        auto out = [&](int e) -> A { return norm_out<MODE, T>(r[p], wp, bp, e, mean, rstd, shift); };
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
template <typename T, int MODE>
__global__ void __launch_bounds__(256) norm_fwd_tiled(const T* x, T* y, const T* __restrict__ w,
                                                      const T* __restrict__ b,
                                                      typename AccOf<T>::type* __restrict__ mean_out,
                                                      typename AccOf<T>::type* __restrict__ rstd_out, long long rows,
                                                      int n, int rows_per_thread, typename AccOf<T>::type eps,
                                                      typename AccOf<T>::type inv_n) {
  typedef typename AccOf<T>::type A;
  extern __shared__ int4 tile_mem[];
  const RowTile t(rows, n, rows_per_thread * blockDim.x);
  tile_in<T>(tile_mem, x, t);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  for (int i = threadIdx.x; i < t.nrows; i += blockDim.x) {
    T* const r = reinterpret_cast<T*>(tile_mem) + i * n;
    const A mean = MODE == LAYER ? fold_span<SumOp>(r, r, n, A(0), [](A v, A) { return v; }) * inv_n : A(0);
    const A m2 = fold_span<SumOp>(r, r, n, A(0), [&](A v, A) { const A d = v - mean; return d * d; });
    const A rstd = acc_rsqrt<A>(m2 * inv_n + eps);
    if (mean_out) mean_out[t.row0 + i] = mean;
    if (rstd_out) rstd_out[t.row0 + i] = rstd;
    map_span<A>(r, r, n, [&](A v, A, int k) {
      A o = (v - mean) * rstd;
      if (w) o *= cast<A>(w[k]);
      if (MODE == LAYER && b) o += cast<A>(b[k]);
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
// zero before the first publish: zero_words). In place allowed (y == x).
template <typename T, int MODE, int MAXP, bool FULL = false>
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

// Backward. With FROM_OUTPUT = 0, src is the forward input x and mean / rstd the saved statistics
// (mean unused for rms); with FROM_OUTPUT = 1 (after an in-place forward), src is the output y and
// the normalised input is recomputed as xhat = (y - b) / w (rms: y / w), rstd saved (w has no zero).
//   g = dy * w,  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (rms: no mean(g) term)
//   dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy   (as per-block partial rows)
// Launch: like norm_fwd with blocks of <= NormBwdThreads, and
// a persistent grid (grid / parts row groups, each block writes partial row rg = b / parts, columns of
// its segment). Each thread keeps its columns' dweight / dbias sums in registers over the rows its
// group visits; a block of one group (G = block) writes them straight out, a block of several groups
// (G <= 32) sums them in group order through dynamic shared memory of blockDim.x * PACKS * V
// accumulators. dw_part / db_part may be null (not wanted). STAGE (aligned rows): each thread copies its packs
// of its group's next row's src and dy (cp.async) into dynamic shared memory of 2 * packs * blockDim.x 16-byte
// slots (the larger of the two sizes with several groups) while this row is processed, as softmax_bwd: a
// 1024-thread block alone on its SM otherwise waits for each row's loads after the previous row's exchange and
// stores; sub-warp groups of 8-32 threads with ~8 rows a group likewise (host: norm.stage_short_bwd).
// DB = false (layer_norm only): no dbias accumulators (the host sums dy's columns itself): 16 fewer
// registers for the two-pack half form, whose accumulators spill. GT: the group known at compile time (fix_group).
// SHIFT (the half types' one-pack form, a run-time or sub-warp group, one segment a row; STAGE: block rows only):
// shifted rows as norm_fwd's. The host steps a group's rows by a multiple of V (or gives it one row): all start at the same `head`,
// so the thread's weight / bias columns are read once and its column sums stay in the same registers; sub-warp blocks
// then add their groups' sums by column, not by slot.
// The backward's arithmetic of one row, shared by norm_bwd and norm_bwd_pipelined.
// xhat of one element: from x, (x - mean) * rstd; from the output y, (y - b) / w (rms: y / w).
template <int MODE, int FROM_OUTPUT, typename A>
__device__ __forceinline__ A bwd_xhat(A v, A wv, A bv, A mean, A rstd) {
  if (FROM_OUTPUT) return acc_div<A>(MODE == LAYER ? v - bv : v, wv);
  return (v - mean) * rstd;
}

// First pass over one pack, added to this thread's share: c1 += sum(g), c2 += sum(g * xhat), g = dy * w. From
// x: sum(g * (x - mean)), times rstd by the caller; from the output, g * xhat = dy * (y - b): no division.
template <typename T, int MODE, int FROM_OUTPUT, typename A = typename AccOf<T>::type,
          typename P = typename Vec16<T>::type, typename WP = P>
__device__ __forceinline__ void bwd_sums_pack(const P& x, const P& d, const WP& wp, const P& bp, A mean, A rstd, A& c1,
                                              A& c2) {
#pragma unroll
  for (int e = 0; e < Vec16<T>::N; ++e) {
    const A dv = elem<A>(d, e), xv = elem<A>(x, e);
    if (MODE == LAYER) c1 += dv * elem<A>(wp, e);
    if (FROM_OUTPUT) c2 += dv * (MODE == LAYER ? xv - elem<A>(bp, e) : xv);
    else c2 += dv * elem<A>(wp, e) * (xv - mean);
  }
}

// First pass, this thread's share: c1 = sum(g), c2 = sum(g * xhat), g = dy * w; pack p's weight and bias
// columns(p, wp, bp).
template <typename T, int MODE, int FROM_OUTPUT, int MAXP, typename A = typename AccOf<T>::type,
          typename P = typename Vec16<T>::type, typename F>
__device__ __forceinline__ void bwd_sums(const P (&rx)[MAXP], const P (&rd)[MAXP], const RowLayout<T>& L, A mean,
                                         A rstd, A& c1, A& c2, F columns) {
  c1 = A(0);
  c2 = A(0);
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    if (p < L.packs) {
      P wp, bp;
      columns(p, wp, bp);
      bwd_sums_pack<T, MODE, FROM_OUTPUT>(rx[p], rd[p], wp, bp, mean, rstd, c1, c2);
    }
  }
  if (!FROM_OUTPUT) c2 *= rstd;
}

// Second pass over one pack: o = its dx (c1, c2: the row means of g and g * xhat), and the column sums
// of its V elements accumulated: aw[e] += dy * xhat, with DBS ab[e] += dy. Layer norm's dx from x as two FMAs,
// g * rstd - rstd * c1 - xhat * rstd * c2; a half type's xhat from x as x * rstd - mean * rstd (as the
// forward: its rounding, ~2^-24 |mean| rstd, is far below the input's own 2^-8..2^-11 |x| rstd).
template <typename T, int MODE, int FROM_OUTPUT, bool DBS, typename A = typename AccOf<T>::type,
          typename P = typename Vec16<T>::type, typename WP = P>
__device__ __forceinline__ void bwd_write_pack(const P& x, const P& d, const WP& wp, const P& bp, A mean, A rstd,
                                               A c1, A c2, P& o, A* aw, A* ab) {
  constexpr int V = Vec16<T>::N;
  constexpr int S = sizeof(T) == 2 ? 2 : 1;  // elements converted together (store2)
  constexpr bool SHIFT = MODE == LAYER && !FROM_OUTPUT && sizeof(T) == 2;
  const A shift = -mean * rstd, rc1 = -rstd * c1, rc2 = rstd * c2;
#pragma unroll
  for (int e0 = 0; e0 < V; e0 += S) {
    A pair[2];
#pragma unroll
    for (int h = 0; h < S; ++h) {
      const int e = e0 + h;
      const A wv = elem<A>(wp, e), dv = elem<A>(d, e);
      const A xh = SHIFT ? elem<A>(x, e) * rstd + shift
                         : bwd_xhat<MODE, FROM_OUTPUT>(elem<A>(x, e), wv, elem<A>(bp, e), mean, rstd);
      const A g = dv * wv;
      pair[h] = MODE == LAYER && !FROM_OUTPUT ? g * rstd + rc1 - xh * rc2  // (from y: one more register spilled)
                                              : rstd * (MODE == LAYER ? g - c1 - xh * c2 : g - xh * c2);
      aw[e] += dv * xh;
      if constexpr (DBS) ab[e] += dv;
    }
    if (S == 2) store2(&o.v[e0], pair[0], pair[1]);
    else o.v[e0] = cast<T>(pair[0]);
  }
}

// Second pass: dx of the row written to dxr, and this thread's column sums in registers: aw[p * V + e],
// with DBS ab[p * V + e].
template <typename T, int MODE, int FROM_OUTPUT, bool DBS, int MAXP, int K, int KB,
          typename A = typename AccOf<T>::type, typename P = typename Vec16<T>::type>
__device__ __forceinline__ void bwd_write(const P (&rx)[MAXP], const P (&rd)[MAXP], const T* wb, const T* bb,
                                          const RowLayout<T>& L, A mean, A rstd, A c1, A c2, T* dxr, A (&aw)[K],
                                          A (&ab)[KB]) {
  constexpr int V = Vec16<T>::N;
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    if (p < L.packs) {
      const P wp = column_pack<T, true>(wb, p, L, 1.f), bp = column_pack<T, true>(bb, p, L, 0.f);
      P o;
      bwd_write_pack<T, MODE, FROM_OUTPUT, DBS>(rx[p], rd[p], wp, bp, mean, rstd, c1, c2, o, aw + p * V,
                                                DBS ? ab + p * V : ab);
      store_pack<T>(dxr, o, p, L);
    }
  }
}

// A block of one group (G = block): each thread writes its own columns' sums to the partial row orow. SHIFT: the
// group's rows start `head` elements into their first pack (column = position - head).
template <typename T, int MAXP, bool SHIFT = false, int K, typename A>
__device__ __forceinline__ void store_column_sums(A* orow, const A (&acc)[K], const RowLayout<T>& L, int head = 0) {
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    const int i = L.at(p) - (SHIFT ? head : 0);
    if (p < L.packs)
#pragma unroll
      for (int e = 0; e < L.V; ++e)
        if ((!SHIFT || i + e >= 0) && i + e < L.len) orow[i + e] = acc[(p * L.V + e) % K];
  }
}

template <typename T, int MODE, int FROM_OUTPUT, bool STAGE, int PACKS, bool DB = true, int GT = 0, bool FULL = false,
          bool SHIFT = false>
__global__ void __launch_bounds__(NormBwdThreads<T, PACKS>::value, NormBwdMinBlocks<T, PACKS>::value) norm_bwd(const T* __restrict__ src, const T* __restrict__ dy, T* dx,
                                                  const T* __restrict__ w, const T* __restrict__ b,
                                                  const typename AccOf<T>::type* __restrict__ mean_in,
                                                  const typename AccOf<T>::type* __restrict__ rstd_in,
                                                  typename AccOf<T>::type* __restrict__ dw_part,
                                                  typename AccOf<T>::type* __restrict__ db_part, long long rows,
                                                  long long n, typename AccOf<T>::type inv_n, long long chunk,
                                                  int G, int packs, int parts, int aligned, int phase, int* sync,
                                                  typename AccOf<T>::type* slots) {
  launch_dependents();  // column_sum's blocks may start (they wait for this grid's end)
  typedef typename AccOf<T>::type A;
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  constexpr int MAXP = PACKS;
  constexpr int K = MAXP * V;  // accumulator slots per thread: slot p * V + e
  fix_group<GT>(G, parts, aligned);
  static_assert(!FULL || GT, "FULL rows are one aligned segment of a compile-time group");
  static_assert(!SHIFT || (!FULL && GT != ROW_BLOCK), "shifted rows: a run-time or sub-warp group");
  if (FULL) packs = MAXP;  // as norm_fwd's FULL rows: n = MAXP * V * G
  if (SHIFT) parts = 1;  // (the host plans shifted rows as one segment)
  __shared__ A scratch[64];
  extern __shared__ int4 dyn_smem[];
  const RowGrid at(G, parts, GT == ROW_BLOCK);
  const int gpb = at.gpb, part = at.part;
  const long long rg = at.rg;
  const long long begin = part * chunk;
  const RowLayout<T> L{(int)min(chunk, n - begin), (int)(threadIdx.x & (G - 1)), G, packs, !SHIFT && aligned != 0,
                       FULL, SHIFT};
  const unsigned mask = group_mask(G);
  const T* wb = w ? w + begin : nullptr;
  const T* bb = b ? b + begin : nullptr;
  constexpr bool DBS = MODE == LAYER && DB;  // dbias column sums here
  A aw[K], ab[DBS ? K : 1];
#pragma unroll
  for (int k = 0; k < K; ++k) aw[k] = A(0);
#pragma unroll
  for (int k = 0; k < (DBS ? K : 1); ++k) ab[k] = A(0);

  // 32 bits (plan() caps grid * gpb at 2^30): a 64-bit product kept across the loop spilled
  const int stride = (int)at.nrg * gpb;
  P* const sa = reinterpret_cast<P*>(dyn_smem);  // SHIFT: store_shifted's slots
  P* const sb = sa + packs * blockDim.x;
  long long row = rg * gpb + at.gi;
  const int head = SHIFT ? (int)((row * n) & (V - 1)) : 0;  // every row of the group's (the host's stride)
  // SHIFT: the weight / bias under the thread's packs, the same for every row of its group: read once
  P wcol[SHIFT ? MAXP : 1], bcol[SHIFT ? MAXP : 1];
  if constexpr (SHIFT) {
    RowLayout<T> R = L;  // the group's rows' layout (shift_row; one segment)
    R.lo = head;
    R.len = (int)n + head;
#pragma unroll
    for (int p = 0; p < MAXP; ++p) {
      wcol[p] = column_at<T>(wb, p, R, 1.f);
      bcol[p] = column_at<T>(bb, p, R, 0.f);
    }
  }
  // SHIFT with STAGE (block rows: no store_shifted slots): row r's x and dy staged, in its own layout
  auto stage_shifted_row = [&](long long r) {
    RowLayout<T> N = L;
    const long long o = shift_row(N, r, rows, n, begin, chunk);
    stage_shifted_packs<T, MAXP>(sa, src + o, N);
    stage_shifted_packs<T, MAXP>(sb, dy + o, N);
  };
  if (STAGE && SHIFT) {
    if (row < rows) stage_shifted_row(row);
    cp_async_commit();
  } else if (STAGE) {
    stage_first_pair<T, MAXP>(sa, sb, src, dy, row * n + begin, row < rows, L);
  }
  const int lead = SHIFT ? at.lead : 0;  // shifted rows: whole warps loop together (RowGrid::lead)
  for (; row - lead < rows; row += stride) {
    const bool live = !SHIFT || row < rows;
    const long long at_row = live ? row : rows - 1;  // past the end: the last row again, not stored or summed
    RowLayout<T> R = L;
    const long long off = shift_row(R, at_row, rows, n, begin, chunk);
    P rx[MAXP], rd[MAXP];  // zero dy past the end: no contribution anywhere
    if constexpr (STAGE && SHIFT) {
      cp_async_wait<0>();
      unstage_shifted_packs<T, MAXP>(rx, sa, R, 0.f);
      unstage_shifted_packs<T, MAXP>(rd, sb, R, 0.f);
      opaque<T, MAXP>(rx);  // the slots are read into registers before the next copies overwrite them
      opaque<T, MAXP>(rd);
      if (row + stride < rows) stage_shifted_row(row + stride);
      cp_async_commit();
    } else {
      load_row_pair<STAGE, T, MAXP>(rx, rd, sa, sb, src, dy, off, (long long)stride * n, row + stride < rows, R);
    }
    const A rstd = rstd_in[at_row];
    const A mean = MODE == LAYER && !FROM_OUTPUT ? mean_in[at_row] : A(0);
    A c1, c2;
    bwd_sums<T, MODE, FROM_OUTPUT, MAXP>(rx, rd, R, mean, rstd, c1, c2, [&](int p, P& wp, P& bp) {
      if constexpr (SHIFT) {
        wp = wcol[p];
        bp = bcol[p];
      } else {
        wp = column_pack<T>(wb, p, L, 1.f);
        bp = column_pack<T>(bb, p, L, 0.f);
      }
    });
    if (MODE == LAYER) row_reduce2(c1, c2, G, mask, scratch);  // one pair of barriers for both
    else c2 = row_reduce<SumOp>(c2, G, mask, scratch);
    if (parts > 1) {
      const A mine[2] = {c1, c2};
      const A* sl = row_parts<A, 2>(mine, slots, sync, row, part, parts, phase);
      if (phase == 1) continue;
      A t[2];
      sum_parts<A, 2>(sl, parts, t);
      c1 = t[0];
      c2 = t[1];
    }
    opaque<T, MAXP>(rx);
    opaque<T, MAXP>(rd);
    if constexpr (SHIFT) {
      store_shifted<T, MAXP>(dx + off, R, live, row + 1 < rows, sa, [&](int p) {
        P o = rd[p];
        if (live)
          bwd_write_pack<T, MODE, FROM_OUTPUT, DBS>(rx[p], rd[p], wcol[p], bcol[p], mean, rstd, c1 * inv_n,
                                                    c2 * inv_n, o, aw + p * V, DBS ? ab + p * V : ab);
        return o;
      });
      continue;
    }
    bwd_write<T, MODE, FROM_OUTPUT, DBS, MAXP>(rx, rd, wb, bb, L, mean, rstd, c1 * inv_n, c2 * inv_n, dx + off, aw, ab);
  }

  // Column partials: partial row rg, columns [begin, begin + L.len).
  for (int k = 0; k < (DBS ? 2 : 1); ++k) {
    A* out = k == 0 ? dw_part : db_part;
    if (out == nullptr) continue;  // uniform over the block
    A* orow = out + rg * n + begin;
    if (gpb == 1) {  // one group: each thread writes its own columns
      if (k == 0) store_column_sums<T, MAXP, SHIFT>(orow, aw, L, head);
      else store_column_sums<T, MAXP, SHIFT>(orow, ab, L, head);
    } else if (SHIFT) {  // groups of different heads: each group's sums by column (gpb * n), added in group order
      A* buf = reinterpret_cast<A*>(dyn_smem);
      __syncthreads();  // the previous kind's readers (and the last row's slots) are done
      if (k == 0) store_column_sums<T, MAXP, true>(buf + at.gi * L.len, aw, L, head);
      else store_column_sums<T, MAXP, true>(buf + at.gi * L.len, ab, L, head);
      __syncthreads();
      for (int c = threadIdx.x; c < L.len; c += blockDim.x) {
        A sum = A(0);
        for (int g = 0; g < gpb; ++g) sum += buf[g * L.len + c];
        orow[c] = sum;
      }
    } else {  // several groups meet in shared memory: slot s of thread t at [s * blockDim.x + t]
      A* buf = reinterpret_cast<A*>(dyn_smem);
      __syncthreads();  // the previous kind's readers are done
#pragma unroll
      for (int s = 0; s < K; ++s) buf[s * blockDim.x + threadIdx.x] = k == 0 ? aw[s] : ab[s % (DBS ? K : 1)];
      __syncthreads();
      // A warp a slot: lane l adds words l, l + 32, ... of the slot's row of blockDim.x (group g2 = l / G + 32 / G
      // * i, column lane l % G: consecutive words, no bank conflicts), then the lanes G apart meet by shuffles.
      // A fixed order: deterministic. (Sub-warp blocks are whole warps: 128 or more threads.)
      const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
      for (int sl = warp; sl < K; sl += blockDim.x >> 5) {  // uniform over the warp
        const A* row_of_slot = buf + sl * blockDim.x;
        A sum = A(0);
#pragma unroll 4
        for (int i = lane; i < (int)blockDim.x; i += 32) sum += row_of_slot[i];
        for (int o = 16; o >= G; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const int col = ((sl / V) * G + lane) * V + sl % V;
        if (lane < G && col < L.len) orow[col] = sum;
      }
    }
  }
}

// The staged one-pack backward with two rows in flight per block. Row r + stride's first pass runs and its
// warps publish their sums before row r's dx is written; the block reduction completes after that, so the
// barrier's wait is spent writing the previous row (a 1024-thread block alone on its SM otherwise idles
// through every row's reduction). Launch: a resident grid of 1024-thread blocks, one block per row
// (G = blockDim.x, packs <= 1, n <= blockDim.x * V), aligned rows; dynamic shared memory for the next
// row's src and dy (2 * blockDim.x 16-byte slots); block b writes partial row b. Arguments as norm_bwd.
template <typename T, int MODE, int FROM_OUTPUT>
__global__ void __launch_bounds__(1024, 1) norm_bwd_pipelined(const T* __restrict__ src, const T* __restrict__ dy,
                                                             T* dx, const T* __restrict__ w, const T* __restrict__ b,
                                                             const typename AccOf<T>::type* __restrict__ mean_in,
                                                             const typename AccOf<T>::type* __restrict__ rstd_in,
                                                             typename AccOf<T>::type* __restrict__ dw_part,
                                                             typename AccOf<T>::type* __restrict__ db_part,
                                                             long long rows, long long n,
                                                             typename AccOf<T>::type inv_n, int packs) {
  launch_dependents();  // column_sum's blocks may start (they wait for this grid's end)
  typedef typename AccOf<T>::type A;
  typedef typename Vec16<T>::type P;
  constexpr int MAXP = 1, K = MAXP * Vec16<T>::N;
  constexpr bool DBS = MODE == LAYER, USES_MEAN = MODE == LAYER && !FROM_OUTPUT;
  __shared__ A scratch[64];
  __shared__ A sums[2][64];  // warp sums of c1 (0..31) and c2 (32..63), alternate rows (one barrier a row)
  extern __shared__ int4 dyn_smem[];
  const RowLayout<T> L{(int)n, (int)threadIdx.x, (int)blockDim.x, packs, true};
  auto columns = [&](int p, P& wp, P& bp) {
    wp = column_pack<T>(w, p, L, 1.f);
    bp = column_pack<T>(b, p, L, 0.f);
  };
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  A aw[K], ab[DBS ? K : 1];
#pragma unroll
  for (int k = 0; k < K; ++k) aw[k] = A(0);
#pragma unroll
  for (int k = 0; k < (DBS ? K : 1); ++k) ab[k] = A(0);
  P* const sa = reinterpret_cast<P*>(dyn_smem);
  P* const sb = sa + blockDim.x;
  const int stride = gridDim.x;
  long long row = blockIdx.x;

  // Row `row` (being written): inputs, statistics, sums; row + stride's statistics loaded one row ahead.
  P rx[MAXP], rd[MAXP];
  A mean = A(0), rstd = A(0), c1 = A(0), c2 = A(0), mean_n = A(0), rstd_n = A(0);
  stage_first_pair<T, MAXP>(sa, sb, src, dy, row * n, row < rows, L);
  if (row < rows) {
    rstd = rstd_in[row];
    if (USES_MEAN) mean = mean_in[row];
    if (row + stride < rows) {
      rstd_n = rstd_in[row + stride];
      if (USES_MEAN) mean_n = mean_in[row + stride];
    }
    load_row_pair<true, T, MAXP>(rx, rd, sa, sb, src, dy, row * n, (long long)stride * n, row + stride < rows, L);
    bwd_sums<T, MODE, FROM_OUTPUT, MAXP>(rx, rd, L, mean, rstd, c1, c2, columns);
    if (MODE == LAYER) row_reduce2(c1, c2, blockDim.x, 0xffffffffu, scratch);
    else c2 = block_reduce<SumOp>(c2, scratch);
  }
  int buf = 0;
  for (; row < rows; row += stride) {
    const long long next = row + stride;  // uniform over the block
    P nx[MAXP], nd[MAXP];
    A nc1 = A(0), nc2 = A(0);
    const A nmean = mean_n, nrstd = rstd_n;
    if (next < rows) {
      load_row_pair<true, T, MAXP>(nx, nd, sa, sb, src, dy, next * n, (long long)stride * n, next + stride < rows, L);
      if (next + stride < rows) {
        rstd_n = rstd_in[next + stride];
        if (USES_MEAN) mean_n = mean_in[next + stride];
      }
      bwd_sums<T, MODE, FROM_OUTPUT, MAXP>(nx, nd, L, nmean, nrstd, nc1, nc2, columns);
      if (MODE == LAYER) group_reduce2<A>(nc1, nc2, 32);
      else nc2 = group_reduce<SumOp>(nc2, 32);
      if (lane == 0) {
        sums[buf][warp] = nc1;
        sums[buf][32 + warp] = nc2;
      }
    }
    opaque<T, MAXP>(rx);
    opaque<T, MAXP>(rd);
    bwd_write<T, MODE, FROM_OUTPUT, DBS, MAXP>(rx, rd, w, b, L, mean, rstd, c1 * inv_n, c2 * inv_n, dx + row * n, aw,
                                               ab);
    if (next < rows) {
      __syncthreads();  // every warp's sums of row `next` published
      nc1 = lane < warps ? sums[buf][lane] : A(0);
      nc2 = lane < warps ? sums[buf][32 + lane] : A(0);
      if (MODE == LAYER) group_reduce2<A>(nc1, nc2, 32);
      else nc2 = group_reduce<SumOp>(nc2, 32);
      buf ^= 1;  // the next row's sums go to the other buffer: no second barrier
    }
#pragma unroll
    for (int p = 0; p < MAXP; ++p) {
      rx[p] = nx[p];
      rd[p] = nd[p];
    }
    mean = nmean;
    rstd = nrstd;
    c1 = nc1;
    c2 = nc2;
  }
  if (dw_part) store_column_sums<T, MAXP>(dw_part + blockIdx.x * n, aw, L);
  if (DBS && db_part) store_column_sums<T, MAXP>(db_part + blockIdx.x * n, ab, L);
}

// A thread's Q float4 accumulator slots (slot h at acc[s0 + h * blockDim.x]) to and from 4 * Q registers.
template <int Q>
__device__ __forceinline__ void load_sums(float (&a)[4 * Q], const float4* acc, int s0) {
#pragma unroll
  for (int h = 0; h < Q; ++h) {
    const float4 v = acc[s0 + h * blockDim.x];
    a[4 * h] = v.x;
    a[4 * h + 1] = v.y;
    a[4 * h + 2] = v.z;
    a[4 * h + 3] = v.w;
  }
}
template <int Q>
__device__ __forceinline__ void store_sums(float4* acc, int s0, const float (&a)[4 * Q]) {
#pragma unroll
  for (int h = 0; h < Q; ++h) acc[s0 + h * blockDim.x] = make_float4(a[4 * h], a[4 * h + 1], a[4 * h + 2], a[4 * h + 3]);
}

// The backward of aligned float / half rows from 512 / 1024 elements (the host's SHARED_BWD): a row over a cluster
// of CL CTAs (CL = 1: one block; CL = 2, 4 or 8: sm_90 clusters, the row's sums exchanged through distributed
// shared memory instead of global memory), 2 packs of x and dy per thread, and the dweight / dbias column sums
// in shared memory instead of registers (half types: twice norm_bwd_pipelined's elements a thread, no spills).
// Per row: one barrier (the cluster's when CL > 1) between the warps' partial sums and their total, which
// every warp adds up itself in CTA-rank order (the same total in every CTA: deterministic).
// Launch: grid = CL * row groups (resident), clusters of CL along x, blockDim.x <= 1024 threads (a multiple of
// 32); CTA rank r of cluster c takes columns [r * chunk, min(n, (r + 1) * chunk)) of rows c, c + groups, ...,
// packs <= 2 per thread (chunk <= 2 * V * blockDim.x; WARPS: 4, n <= 128 * V), aligned rows. Dynamic shared
// memory, in 16-byte slots: Q = V / 4 per pack per thread of dweight sums (float4 [Q * p + h][thread]:
// conflict-free), as many of dbias sums (layer), then the weight's packs and the next row's src and dy staged
// (packs * blockDim.x each).
// Cluster c writes partial row c (column_sum adds them). FULL: every CTA's segment is 2 packs a thread (chunk =
// 2 * V * blockDim.x = n / CL): no pack count or bounds test at run time.
// WARPS (CL = 1, blockDim.x <= 512): each warp its own rows (warp w of CTA c: rows c * warps + w, stepping by
// gridDim.x * warps), up to 4 packs a lane (n <= 128 * V), its sums by shuffles alone (no barrier a row); the
// warps' column sums folded in warp order at the end, so a CTA of 8 warps writes one partial row, not 8
// (32768x1024 f16 in 256-thread CTAs: 264 partial rows instead of 2112 from 64-thread one-row CTAs).
template <typename T, int MODE, int FROM_OUTPUT, int CL, bool STAGE = true, bool FULL = false, bool WARPS = false>
__global__ void __launch_bounds__(WARPS ? 512 : 1024, 1) norm_bwd_shared(const T* __restrict__ src, const T* __restrict__ dy, T* dx,
                                                          const T* __restrict__ w, const T* __restrict__ b,
                                                          const float* __restrict__ mean_in,
                                                          const float* __restrict__ rstd_in,
                                                          float* __restrict__ dw_part, float* __restrict__ db_part,
                                                          long long rows, long long n, float inv_n, long long chunk,
                                                          int packs_in) {
  launch_dependents();  // column_sum's blocks may start (they wait for this grid's end)
  static_assert(sizeof(T) <= 4, "float accumulators");
  typedef float A;
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N, MAXP = WARPS ? 4 : 2, Q = V / 4;  // Q float4 accumulator slots a pack
  constexpr bool DBS = MODE == LAYER, USES_MEAN = MODE == LAYER && !FROM_OUTPUT;
  static_assert(!WARPS || CL == 1, "warp rows: one CTA a row group");
  __shared__ A sums[2][2][32];  // the warps' (c1, c2) of the row, two sets alternating by row
  extern __shared__ int4 dyn_smem[];
  const unsigned rank = CL > 1 ? cluster_rank() : 0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const long long groups = WARPS ? (long long)gridDim.x * warps : gridDim.x / CL;
  const long long group = WARPS ? (long long)blockIdx.x * warps + warp : blockIdx.x / CL;
  const long long begin = rank * chunk;
  const int packs = FULL ? MAXP : packs_in;
  const RowLayout<T> L{(int)min(chunk, n - begin), WARPS ? lane : (int)threadIdx.x, WARPS ? 32 : (int)blockDim.x, packs,
                       true, FULL};
  const int slots = Q * packs * blockDim.x;  // float4 accumulators of one kind
  float4* const accw = reinterpret_cast<float4*>(dyn_smem);
  float4* const accb = accw + slots;
  P* const ws = reinterpret_cast<P*>(accb + (DBS ? slots : 0));  // the weight's packs: no L2 trip a row
  P* const sa = ws + packs * blockDim.x;
  P* const sb = sa + packs * blockDim.x;
  for (int k = threadIdx.x; k < (DBS ? 2 : 1) * slots; k += blockDim.x) accw[k] = make_float4(0.f, 0.f, 0.f, 0.f);
  const T* wb = w ? w + begin : nullptr;
  const T* bb = b ? b + begin : nullptr;
#pragma unroll
  for (int p = 0; p < MAXP; ++p)
    if (p < packs) ws[p * blockDim.x + threadIdx.x] = column_pack<T>(wb, p, L, 1.f);  // this thread's slots only
  long long row = group;
  if (STAGE) stage_first_pair<T, MAXP>(sa, sb, src, dy, row * n + begin, row < rows, L);
  // From x, the row's statistics are loaded one row ahead (a dependent L2 trip before the first pass
  // otherwise); from the output (bias packs, divisions) that register spilled.
  constexpr bool AHEAD = !FROM_OUTPUT;
  A rstd_next = AHEAD && row < rows ? rstd_in[row] : A(0), mean_next = USES_MEAN && row < rows ? mean_in[row] : A(0);
  int set = 0;
  for (; row < rows; row += groups, set ^= 1) {
    const long long off = row * n + begin;
    P rx[MAXP], rd[MAXP];
    load_row_pair<STAGE, T, MAXP>(rx, rd, sa, sb, src, dy, off, groups * n, row + groups < rows, L);
    const A rstd = AHEAD ? rstd_next : rstd_in[row], mean = mean_next;
    if (AHEAD && row + groups < rows) {
      rstd_next = rstd_in[row + groups];
      if (USES_MEAN) mean_next = mean_in[row + groups];
    }
    A c1 = A(0), c2 = A(0);
#pragma unroll
    for (int p = 0; p < MAXP; ++p)
      if (p < packs)
        bwd_sums_pack<T, MODE, FROM_OUTPUT>(rx[p], rd[p], ws[p * blockDim.x + threadIdx.x], column_pack<T>(bb, p, L, 0.f),
                                            mean, rstd, c1, c2);
    if (!FROM_OUTPUT) c2 *= rstd;
    if (MODE == LAYER) group_reduce2<A>(c1, c2, 32);
    else c2 = group_reduce<SumOp>(c2, 32);
    if (!WARPS) {  // the CTA's (the cluster's) warps' sums
      if (lane == 0) {
        sums[set][0][warp] = c1;
        sums[set][1][warp] = c2;
      }
      if (CL > 1) cluster_sync_all();  // also a barrier of this CTA
      else __syncthreads();
      c1 = c2 = A(0);
      if (lane < warps) {
#pragma unroll
        for (int r = 0; r < CL; ++r) {  // rank order
          if (MODE == LAYER) c1 += CL > 1 ? ld_shared_cluster(&sums[set][0][lane], r) : sums[set][0][lane];
          c2 += CL > 1 ? ld_shared_cluster(&sums[set][1][lane], r) : sums[set][1][lane];
        }
      }
      if (MODE == LAYER) group_reduce2<A>(c1, c2, 32);
      else c2 = group_reduce<SumOp>(c2, 32);
    }
    opaque<T, MAXP>(rx);
    opaque<T, MAXP>(rd);
#pragma unroll
    for (int p = 0; p < MAXP; ++p) {
      if (p < packs) {
        const int s0 = Q * p * blockDim.x + threadIdx.x;
        A aw[V], ab[V];
        load_sums<Q>(aw, accw, s0);
        if (DBS) load_sums<Q>(ab, accb, s0);
        P o;
        bwd_write_pack<T, MODE, FROM_OUTPUT, DBS>(rx[p], rd[p], ws[p * blockDim.x + threadIdx.x],
                                                  column_pack<T, true>(bb, p, L, 0.f), mean, rstd, c1 * inv_n, c2 * inv_n, o, aw, ab);
        store_pack<T>(dx + off, o, p, L);
        store_sums<Q>(accw, s0, aw);
        if (DBS) store_sums<Q>(accb, s0, ab);
      }
    }
  }
  if (CL > 1) cluster_sync_all();  // the peers' last reads of `sums` are done before this CTA exits
  if (WARPS) {  // partial row blockIdx.x: slot h of pack p, lane l, summed over the warps in order
    __syncthreads();
    for (int k = threadIdx.x; k < (DBS ? 2 : 1) * Q * packs * 32; k += blockDim.x) {
      const int kind = k / (Q * packs * 32), qp = k / 32 % (Q * packs), l = k % 32, p = qp / Q;
      float* out = kind == 0 ? dw_part : db_part;
      const int col = (p * 32 + l) * V + 4 * (qp % Q);
      if (out == nullptr || col >= L.len) continue;
      const float4* acc = (kind == 0 ? accw : accb) + qp * blockDim.x + l;
      float4 s = acc[0];
      for (int v = 1; v < warps; ++v) {
        const float4 a = acc[32 * v];
        s = make_float4(s.x + a.x, s.y + a.y, s.z + a.z, s.w + a.w);
      }
      *reinterpret_cast<float4*>(out + blockIdx.x * n + begin + col) = s;
    }
    return;
  }
  // Partial row `group`, columns [begin, begin + L.len): each thread its own slots (no barrier needed).
  for (int k = 0; k < (DBS ? 2 : 1); ++k) {
    float* out = k == 0 ? dw_part : db_part;
    if (out == nullptr) continue;
    const float4* acc = k == 0 ? accw : accb;
#pragma unroll
    for (int p = 0; p < MAXP; ++p)
      if (p < packs && L.inside(p)) {
        float4* o = reinterpret_cast<float4*>(out + group * n + begin + L.at(p));
#pragma unroll
        for (int h = 0; h < Q; ++h) o[h] = acc[(Q * p + h) * blockDim.x + threadIdx.x];
      }
  }
}

// The backward of rows over a cluster of CL CTAs, PK 16-byte packs a thread (n = CL * PK * V * blockDim.x), as a
// stream: the group's rows arrive by bulk copies (TMA) in a ring of S stages of shared memory (no registers or threads
// tied up in the loads), and a row's (c1, c2) meet across the cluster without a barrier. The warps' sums of row i meet
// in warp 0 (mbarrier local[i % K]), which sends the CTA's total to every CTA (slot [i % K][its rank]) by st.async,
// completing as bytes on that CTA's recv[i % K]; the first pass runs LAG rows ahead of that wait. (Remote stores +
// mbarrier.arrive.release.cluster instead: every release waits for the sender's outstanding dx stores, H100
// 1024x32768 bf16 layer 133.8 us against 85.9 with st.async.)
// Order per row i: first pass of row i + LAG (its stage filled) and its sums sent; wait for row i's; slot i % K
// re-armed; second pass of row i (dx written, column sums in registers); the warp's share of stage i % S released
// (empty), and thread 0 refills the stage of row i - 1 with row i - 1 + S once every warp released it. A peer sends
// row i + K only after its wait for row i + K - LAG - 1, whose sums this CTA sends after all its warps passed row i:
// with K = 2 LAG + 2 slot and phase are free by then. Rows counted in 32 bits: stage, slot and parity by a
// multiply-high, not a 64-bit division (the loop is issue-bound: 435 -> 376 SASS instructions).
// Launch: grid = CL * groups (2 <= CL <= 8), every CTA resident, clusters of CL along x; every CTA adds the same
// values in rank order (deterministic); blockDim.x = n / (CL * PK * V), a multiple of 32, <= 1024; dynamic shared
// memory 2 * S * PK * blockDim.x * 16 bytes; aligned rows; sm_90. Cluster c writes partial row c.
template <typename T, bool FLOATS> struct RingWeight { typedef typename Vec16<T>::type type; };
template <typename T> struct RingWeight<T, true> { typedef Pack<float, Vec16<T>::N> type; };
template <typename T, int MODE, int FROM_OUTPUT, int CL, int S, int LAG, int PK = 1>
__global__ void __launch_bounds__(1024 / PK, 1) norm_bwd_ring(const T* __restrict__ src, const T* __restrict__ dy, T* dx,
                                                         const T* __restrict__ w, const T* __restrict__ b,
                                                         const float* __restrict__ mean_in,
                                                         const float* __restrict__ rstd_in,
                                                         float* __restrict__ dw_part, float* __restrict__ db_part,
                                                         long long rows, long long n, float inv_n) {
  launch_dependents();  // column_sum's blocks may start (they wait for this grid's end)
  static_assert(sizeof(T) <= 4 && CL > 1 && LAG >= 1 && S >= LAG + 2 && PK >= 1,
                "float sums; a cluster; stages for rows i..i + LAG and one loading");
  typedef float A;
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N, K = 2 * LAG + 2;
  constexpr bool DBS = MODE == LAYER, USES_MEAN = MODE == LAYER && !FROM_OUTPUT;
  __shared__ float2 part[K][32], sums[K][CL];  // [row % K][warp]: this CTA's (c1, c2); [row % K][sender's rank]
  // full[S] (a stage's bytes landed), empty[S] (its warps done), local[K] (the warps' sums in part), recv[K] (sums)
  __shared__ alignas(8) unsigned long long bars[2 * S + 2 * K];
  extern __shared__ int4 dyn_smem[];
  // stage s: src's packs at [2 s W + j], dy's at [(2 s + 1) W + j] (W = PK * blockDim.x); thread t's j = p T + t
  const P* const ring = reinterpret_cast<const P*>(dyn_smem);
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, warps = blockDim.x >> 5, W = PK * blockDim.x;
  const unsigned rank = cluster_rank();
  const long long groups = gridDim.x / CL, group = blockIdx.x / CL, begin = (long long)rank * W * V;
  // the group's rows, the same in the cluster's CTAs
  const unsigned count = group < rows ? (unsigned)((rows - 1 - group) / groups + 1) : 0;
  const unsigned seg = W * 16, ring_at = (unsigned)__cvta_generic_to_shared(dyn_smem),
                 full_at = (unsigned)__cvta_generic_to_shared(bars), empty_at = full_at + 8 * S,
                 local_at = empty_at + 8 * S, recv_at = local_at + 8 * K;
  const long long base = group * n + begin, step = groups * n;  // row i's segment at base + i * step
  auto fill = [&](unsigned i, unsigned s) {  // thread 0: row i of the group into stage s = i % S
    const unsigned bar = full_at + 8 * s;
    const long long off = base + (long long)i * step;
    mbar_expect_tx(bar, 2 * seg);
    bulk_load(ring_at + 2 * s * seg, src + off, seg, bar);
    bulk_load(ring_at + (2 * s + 1) * seg, dy + off, seg, bar);
  };
  if (t == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full_at + 8 * s, 1);
      mbar_init(empty_at + 8 * s, warps);
    }
    for (int k = 0; k < K; ++k) {
      mbar_init(local_at + 8 * k, warps);
      mbar_init(recv_at + 8 * k, 1);  // this CTA's expect_tx of the CL pairs
    }
    mbar_init_fence();
    for (int k = 0; k < K; ++k) mbar_expect_tx(recv_at + 8 * k, CL * 8);
    for (unsigned i = 0; i < min((unsigned)S, count); ++i) fill(i, i);
  }
  cluster_sync_all();  // every CTA's barriers initialised and armed before a peer sends to them
  if (count == 0) return;  // the whole cluster alike
  const RowLayout<T> L{(int)(W * V), t, (int)blockDim.x, PK, true, true};
  // With PK > 1 (<= 512 threads, >= 128 registers) the weight as floats: no conversion an element a pass.
  typename RingWeight<T, (PK > 1)>::type wp[PK];
  P bp[PK];
#pragma unroll
  for (int p = 0; p < PK; ++p) {
    const P wv = column_pack<T>(w ? w + begin : nullptr, p, L, 1.f);
    if constexpr (PK > 1) {
#pragma unroll
      for (int e = 0; e < V; ++e) wp[p].v[e] = elem<A>(wv, e);
    } else {
      wp[p] = wv;
    }
    bp[p] = column_pack<T>(b ? b + begin : nullptr, p, L, 0.f);
  }
  A aw[PK * V], ab[DBS ? PK * V : 1];
#pragma unroll
  for (int e = 0; e < PK * V; ++e) aw[e] = A(0);
#pragma unroll
  for (int e = 0; e < (DBS ? PK * V : 1); ++e) ab[e] = A(0);
  // (mean, rstd) of the group's row j, whose index is stat_row (stepped with j)
  long long stat_row = group;
  auto stats = [&](unsigned j) {
    const float2 v = j < count ? make_float2(USES_MEAN ? mean_in[stat_row] : 0.f, rstd_in[stat_row])
                               : make_float2(0.f, 0.f);
    stat_row += groups;
    return v;
  };
  auto first_pass = [&](unsigned j, float2 st) {  // row j's CTA sums sent to every CTA of the cluster
    const unsigned fs = j % S, fk = j % K;
    mbar_wait(full_at + 8 * fs, (j / S) & 1);
    A c1 = A(0), c2 = A(0);
#pragma unroll
    for (int p = 0; p < PK; ++p) {
      const P xv = ring[2 * fs * W + p * blockDim.x + t], dv = ring[(2 * fs + 1) * W + p * blockDim.x + t];
      bwd_sums_pack<T, MODE, FROM_OUTPUT>(xv, dv, wp[p], bp[p], st.x, st.y, c1, c2);
    }
    if (!FROM_OUTPUT) c2 *= st.y;
    if (MODE == LAYER) group_reduce2<A>(c1, c2, 32);
    else c2 = group_reduce<SumOp>(c2, 32);
    if (lane == 0) {
      part[fk][warp] = make_float2(c1, c2);
      mbar_arrive(local_at + 8 * fk);
    }
    if (warp == 0) {  // the CTA's total, in warp order, to every CTA (this one included)
      mbar_wait(local_at + 8 * fk, (j / K) & 1);
      const float2 v = lane < warps ? part[fk][lane] : make_float2(0.f, 0.f);
      c1 = v.x;
      c2 = v.y;
      group_reduce2<A>(c1, c2, 32);
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < CL; ++r) st_async_cluster(&sums[fk][rank], r, make_float2(c1, c2), recv_at + 8 * fk);
    }
  };
  float2 st[LAG + 2];  // (mean, rstd) of rows i .. i + LAG + 1: rotated in registers
#pragma unroll
  for (int j = 0; j < LAG + 2; ++j) st[j] = stats(j);
#pragma unroll
  for (int j = 0; j < LAG; ++j)
    if (j < count) first_pass(j, st[j]);
  for (unsigned i = 0; i < count; ++i) {  // 32-bit: stage and slot by a multiply-high, not a 64-bit division
    if (i + LAG < count) first_pass(i + LAG, st[LAG]);
    const float2 cur = st[0];
#pragma unroll
    for (int j = 0; j < LAG + 1; ++j) st[j] = st[j + 1];
    st[LAG + 1] = stats(i + LAG + 2);
    const unsigned ss = i % S, sk = i % K;
    mbar_wait(recv_at + 8 * sk, (i / K) & 1);
    A c1 = A(0), c2 = A(0);
#pragma unroll
    for (int r = 0; r < CL; ++r) {  // rank order
      const float2 v = sums[sk][r];
      c1 += v.x;
      c2 += v.y;
    }
    // Slot sk's next phase (row i + K) armed: its pairs come only after every thread here passed this wait (a peer
    // sends row i + K after its wait for a row this CTA sends once all its warps are past row i)
    if (t == 0) mbar_expect_tx(recv_at + 8 * sk, CL * 8);
    T* const dxr = dx + base + (long long)i * step + t * V;  // this thread's first pack of row i
#pragma unroll
    for (int p = 0; p < PK; ++p) {
      const P xv = ring[2 * ss * W + p * blockDim.x + t], dv = ring[(2 * ss + 1) * W + p * blockDim.x + t];
      P o;
      bwd_write_pack<T, MODE, FROM_OUTPUT, DBS>(xv, dv, wp[p], bp[p], cur.x, cur.y, c1 * inv_n, c2 * inv_n, o,
                                                aw + p * V, ab + (DBS ? p * V : 0));
      // __stwb: one 16-byte store (in the cluster instances NVVM split a plain pack store into 2- and 4-byte ones)
      __stwb(reinterpret_cast<int4*>(dxr + p * blockDim.x * V), *reinterpret_cast<const int4*>(&o));
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_at + 8 * ss);  // this warp is done with stage ss
    if (t == 0 && i >= 1 && i - 1 + S < count) {  // the previous row's stage, once every warp released it
      mbar_wait(empty_at + 8 * ((i - 1) % S), ((i - 1) / S) & 1);
      fill(i - 1 + S, (i - 1) % S);
    }
  }
  cluster_sync_all();  // no CTA exits while a peer may still address its shared memory; the ring's stages are free
  // The partial rows through the idle ring (W V floats a kind <= 2 S seg bytes) and out by bulk stores: whole lines
  // (H100: plain float4 stores at a 32-byte lane stride cost 3x their bytes in L2 write sectors).
  float4* const stage = reinterpret_cast<float4*>(dyn_smem);
  for (int kind = 0; kind < (DBS ? 2 : 1); ++kind) {
    const A* a = kind == 0 ? aw : ab;
#pragma unroll
    for (int p = 0; p < PK; ++p)
#pragma unroll
      for (int h = 0; h < V / 4; ++h)
        stage[(kind * W + p * blockDim.x + t) * (V / 4) + h] =
            make_float4(a[p * V + 4 * h], a[p * V + 4 * h + 1], a[p * V + 4 * h + 2], a[p * V + 4 * h + 3]);
  }
  fence_proxy_async_shared();
  __syncthreads();
  if (t < (DBS ? 2 : 1)) {  // thread k stores kind k
    float* out = t == 0 ? dw_part : db_part;
    if (out != nullptr) {
      bulk_store(out + group * n + begin, ring_at + t * W * V * 4, W * V * 4);
      bulk_store_wait();
    }
  }
}

// Long rows over `parts` co-resident blocks, pipelined (pipelined_parts in rows.cuh), each set holding the
// thread's packs of src (x or y) and dy: a row's exchange of (sum g, sum g * xhat) overlaps the next row's
// sums. Each thread keeps its columns' weight and bias, and their dweight / dbias sums, in registers over its
// block's rows and writes the sums to partial row blockIdx.x / parts (column_sum adds them). Arithmetic as
// norm_bwd.
// Launch: grid = parts * row groups, every block resident; blocks of <= 512 threads; dynamic shared memory
// of 3 * 2 * MAXP * blockDim.x 16-byte slots (MAXP = RowPacks: 192 KB for float32 at 512, one block per SM);
// n <= parts * packs * blockDim.x * V; aligned rows (words: rows * parts * 2 tagged 64-bit slots, zero before
// the first publish: zero_words).
template <typename T, int MODE, int FROM_OUTPUT>
__global__ void __launch_bounds__(512, 1) norm_bwd_parts(const T* __restrict__ src, const T* __restrict__ dy, T* dx,
                                                         const T* __restrict__ w, const T* __restrict__ b,
                                                         const float* __restrict__ mean_in,
                                                         const float* __restrict__ rstd_in, float* __restrict__ dw_part,
                                                         float* __restrict__ db_part, long long rows, long long n,
                                                         float inv_n, long long chunk, int packs, int parts,
                                                         unsigned long long* words) {
  launch_dependents();  // column_sum's blocks may start (they wait for this grid's end)
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  constexpr int MAXP = RowPacks<T>::value;
  constexpr int K = MAXP * V;  // accumulator slots per thread: slot p * V + e
  constexpr bool DBS = MODE == LAYER;
  __shared__ float scratch_mem[2 * 64];
  RowScratch<float, 2> scratch{scratch_mem};  // the pair reductions
  const int part = blockIdx.x % parts;
  const long long begin = part * chunk;
  const RowLayout<T> L{(int)min(chunk, n - begin), (int)threadIdx.x, (int)blockDim.x, packs, true};
  const T* wb = w ? w + begin : nullptr;
  const T* bb = b ? b + begin : nullptr;
  float aw[K], ab[DBS ? K : 1];
#pragma unroll
  for (int k = 0; k < K; ++k) aw[k] = 0.f;
#pragma unroll
  for (int k = 0; k < (DBS ? K : 1); ++k) ab[k] = 0.f;
  P wr[MAXP], br[MAXP];  // the thread's weight and bias packs, the same every row: loaded once
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    wr[p] = column_pack<T>(wb, p, L, 1.f);
    br[p] = column_pack<T>(bb, p, L, 0.f);
  }
  const T* const src2[2] = {src, dy};
  // The rows' saved statistics (mean, rstd), loaded one row ahead (nx): no L2 round trip at the start of a
  // step. cur: the row being reduced; wq: the row written next (row j's reduce comes before row j - 1's write).
  const long long row_step = gridDim.x / parts;
  float2 nx = make_float2(0.f, 0.f), cur, wq;
  auto load_stats = [&](long long row) {
    if (row < rows) nx = make_float2(MODE == LAYER && !FROM_OUTPUT ? mean_in[row] : 0.f, rstd_in[row]);
  };
  load_stats(blockIdx.x / parts);
  wq = nx;
  auto reduce = [&](long long row, const P* set) {
    cur = nx;
    load_stats(row + row_step);
    const float mean = cur.x, rstd = cur.y;
    float c1 = 0.f, c2 = 0.f;
    for_own_packs<MAXP>(L, [&](int p) {
      bwd_sums_pack<T, MODE, FROM_OUTPUT>(own_slot<MAXP>(set, 0, p), own_slot<MAXP>(set, 1, p), wr[p], br[p], mean,
                                          rstd, c1, c2);
    });
    if (!FROM_OUTPUT) c2 *= rstd;
    row_reduce2<true>(c1, c2, blockDim.x, 0xffffffffu, scratch.at(0));  // at(0), at(1)
    scratch.next_row();
    const float mine[2] = {c1, c2};
    publish_tagged<2>(mine, words, row, part, parts);
  };
  auto write = [&](long long row, const P* set, unsigned long long early) {
    float c[2];
    sum_parts<float, 2>(collect_tagged<2>(words, row, parts, early), parts, c);
    const float mean = wq.x, rstd = wq.y;
    wq = cur;
    T* dxr = dx + row * n + begin;
    for_own_packs<MAXP>(L, [&](int p) {
      P o;
      bwd_write_pack<T, MODE, FROM_OUTPUT, DBS>(own_slot<MAXP>(set, 0, p), own_slot<MAXP>(set, 1, p), wr[p], br[p],
                                                mean, rstd, c[0] * inv_n, c[1] * inv_n, o, aw + p * V,
                                                DBS ? ab + p * V : ab);
      store_pack<T>(dxr, o, p, L);
    });
  };
  pipelined_parts<T, MAXP, 2, 2, false>(src2, rows, n, begin, chunk, parts, L, words, reduce, write);
  const long long rg = blockIdx.x / parts;
  if (dw_part) store_column_sums<T, MAXP>(dw_part + rg * n + begin, aw, L);
  if (DBS && db_part) store_column_sums<T, MAXP>(db_part + rg * n + begin, ab, L);
}

// dweight / dbias from the partial rows: out[col] = sum over r partial rows. Thread (x, y) of a
// 32 x Y block sums rows y, y + Y, ... of its CW consecutive columns (independent loads, many in flight);
// then with Y = 32 warp w adds the 32 sums of column w with a fixed butterfly, with a shorter Y thread
// (x, 0) adds its columns' Y sums in order. Deterministic. The host picks Y (few partial rows: a short Y,
// no idle threads) and CW (4 for long rows of a multiple of 4: fewer blocks). TW (Y = 32, CW = 1): a warp
// takes TW columns of 32 / TW rows (lane x: column x % TW, row x / TW), so that few columns still make
// blocks for every SM (32768x1024: 2112 partial rows of 1024 columns in 32 blocks a tensor took ~8 us).
// Launch: grid (ceil(n / (TW * CW)), 2: y = 0 weight, 1 bias), block (32, Y), after the kernel writing the partial
// rows (programmatic dependent launch on sm_90: its blocks start as that kernel's end). p1 / o1 may be null.
template <typename T, int CW, int Y, int TW = 32>
__global__ void __launch_bounds__(1024) column_sum(const typename AccOf<T>::type* __restrict__ p0,
                                                   const typename AccOf<T>::type* __restrict__ p1, T* o0, T* o1,
                                                   long long r, long long n) {
  typedef typename AccOf<T>::type A;
  static_assert(TW == 32 || (Y == 32 && CW == 1), "narrow column tiles: 32 x 32 blocks, one column a thread");
  constexpr int RW = 32 / TW, R = Y * RW;  // rows a warp's load covers; row sums a column
  wait_prerequisites();  // launched after_previous: the partial rows' kernel may still be running
  const A* p = blockIdx.y ? p1 : p0;
  T* o = blockIdx.y ? o1 : o0;
  if (p == nullptr) return;  // uniform over the block
  __shared__ A part[CW][R][TW + 1];
  const int tx = threadIdx.x % TW, ty = threadIdx.y * RW + threadIdx.x / TW;
  const long long col = ((long long)blockIdx.x * TW + tx) * CW;
  A acc[CW];
#pragma unroll
  for (int k = 0; k < CW; ++k) acc[k] = A(0);
  // Four float columns and few rows a thread (r <= 4 R: the ring's 30 partial rows of 32768): the rows loaded (16
  // bytes each) before any is added, in row order; the unrolled loop's remainder had waited a round trip a row (H100
  // 1024x32768 bf16 backward: layer 80.0 -> 78.8 us, rms 75.6 -> 74.0). Every other shape keeps that loop (batches of
  // 4 or 8 rows measured slower on some: 4096² f32 layer 70.1 -> 71.7 us, 8192² bf16 147.6 -> 150.1).
  constexpr int U = 4;
  bool added = false;
  if constexpr (CW == 4 && sizeof(A) == 4) {
    if (col < n && r <= (long long)U * R) {
      float4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const long long i = ty + (long long)u * R;
        v[u] = i < r ? *reinterpret_cast<const float4*>(p + i * n + col) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) acc[0] += v[u].x, acc[1] += v[u].y, acc[2] += v[u].z, acc[3] += v[u].w;
      added = true;
    }
  }
  if (col < n && !added) {
#pragma unroll 8
    for (long long i = ty; i < r; i += R)
#pragma unroll
      for (int k = 0; k < CW; ++k) acc[k] += p[i * n + col + k];
  }
#pragma unroll
  for (int k = 0; k < CW; ++k) part[k][ty][tx] = acc[k];
  __syncthreads();
  if constexpr (Y == 32) {
#pragma unroll
    for (int k = 0; k < CW; ++k) {
      if (threadIdx.y < TW) {  // warp y: column y, lane x: rows x, x + 32, ... of its R sums, in order
        A s = part[k][threadIdx.x][threadIdx.y];
#pragma unroll
        for (int j = 1; j < RW; ++j) s += part[k][threadIdx.x + 32 * j][threadIdx.y];
        s = group_reduce<SumOp>(s, 32);
        const long long c = ((long long)blockIdx.x * TW + threadIdx.y) * CW + k;
        if (threadIdx.x == 0 && c < n) o[c] = cast<T>(s);
      }
    }
  } else if (threadIdx.y == 0 && col < n) {
#pragma unroll
    for (int k = 0; k < CW; ++k) {
      A s = part[k][0][threadIdx.x];
#pragma unroll
      for (int y = 1; y < Y; ++y) s += part[k][y][threadIdx.x];
      o[col + k] = cast<T>(s);
    }
  }
}
