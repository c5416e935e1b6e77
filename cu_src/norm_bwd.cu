// Layer norm and RMS norm backward over the last axis of C-contiguous (rows, n) matrices: dx, and dweight / dbias
// reduced across rows without atomics (each block writes one partial row of column sums; column_sum adds the partial
// rows in order: deterministic). Statistics in float (double for float64). The forms that keep the column sums in
// shared memory (a CTA or an sm_90 cluster a row, and the ring) are in norm_bwd_cluster.cu; column_sum, here, adds
// their partial rows too. Template arguments name their form (common/norm.cuh): e.g.
// norm_bwd<float, ANY_MODE, ANY_SOURCE, 2, 8, STAGED | FULL_PACKS>. Every backward kernel takes the op as run-time
// arguments (mode: LAYER or RMS, source: FROM_X or FROM_Y), read where its MODE / SRC are ANY_MODE / ANY_SOURCE; the
// forms where that spilled compile them in (host: norm._bwd_compiled).
#include "common/rows.cuh"
#include "common/norm.cuh"

// norm_bwd: PACKS 16-byte packs of each of x and dy per thread. Two for float32 / float64 (8 / 4 elements):
// both rows and the thread's dweight / dbias column accumulators (one per element) fit 64 registers
// (float64 128). A half type has two forms: PACKS = 1 (8 elements; 1024-thread blocks, one per SM, so an
// 8192-element row fits one block) fits without spilling; PACKS = 2 (16 elements, 512-thread blocks, two
// per SM) spills accumulators (128 bytes rms, ~700 layer) yet measured faster on long rows, where the
// second resident block hides the row's exchange (the host picks: norm.TUNING.two_pack_from).
template <typename T, int PACKS> struct NormBwdThreads {
  static constexpr int value = sizeof(T) == 8 ? 256 : sizeof(T) == 2 && PACKS == 1 ? 1024 : 512;
};
template <typename T, int PACKS> struct NormBwdMinBlocks {
  static constexpr int value = sizeof(T) == 2 && PACKS == 1 ? 1 : 2;
};

// Backward, the register forms. From x (FROM_X), src is the forward input x and mean / rstd the saved statistics
// (mean unused for rms); from y (FROM_Y, after an in-place forward), src is the output y and the normalised input is
// recomputed as xhat = (y - b) / w (rms: y / w) with the saved rstd (common/norm.cuh). rms rows have no bias (b null).
// Launch: like norm_fwd with blocks of <= NormBwdThreads, and a persistent grid (grid / parts row groups, each block
// writes partial row rg = b / parts, columns of its segment). Each thread keeps its columns' dweight / dbias sums in
// registers over the rows its group visits; a block of one group (G = block) writes them straight out, a block of
// several groups (G <= 32) sums them in group order through dynamic shared memory of blockDim.x * PACKS * V
// accumulators. dw_part / db_part may be null (not wanted). GT: the group known at compile time (fix_group), or
// ANY_GROUP. FORM (common/norm.cuh):
//   STAGED (aligned rows): each thread copies its packs of its group's next row's src and dy (cp.async) into dynamic
//     shared memory of 2 * packs * blockDim.x 16-byte slots (the larger of the two sizes with several groups) while
//     this row is processed, as softmax_bwd: sub-warp groups of 8-32 threads with ~8 rows a group, and the shifted
//     1024-thread block rows alone on their SM (host: norm.stage_short_bwd, norm.TUNING.stage_shifted_bwd).
//   NO_DBIAS (layer_norm only): no dbias accumulators (the host sums dy's columns itself): 16 fewer registers for
//     the two-pack half form, whose accumulators spill.
//   FULL_PACKS (with GT): every thread holds PACKS whole packs of every row (n = PACKS * V * G).
//   SHIFTED (the half types' one-pack form, ANY_GROUP or a sub-warp group, one segment a row; STAGED: block rows
//     only): shifted rows as norm_fwd's. The host steps a group's rows by a multiple of V (or gives it one row): all
//     start at the same `head`, so the thread's weight / bias columns are read once and its column sums stay in the
//     same registers; sub-warp blocks then add their groups' sums by column, not by slot.

// First pass, this thread's share: c1 = sum(g), c2 = sum(g * xhat), g = dy * w; pack p's weight and bias
// columns(p, wp, bp).
template <typename T, int MODE, int SRC, int MAXP, typename A = typename AccOf<T>::type,
          typename P = typename Vec16<T>::type, typename F>
__device__ __forceinline__ void bwd_sums(const NormOp<MODE, SRC>& op, const P (&rx)[MAXP], const P (&rd)[MAXP],
                                         const RowLayout<T>& L, A mean, A rstd, A& c1, A& c2, F columns) {
  c1 = A(0);
  c2 = A(0);
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    if (p < L.packs) {
      P wp, bp;
      columns(p, wp, bp);
      bwd_sums_pack<T>(op, rx[p], rd[p], wp, bp, mean, rstd, c1, c2);
    }
  }
  if (!op.from_y) c2 *= rstd;
}

// Second pass: dx of the row written to dxr, and this thread's column sums in registers: aw[p * V + e],
// with DBS ab[p * V + e].
template <bool DBS, typename T, int MODE, int SRC, int MAXP, int K, int KB, typename A = typename AccOf<T>::type,
          typename P = typename Vec16<T>::type>
