// Layer norm and RMS norm over the last axis of a C-contiguous (rows, n) matrix, forward and
// backward, out of place or in place (y may be x). Statistics in float (double for float64).
//
// Same row layout and dispatch as softmax.cu (common/rows.cuh): sub-warp groups for short rows, a
// block per row, co-resident blocks per row for very long rows. The backward also reduces dweight /
// dbias across rows without atomics: each thread accumulates its own columns over the rows its group
// visits, the block sums its groups in shared memory in a fixed order and writes one partial row per
// block; column_sum then adds the partial rows in order. Deterministic.
#include "common/rows.cuh"

enum { LAYER = 0, RMS = 1 };
// Resident 256-thread blocks per SM norm_bwd's __launch_bounds__ asks for: 2 (128 registers: two
// rows of x and dy in flight), 1 for float64.
template <typename T, int FROM_OUTPUT> struct NormBwdMinBlocks {
  static constexpr int value = sizeof(T) == 8 ? 1 : 2;
};

// Launch: 1-D grid of blocks of G * groups threads (<= 512; G = block when G > 32); block b takes
// segment b % parts of rows (b / parts) * groups + group + k * (grid / parts) * groups. w / b may be
// null (no affine), mean / rstd may be null (not saved). n <= parts * packs * G * V.
//   layer: y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps), var biased, two-pass
//   rms:   y = x * rstd * w,               rstd = 1 / sqrt(mean(x^2) + eps)
template <typename T, int MODE>
__global__ void __launch_bounds__(512, RowMinBlocks<T>::value) norm_fwd(const T* x, T* y, const T* __restrict__ w,
                                                  const T* __restrict__ b, typename AccOf<T>::type* __restrict__ mean_out,
                                                  typename AccOf<T>::type* __restrict__ rstd_out, long long rows,
                                                  long long n, long long chunk, int G, int packs, int parts,
                                                  int aligned, typename AccOf<T>::type eps, int phase,
                                                  int* sync, typename AccOf<T>::type* slots) {
  typedef typename AccOf<T>::type A;
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  constexpr int MAXP = FwdPacks<T>::value;
  __shared__ A scratch[32];
  const int gpb = blockDim.x / G, gi = threadIdx.x / G;
  const int part = blockIdx.x % parts;
  const long long nrg = gridDim.x / parts, rg = blockIdx.x / parts;
  const long long begin = part * chunk;
  const RowLayout<T> L{(int)min(chunk, n - begin), (int)(threadIdx.x & (G - 1)), G, packs, aligned != 0};
  const unsigned mask = group_mask(G);
  const T* wb = w ? w + begin : nullptr;
  const T* bb = b ? b + begin : nullptr;
  for (long long row = rg * gpb + gi; row < rows; row += nrg * gpb) {
    const T* xr = x + row * n + begin;
    P r[MAXP];
    load_packs<T, MAXP>(r, xr, L, 0.f);
    A mean = A(0), rstd;
    if (MODE == LAYER) {
      A s = A(0);
#pragma unroll
      for (int p = 0; p < MAXP; ++p)
        if (p < packs)
#pragma unroll
          for (int e = 0; e < V; ++e) s += cast<A>(r[p].v[e]);
      s = row_reduce<SumOp>(s, G, mask, scratch);
      const A seg_mean = s / A(L.len);
      opaque<T, MAXP>(r);
      A m2 = A(0);
#pragma unroll
      for (int p = 0; p < MAXP; ++p)
        if (p < packs)
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const A d = L.at(p) + e < L.len ? cast<A>(r[p].v[e]) - seg_mean : A(0);  // slots past the end: 0
            m2 += d * d;
          }
      m2 = row_reduce<SumOp>(m2, G, mask, scratch);
      mean = seg_mean;
      if (parts > 1) {
        // Chan et al.: M2 = sum over parts of m2_q + n_q * (mean_q - mean)^2.
        const A mine[2] = {s, m2};
        const A* sl = row_parts<A, 2>(mine, slots, sync, row, part, parts, phase);
        if (phase == 1) continue;
        // Parallel over the parts, then block reductions in fixed order (as sum_parts).
        A total = A(0);
        for (int q = threadIdx.x; q < parts; q += blockDim.x) total += __ldcg(sl + 2 * q);
        mean = block_reduce<SumOp>(total, scratch) / A(n);
        m2 = A(0);
        for (int q = threadIdx.x; q < parts; q += blockDim.x) {
          const A nq = A(min(chunk, n - q * chunk));
          const A dq = __ldcg(sl + 2 * q) / nq - mean;
          m2 += __ldcg(sl + 2 * q + 1) + nq * dq * dq;
        }
        m2 = block_reduce<SumOp>(m2, scratch);
      }
      rstd = acc_rsqrt<A>(m2 / A(n) + eps);
    } else {
      A ss = A(0);
#pragma unroll
      for (int p = 0; p < MAXP; ++p)
        if (p < packs)
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const A v = cast<A>(r[p].v[e]);
            ss += v * v;
          }
      ss = row_reduce<SumOp>(ss, G, mask, scratch);
      if (parts > 1) {
        const A mine[1] = {ss};
        const A* sl = row_parts<A, 1>(mine, slots, sync, row, part, parts, phase);
        if (phase == 1) continue;
        A t[1];
        sum_parts<A, 1>(sl, parts, t, scratch);
        ss = t[0];
      }
      rstd = acc_rsqrt<A>(ss / A(n) + eps);
    }
    if (part == 0 && L.lane == 0) {
      if (mean_out) mean_out[row] = mean;
      if (rstd_out) rstd_out[row] = rstd;
    }
    opaque<T, MAXP>(r);
    T* yr = y + row * n + begin;
#pragma unroll
    for (int p = 0; p < MAXP; ++p) {
      if (p < packs) {
        const P wp = column_pack<T>(wb, p, L, 1.f), bp = column_pack<T>(bb, p, L, 0.f);
        P o;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const A xh = (cast<A>(r[p].v[e]) - mean) * rstd;
          o.v[e] = cast<T>(MODE == LAYER ? xh * cast<A>(wp.v[e]) + cast<A>(bp.v[e]) : xh * cast<A>(wp.v[e]));
        }
        store_pack<T>(yr, o, p, L);
      }
    }
  }
}

// Backward. With FROM_OUTPUT = 0, src is the forward input x and mean / rstd the saved statistics
// (mean unused for rms); with FROM_OUTPUT = 1 (after an in-place forward), src is the output y and
// the normalised input is recomputed as xhat = (y - b) / w (rms: y / w), rstd saved (w has no zero).
//   g = dy * w,  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (rms: no mean(g) term)
//   dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy   (as per-block partial rows)
// Launch: like norm_fwd with blocks of <= 256 threads and a persistent grid (grid / parts row groups,
// each block writes partial row rg = b / parts, columns of its segment), dynamic shared memory of
// 2 * blockDim.x * RowPacks * V accumulators. dw_part / db_part may be null (not wanted).
template <typename T, int MODE, int FROM_OUTPUT>
__global__ void __launch_bounds__(256, NormBwdMinBlocks<T, FROM_OUTPUT>::value) norm_bwd(const T* __restrict__ src, const T* __restrict__ dy, T* dx,
                                                  const T* __restrict__ w, const T* __restrict__ b,
                                                  const typename AccOf<T>::type* __restrict__ mean_in,
                                                  const typename AccOf<T>::type* __restrict__ rstd_in,
                                                  typename AccOf<T>::type* __restrict__ dw_part,
                                                  typename AccOf<T>::type* __restrict__ db_part, long long rows,
                                                  long long n, long long chunk, int G, int packs, int parts,
                                                  int aligned, int phase, int* sync,
                                                  typename AccOf<T>::type* slots) {
  typedef typename AccOf<T>::type A;
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  constexpr int MAXP = RowPacks<T>::value;
  __shared__ A scratch[32];
  extern __shared__ unsigned char dyn_smem[];
  A* buf = reinterpret_cast<A*>(dyn_smem);
  const int gpb = blockDim.x / G, gi = threadIdx.x / G;
  const int part = blockIdx.x % parts;
  const long long nrg = gridDim.x / parts, rg = blockIdx.x / parts;
  const long long begin = part * chunk;
  const RowLayout<T> L{(int)min(chunk, n - begin), (int)(threadIdx.x & (G - 1)), G, packs, aligned != 0};
  const unsigned mask = group_mask(G);
  const T* wb = w ? w + begin : nullptr;
  const T* bb = b ? b + begin : nullptr;
  // Per-thread column accumulators in shared memory, slot k = p * V + e of thread t at
  // [k * blockDim.x + t] (conflict-free): registers stay free for the row data.
  A* acc_w = buf;
  A* acc_b = buf + MAXP * V * blockDim.x;
#pragma unroll
  for (int k = 0; k < MAXP * V; ++k) acc_w[k * blockDim.x + threadIdx.x] = acc_b[k * blockDim.x + threadIdx.x] = A(0);

  // The grid is persistent (one partial row per block), so each block walks several rows: the next
  // row's loads are issued before the current row is reduced and written (software pipelining).
  const long long stride = nrg * gpb;
  long long row = rg * gpb + gi;
  P nx[MAXP], nd[MAXP];
  A n_rstd = A(0), n_mean = A(0);
  if (row < rows) {
    load_packs<T, MAXP>(nx, src + row * n + begin, L, 0.f);  // zero dy past the end: no contribution
    load_packs<T, MAXP>(nd, dy + row * n + begin, L, 0.f);
    n_rstd = rstd_in[row];
    if (MODE == LAYER && !FROM_OUTPUT) n_mean = mean_in[row];
  }
  for (; row < rows; row += stride) {
    const long long off = row * n + begin;
    P rx[MAXP], rd[MAXP];
#pragma unroll
    for (int p = 0; p < MAXP; ++p) {
      rx[p] = nx[p];
      rd[p] = nd[p];
    }
    const A rstd = n_rstd, mean = n_mean;
    if (row + stride < rows) {
      load_packs<T, MAXP>(nx, src + off + stride * n, L, 0.f);
      load_packs<T, MAXP>(nd, dy + off + stride * n, L, 0.f);
      n_rstd = rstd_in[row + stride];
      if (MODE == LAYER && !FROM_OUTPUT) n_mean = mean_in[row + stride];
    }
    // xhat and g of one element (the same arithmetic in both passes).
    auto xhat_of = [&](A v, A wv, A bv) -> A {
      if (FROM_OUTPUT) return acc_div<A>(MODE == LAYER ? v - bv : v, wv);
      return (v - mean) * rstd;
    };
    A c1 = A(0), c2 = A(0);
#pragma unroll
    for (int p = 0; p < MAXP; ++p) {
      if (p < packs) {
        const P wp = column_pack<T>(wb, p, L, 1.f), bp = column_pack<T>(bb, p, L, 0.f);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const A wv = cast<A>(wp.v[e]);
          const A g = cast<A>(rd[p].v[e]) * wv;
          c1 += g;
          c2 += g * xhat_of(cast<A>(rx[p].v[e]), wv, cast<A>(bp.v[e]));
        }
      }
    }
    if (MODE == LAYER) c1 = row_reduce<SumOp>(c1, G, mask, scratch);
    c2 = row_reduce<SumOp>(c2, G, mask, scratch);
    if (parts > 1) {
      const A mine[2] = {c1, c2};
      const A* sl = row_parts<A, 2>(mine, slots, sync, row, part, parts, phase);
      if (phase == 1) continue;
      A t[2];
      sum_parts<A, 2>(sl, parts, t, scratch);
      c1 = t[0];
      c2 = t[1];
    }
    c1 /= A(n);
    c2 /= A(n);
    opaque<T, MAXP>(rx);
    opaque<T, MAXP>(rd);
#pragma unroll
    for (int p = 0; p < MAXP; ++p) {
      if (p < packs) {
        const P wp = column_pack<T, true>(wb, p, L, 1.f), bp = column_pack<T, true>(bb, p, L, 0.f);
        P o;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const A wv = cast<A>(wp.v[e]), d = cast<A>(rd[p].v[e]);
          const A xh = xhat_of(cast<A>(rx[p].v[e]), wv, cast<A>(bp.v[e]));
          const A g = d * wv;
          o.v[e] = cast<T>(rstd * (MODE == LAYER ? g - c1 - xh * c2 : g - xh * c2));
          acc_w[(p * V + e) * blockDim.x + threadIdx.x] += d * xh;  // zero dy past the end adds nothing
          acc_b[(p * V + e) * blockDim.x + threadIdx.x] += d;
        }
        store_pack<T>(dx + off, o, p, L);
      }
    }
  }

  // Column partials: the block's groups meet in shared memory, summed in group order.
  __syncthreads();
  for (int k = 0; k < 2; ++k) {
    A* out = k == 0 ? dw_part : db_part;
    const A* acc = k == 0 ? acc_w : acc_b;
    if (out == nullptr) continue;  // uniform over the block
    for (int j = threadIdx.x; j < L.len; j += blockDim.x) {
      const int q = j / V, e = j % V, ln = q % G, p = q / G;
      A s = A(0);
      for (int g2 = 0; g2 < gpb; ++g2) s += acc[(p * V + e) * blockDim.x + g2 * G + ln];
      out[rg * n + begin + j] = s;
    }
  }
}

// dweight / dbias from the partial rows: out[col] = sum over r partial rows in row order.
// Launch: grid (ceil(n / 32), 2: y = 0 weight, 1 bias), block (32, 8). p1 / o1 may be null.
template <typename T>
__global__ void __launch_bounds__(256) column_sum(const typename AccOf<T>::type* __restrict__ p0,
                                                  const typename AccOf<T>::type* __restrict__ p1, T* o0, T* o1,
                                                  long long r, long long n) {
  typedef typename AccOf<T>::type A;
  const A* p = blockIdx.y ? p1 : p0;
  T* o = blockIdx.y ? o1 : o0;
  if (p == nullptr) return;  // uniform over the block
  __shared__ A part[8][33];
  const long long col = (long long)blockIdx.x * 32 + threadIdx.x;
  A acc = A(0);
  if (col < n)
#pragma unroll 4
    for (long long i = threadIdx.y; i < r; i += 8) acc += p[i * n + col];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    A s = part[0][threadIdx.x];
    for (int i = 1; i < 8; ++i) s += part[i][threadIdx.x];
    o[col] = cast<T>(s);
  }
}