__device__ __forceinline__ void bwd_write(const NormOp<MODE, SRC>& op, const P (&rx)[MAXP], const P (&rd)[MAXP],
                                          const T* wb, const T* bb, const RowLayout<T>& L, A mean, A rstd, A c1, A c2,
                                          T* dxr, A (&aw)[K], A (&ab)[KB]) {
  constexpr int V = Vec16<T>::N;
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    if (p < L.packs) {
      const P wp = column_pack<T, true>(wb, p, L, 1.f), bp = column_pack<T, true>(bb, p, L, 0.f);
      P o;
      bwd_write_pack<T, DBS>(op, rx[p], rd[p], wp, bp, mean, rstd, c1, c2, o, aw + p * V,
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

template <typename T, int MODE, int SRC, int PACKS, int GT, unsigned FORM>
__global__ void __launch_bounds__(NormBwdThreads<T, PACKS>::value, NormBwdMinBlocks<T, PACKS>::value)
norm_bwd(const T* __restrict__ src, const T* __restrict__ dy, T* dx,
         const T* __restrict__ w, const T* __restrict__ b,
         const typename AccOf<T>::type* __restrict__ mean_in,
         const typename AccOf<T>::type* __restrict__ rstd_in,
         typename AccOf<T>::type* __restrict__ dw_part,
         typename AccOf<T>::type* __restrict__ db_part, long long rows,
         long long n, typename AccOf<T>::type inv_n, long long chunk,
         int G, int packs, int parts, int aligned, int phase, int* sync,
         typename AccOf<T>::type* slots, NormMode mode, NormSource source) {
  constexpr bool STAGE = FORM & STAGED, DB = !(FORM & NO_DBIAS), FULL = FORM & FULL_PACKS, SHIFT = FORM & SHIFTED;
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
  const NormOp<MODE, SRC> op(mode, source);
  constexpr bool DBS = MODE != RMS && DB;  // dbias column sums here (of layer rows)
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
    const A mean = op.layer && !op.from_y ? mean_in[at_row] : A(0);
    A c1, c2;
    bwd_sums<T>(op, rx, rd, R, mean, rstd, c1, c2, [&](int p, P& wp, P& bp) {
      if constexpr (SHIFT) {
        wp = wcol[p];
        bp = bcol[p];
      } else {
        wp = column_pack<T>(wb, p, L, 1.f);
        bp = column_pack<T>(bb, p, L, 0.f);
      }
    });
    if (op.layer) row_reduce2(c1, c2, G, mask, scratch);  // one pair of barriers for both
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
          bwd_write_pack<T, DBS>(op, rx[p], rd[p], wcol[p], bcol[p], mean, rstd, c1 * inv_n, c2 * inv_n, o,
                                            aw + p * V, DBS ? ab + p * V : ab);
        return o;
      });
      continue;
    }
    bwd_write<DBS>(op, rx, rd, wb, bb, L, mean, rstd, c1 * inv_n, c2 * inv_n, dx + off, aw, ab);
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

// Long rows over `parts` co-resident blocks, pipelined (pipelined_parts in rows.cuh), each set holding the
// thread's packs of src (x or y) and dy: a row's exchange of (sum g, sum g * xhat) overlaps the next row's
// sums. Each thread keeps its columns' weight and bias, and their dweight / dbias sums, in registers over its
// block's rows and writes the sums to partial row blockIdx.x / parts (column_sum adds them). Arithmetic as
// norm_bwd.
// Launch: grid = parts * row groups, every block resident; blocks of <= 512 threads; dynamic shared memory
// of 3 * 2 * MAXP * blockDim.x 16-byte slots (MAXP = RowPacks: 192 KB for float32 at 512, one block per SM);
// n <= parts * packs * blockDim.x * V; aligned rows (words: rows * parts * 2 tagged 64-bit slots, zero before
// the first publish: zero_words).
template <typename T, int MODE, int SRC>
__global__ void __launch_bounds__(512, 1) norm_bwd_parts(const T* __restrict__ src, const T* __restrict__ dy, T* dx,
                                                         const T* __restrict__ w, const T* __restrict__ b,
                                                         const float* __restrict__ mean_in,
                                                         const float* __restrict__ rstd_in, float* __restrict__ dw_part,
                                                         float* __restrict__ db_part, long long rows, long long n,
                                                         float inv_n, long long chunk, int packs, int parts,
                                                         NormMode mode, NormSource source, unsigned long long* words) {
  launch_dependents();  // column_sum's blocks may start (they wait for this grid's end)
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  constexpr int MAXP = RowPacks<T>::value;
  constexpr int K = MAXP * V;  // accumulator slots per thread: slot p * V + e
  const NormOp<MODE, SRC> op(mode, source);
  constexpr bool DBS = MODE != RMS;  // dbias column sums (of layer rows)
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
    if (row < rows) nx = make_float2(op.layer && !op.from_y ? mean_in[row] : 0.f, rstd_in[row]);
  };
  load_stats(blockIdx.x / parts);
  wq = nx;
  auto reduce = [&](long long row, const P* set) {
    cur = nx;
    load_stats(row + row_step);
    const float mean = cur.x, rstd = cur.y;
    float c1 = 0.f, c2 = 0.f;
    for_own_packs<MAXP>(L, [&](int p) {
      bwd_sums_pack<T>(op, own_slot<MAXP>(set, 0, p), own_slot<MAXP>(set, 1, p), wr[p], br[p], mean, rstd, c1, c2);
    });
    if (!op.from_y) c2 *= rstd;
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
      bwd_write_pack<T, DBS>(op, own_slot<MAXP>(set, 0, p), own_slot<MAXP>(set, 1, p), wr[p], br[p], mean,
                                        rstd, c[0] * inv_n, c[1] * inv_n, o, aw + p * V, DBS ? ab + p * V : ab);
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
