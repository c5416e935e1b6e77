// Softmax and log-softmax over the last axis of a C-contiguous (rows, n) matrix, forward and
// backward, out of place or in place (y may be x). One read of the input, one write of the output:
// the thread's share of the row stays in registers between the reductions and the write.
//
// Dispatch (host side, ops/softmax.py): a sub-warp group of G <= 32 threads per row for short rows,
// a block per row for medium rows, `parts` co-resident blocks per row for very long rows (their
// partial statistics meet through global memory, see exchange_parts). Statistics in float (double
// for float64); max subtraction like torch: a row of -inf gives NaN, NaN propagates.
// Every kernel takes the mode at run time (`mode`: SOFTMAX or LOG_SOFTMAX): both modes share the loads, reductions
// and stores, and branch uniformly (by_mode) only around the passes whose arithmetic differs.
#include "common/rows.cuh"

enum SoftmaxMode { SOFTMAX = 0, LOG_SOFTMAX = 1 };
// softmax_small_rows' and softmax_tiled's DIR.
enum SoftmaxDirection { FORWARD = 0, BACKWARD = 1 };
// A row kernel's form, flags combined with | in its template argument FORM (norm.cuh's RowForm names and values):
//   STAGED      the next row copied into dynamic shared memory (cp.async) while this one is processed
//   TWO_AHEAD   (softmax_fwd, with STAGED) the next two rows, in two sets of slots
//   FULL_PACKS  every thread holds the kernel's MAXP whole packs of every row (the host checks)
//   SHIFTED     rows that are not whole packs of 16-byte aligned arrays, read as the packs around them (shift_row)
enum SoftmaxForm : unsigned { PLAIN = 0, STAGED = 1, FULL_PACKS = 2, SHIFTED = 4, TWO_AHEAD = 8 };
// The GT of a row kernel that takes its group at run time (rows.cuh fix_group; else 1..32 or ROW_BLOCK).
constexpr int ANY_GROUP = 0;
// The MODE of a kernel that takes the mode at run time. softmax_bwd and softmax_tiled also compile per mode (MODE
// SOFTMAX or LOG_SOFTMAX, the argument then unused) for the forms whose shared instance spilled or took more registers.
constexpr int ANY_MODE = -1;

// f(ModeTag<SOFTMAX>()) or f(ModeTag<LOG_SOFTMAX>()) as the run-time `mode` says (or the compile-time MODE): one
// uniform branch around a pass, each side compiled as that mode's own instance was (no select or unused exp per
// element).
template <int M> struct ModeTag { static constexpr int value = M; };
template <int MODE = ANY_MODE, typename F>
__device__ __forceinline__ void by_mode(int mode, F f) {
  if constexpr (MODE != ANY_MODE) {
    f(ModeTag<MODE>());
  } else {
    if (mode == LOG_SOFTMAX) f(ModeTag<LOG_SOFTMAX>());
    else f(ModeTag<SOFTMAX>());
  }
}

// Row statistics (max m, sum s of exp(x - m)) of the partial rows. Thread t reads parts t, t + block,
// ... (one round of parallel L2 loads, not a chain of `parts` dependent ones), then block reductions
// in a fixed order: every block of the row gets the same result (deterministic). A part whose max is
// -inf adds nothing (its own sum is NaN); a row all -inf keeps m = -inf -> NaN.
// softmax_fwd takes this block-reduced form: the warp form (softmax_fwd_parts) made its float32 instance
// spill 4 bytes at 64 registers, 65536x128 18.6 -> 19.6 us and 4096² 33.5 -> 34.6 (H200).
template <typename A>
__device__ __forceinline__ void combine_softmax_parts(const A* s, int parts, A& m, A& sum, A* scratch) {
  A M = lowest<A>();
  for (int q = threadIdx.x; q < parts; q += blockDim.x) M = MaxOp::combine(M, ld_part(s + 2 * q));
  M = block_reduce<MaxOp>(M, scratch);
  A S = A(0);
  for (int q = threadIdx.x; q < parts; q += blockDim.x) {
    const A mq = ld_part(s + 2 * q);
    if (mq != lowest<A>()) S += ld_part(s + 2 * q + 1) * fast_exp<A>(mq - M);
  }
  m = M;
  sum = block_reduce<SumOp>(S, scratch);
}

// One output element of the forward from d = x - m: exp(d) * inv (softmax) or d - ls, ls = log(sum).
template <int MODE, typename A>
__device__ __forceinline__ A softmax_out(A d, A inv, A ls) {
  return MODE == SOFTMAX ? fast_exp<A>(d) * inv : d - ls;
}

// Launch: 1-D grid of blocks of G * groups threads (<= FwdThreads: 1024, float64 512; G = block when
// G > 32). Block b takes
// segment b % parts of rows (b / parts) * groups + group + k * (grid / parts) * groups. Any row count
// (64-bit), n <= parts * packs * G * V. With parts > 1: phase 0 needs the grid co-resident, phases 1
// then 2 are two launches of any grid (see row_parts).
// GT (fix_group, rows.cuh): the group known at compile time (1..32, or ROW_BLOCK), one aligned segment a row;
// ANY_GROUP: G, parts and aligned at run time.
// FORM:
//   STAGED (aligned rows, a grid of resident blocks looping over rows): dynamic shared memory of packs * blockDim.x
//     16-byte slots holds the next row, copied (cp.async) while this one is reduced and written (a block per SM
//     then still overlaps them); with TWO_AHEAD the next two rows, in two sets of slots (2 * MAXP * blockDim.x)
//     alternating with the row's parity.
//   FULL_PACKS (with GT): every thread holds MAXP whole packs of every row (n = MAXP * V * G; the host checks).
//   SHIFTED (unstaged): shifted rows (shift_row, rows.cuh): 16-byte aligned x and y, n not a multiple of V; the host
//     plans the geometry for n + V - 1 elements; sub-warp groups take 16 bytes of dynamic shared memory a group
//     (store_shifted).
__host__ __device__ constexpr int fwd_stage(unsigned form) { return form & TWO_AHEAD ? 2 : form & STAGED ? 1 : 0; }
template <typename T, int GT, unsigned FORM>
__global__ void __launch_bounds__(FwdBounds<T, fwd_stage(FORM), GT>::threads, FwdBounds<T, fwd_stage(FORM), GT>::blocks)
softmax_fwd(
    const T* x, T* y, int mode, long long rows, long long n, long long chunk, int G, int packs, int parts, int aligned,
    int phase, int* sync, typename AccOf<T>::type* slots) {
  constexpr int STAGE = fwd_stage(FORM);
  constexpr bool FULL = FORM & FULL_PACKS, SHIFT = FORM & SHIFTED;
  fix_group<GT>(G, parts, aligned);
  typedef typename AccOf<T>::type A;
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  constexpr int MAXP = FwdPacks<T>::value;
  static_assert(!FULL || GT, "FULL rows are one aligned segment of a compile-time group");
  static_assert(!(FORM & TWO_AHEAD) || (FORM & STAGED), "TWO_AHEAD stages");
  if (FULL) packs = MAXP;
  // softmax keeps exp(x - max) of its first KEEP packs from the sum for the output: one exp an element there,
  // not two; log_softmax keeps x itself there, so that both leave those packs dead after the sum. As many as fit
  // the 64 registers unspilled: all of float32 / float64, one of a half type's four (two spilled and measured
  // slower); none on shifted rows (their stores' hand-over spilled).
  constexpr int KEEP = SHIFT ? 0 : sizeof(T) == 2 ? 1 : MAXP;
  __shared__ A scratch_mem[2 * 2 * 32];
  RowScratch<A, 2> scratch{scratch_mem};  // one barrier a reduction
  const RowGrid at(G, parts, GT == ROW_BLOCK);
  const int part = at.part;
  const long long begin = part * chunk;
  const RowLayout<T> L{(int)min(chunk, n - begin), (int)(threadIdx.x & (G - 1)), G, packs, !SHIFT && aligned, FULL,
                       SHIFT};
  const unsigned mask = 0xffffffffu;  // whole warps loop together (RowGrid::lead)
  extern __shared__ int4 staged[];
  P* const sx = reinterpret_cast<P*>(staged);
  const long long step = at.nrg * at.gpb, ahead = STAGE == 2 ? 2 * step : step;  // the row staged next
  const long long first = at.rg * at.gpb + at.gi;
  stage_first<STAGE, T, MAXP>(sx, x, first * n + begin, first < rows, L, step * n, first + step < rows);
  // Staged rows a block each always have a row; staged sub-warp groups (GT < 32) loop with their warp as the others
  // (a dead group: nothing staged, garbage reduced, nothing stored).
  constexpr bool BLOCK_STAGED = STAGE && !(GT > 0 && GT < 32);
  const int lead = BLOCK_STAGED ? 0 : at.lead;
  for (long long row = first; row - lead < rows; row += step, scratch.next_row()) {
    const bool live = BLOCK_STAGED || row < rows;
    RowLayout<T> R = L;  // past the end: the last row again, not stored
    const long long from = shift_row(R, live ? row : rows - 1, rows, n, begin, chunk);
    P r[MAXP];
    // -inf: neutral for max and exp-sum
    load_row<STAGE, T, MAXP>(r, sx + (STAGE == 2 ? scratch.odd() * MAXP * blockDim.x : 0), x, from,
                             ahead * n, row + ahead < rows, R, -__int_as_float(0x7f800000));
    A m = lowest<A>();
#pragma unroll
    for (int p = 0; p < MAXP; ++p)
      if (p < packs)
#pragma unroll
        for (int e = 0; e < V; ++e) m = MaxOp::combine(m, elem<A>(r[p], e));
    m = row_reduce<MaxOp, true>(m, G, mask, scratch.at(0));
    opaque<T, MAXP>(r);
    A s = A(0), ex[KEEP * V + 1];
    by_mode(mode, [&](auto tag) {
      constexpr int M = decltype(tag)::value;
      // ms: the segment's max, for softmax 0 where that is -inf (its exps are then 0, not NaN; its sum is not
      // combined).
      const A ms = KEEP && M == SOFTMAX && m == lowest<A>() ? A(0) : m;
#pragma unroll
      for (int p = 0; p < MAXP; ++p)
        if (p < packs)
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const A v = elem<A>(r[p], e), t = fast_exp<A>(v - ms);
            if (p < KEEP) ex[p * V + e] = M == SOFTMAX ? t : v;
            s += t;
          }
    });
    s = row_reduce<SumOp, true>(s, G, mask, scratch.at(1));
    const A own = m;  // the segment's max; with parts > 1 m becomes the row's
    if (parts > 1) {
      const A mine[2] = {m, s};
      const A* sl = row_parts<A, 2>(mine, slots, sync, row, part, parts, phase);
      if (phase == 1) continue;
      combine_softmax_parts(sl, parts, m, s, scratch_mem);  // after the exchange's barrier
    }
    opaque<T, MAXP, KEEP>(r);
    by_mode(mode, [&](auto tag) {
      constexpr int M = decltype(tag)::value;
      // softmax's kept exps times exp(ms - m) once m is the row's max (a row all -inf: 0 * (1 / 0) = NaN)
      const A kept = parts > 1 ? (own == lowest<A>() ? A(0) : fast_exp<A>(own - m)) : A(1);
      const A inv = A(1) / s, ls = acc_log<A>(s), kept_inv = inv * kept;
#pragma unroll
      for (int p = 0; p < MAXP; ++p) {
        if (p < packs) {
          P o;
          auto out = [&](int e) {
            if (p < KEEP) return M == SOFTMAX ? ex[p * V + e] * kept_inv : softmax_out<M>(ex[p * V + e] - m, inv, ls);
            return softmax_out<M>(elem<A>(r[p], e) - m, inv, ls);
          };
#pragma unroll
          for (int e = 0; e < V; e += 2) store2(&o.v[e], out(e), out(e + 1));
          r[p] = o;
        }
      }
    });
    if constexpr (SHIFT) {
      store_shifted<T, MAXP>(y + from, R, live, row + 1 < rows, sx, [&](int p) { return r[p]; });
    } else {
      T* yr = y + row * n + begin;
#pragma unroll
      for (int p = 0; p < MAXP; ++p)
        if (p < packs && live) store_pack<T>(yr, r[p], p, L);
    }
  }
}

// Long rows over `parts` co-resident blocks, pipelined (pipelined_parts in rows.cuh): one read of x, one
// write of y, and each row's exchange of partial statistics overlapped with the next row's reduction.
// Launch: grid = parts * row groups, every block resident; blocks of <= 512 threads; dynamic shared memory
// of 3 * MAXP * blockDim.x 16-byte slots (MAXP 4: 96 KB at 512, two blocks per SM; 8: 192 KB, one);
// n <= parts * packs * blockDim.x * V; aligned rows (FORM SHIFTED: shifted ones, as softmax_fwd's), float
// accumulators (words: rows * parts * 2 tagged 64-bit slots, zero before the first publish: zero_words). In place
// allowed (y == x).
template <typename T, int MAXP, unsigned FORM>
__global__ void __launch_bounds__(512, MAXP > 4 ? 1 : 2) softmax_fwd_parts(const T* x, T* y, int mode, long long rows,
                                                            long long n, long long chunk, int packs, int parts,
                                                            unsigned long long* words) {
  constexpr bool SHIFT = FORM & SHIFTED;
  static_assert((FORM & ~SHIFTED) == 0, "PLAIN or SHIFTED");
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  __shared__ float scratch_mem[2 * 2 * 32];
  RowScratch<float, 2> scratch{scratch_mem};
  const int part = blockIdx.x % parts;
  const long long begin = part * chunk;
  const RowLayout<T> L{(int)min(chunk, n - begin), (int)threadIdx.x, (int)blockDim.x, packs, !SHIFT, false, SHIFT};
  const T* const src[1] = {x};
  auto reduce = [&](long long row, const P* set) {
    float m = lowest<float>(), s = 0.f;
    at_row<SHIFT>(L, row, rows, n, begin, chunk, [&](const RowLayout<T>& R, long long) {
      auto pack = [&](int p) {  // SHIFT: the elements outside the row -inf, neutral for max and exp-sum
        P v = own_slot<MAXP>(set, 0, p);
        if constexpr (SHIFT) v = row_pack<T>(v, p, R, -__int_as_float(0x7f800000));
        return v;
      };
      for_own_packs<MAXP>(R, [&](int p) {
        const P v = pack(p);
#pragma unroll
        for (int e = 0; e < V; ++e) m = MaxOp::combine(m, elem<float>(v, e));
      });
      m = block_reduce<MaxOp, true>(m, scratch.at(0));
      for_own_packs<MAXP>(R, [&](int p) {
        const P v = pack(p);
#pragma unroll
        for (int e = 0; e < V; ++e) s += fast_exp<float>(elem<float>(v, e) - m);
      });
    });
    s = block_reduce<SumOp, true>(s, scratch.at(1));
    scratch.next_row();
    const float mine[2] = {m, s};
    publish_tagged<2>(mine, words, row, part, parts);
  };
  auto write = [&](long long row, const P* set, unsigned long long early) {
    const float* got = collect_tagged<2>(words, row, parts, early);
    const float m = warp_combine<MaxOp>(parts, [&](int q) { return got[2 * q]; });
    const float s = warp_combine<SumOp>(parts, [&](int q) {  // a part whose max is -inf adds nothing
      return got[2 * q] == lowest<float>() ? 0.f : got[2 * q + 1] * fast_exp<float>(got[2 * q] - m);
    });
    at_row<SHIFT>(L, row, rows, n, begin, chunk, [&](const RowLayout<T>& R, long long off) {
      T* yr = y + off;
      by_mode(mode, [&](auto tag) {
        constexpr int M = decltype(tag)::value;
        const float inv = 1.f / s, ls = acc_log<float>(s);
#pragma unroll
        for (int p = 0; p < MAXP; ++p) {
          if (p < packs) {
            const P v = own_slot<MAXP>(set, 0, p);
            P o;
            auto out = [&](int e) { return softmax_out<M>(elem<float>(v, e) - m, inv, ls); };
#pragma unroll
            for (int e = 0; e < V; e += 2) store2(&o.v[e], out(e), out(e + 1));
            store_pack<T>(yr, o, p, R);
          }
        }
      });
    });
  };
  pipelined_parts<T, MAXP, 1, 2, true, SHIFT>(src, rows, n, begin, chunk, parts, L, words, reduce, write);
}

// The backward's row sum c adds dy * y (softmax) or dy (log_softmax); dx = y * (dy - c) or dy - exp(y) * c.
template <int MODE, typename A>
__device__ __forceinline__ A softmax_grad_term(A y, A g) {
  return MODE == SOFTMAX ? g * y : g;
}
template <int MODE, typename A>
__device__ __forceinline__ A softmax_grad(A y, A g, A c) {
  return MODE == SOFTMAX ? y * (g - c) : g - fast_exp<A>(y) * c;
}

// Backward from the output y and its gradient dy (dx may be dy):
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
// Launch and limits as softmax_fwd, with MAXP packs per thread. FORM STAGED (aligned rows, a grid of resident
// blocks looping over rows: half-type block rows, float32 sub-warp groups of 8): dynamic shared memory of
// 2 * packs * blockDim.x packs holds each thread's packs of its group's next row of y and dy, copied
// (cp.async) while this row is reduced, exchanged and written. A template
// argument, so the unstaged instance stays the code it was (a run-time flag cost 7% on 65536x128).
// PACKS: packs of each of y and dy per thread: RowPacks (512-thread blocks, two per SM), or a wide form
// of twice that in 1024-thread blocks (one per SM) so that a 32768-element half row fits one block
// (no exchange between blocks; staged: 128 KB of shared memory). GT, SHIFTED: as softmax_fwd's.
template <typename T, int PACKS> struct SoftmaxBwdBounds {
  static constexpr bool wide = PACKS > RowPacks<T>::value;
  static constexpr int threads = wide ? 1024 : 512, min_blocks = wide ? 1 : RowMinBlocks<T>::value;
};
template <typename T, int PACKS, int GT, unsigned FORM, int MODE = ANY_MODE>
__global__ void __launch_bounds__(SoftmaxBwdBounds<T, PACKS>::threads, SoftmaxBwdBounds<T, PACKS>::min_blocks)
softmax_bwd(const T* __restrict__ y, const T* dy, T* dx, int mode, long long rows, long long n, long long chunk, int G,
            int packs, int parts, int aligned, int phase, int* sync, typename AccOf<T>::type* slots) {
  constexpr bool STAGE = FORM & STAGED, SHIFT = FORM & SHIFTED;
  static_assert((FORM & ~(STAGED | SHIFTED)) == 0, "PLAIN, STAGED or SHIFTED");
  typedef typename AccOf<T>::type A;
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  constexpr int MAXP = PACKS;
  fix_group<GT>(G, parts, aligned);
  __shared__ A scratch[32];
  const RowGrid at(G, parts, GT == ROW_BLOCK);
  const int part = at.part;
  const long long begin = part * chunk;
  const RowLayout<T> L{(int)min(chunk, n - begin), (int)(threadIdx.x & (G - 1)), G, packs, !SHIFT && aligned, false,
                       SHIFT};
  const unsigned mask = 0xffffffffu;  // whole warps loop together (RowGrid::lead)
  extern __shared__ int4 staged[];
  P* const sy = reinterpret_cast<P*>(staged);
  P* const sd = sy + packs * blockDim.x;
  const int step = (int)at.nrg * at.gpb;  // 32 bits (plan() caps grid * gpb at 2^30): the 64-bit product spilled
  long long row = (int)at.rg * at.gpb + at.gi;
  if (STAGE) stage_first_pair<T, MAXP>(sy, sd, y, dy, row * n + begin, row < rows, L);
  constexpr bool BLOCK_STAGED = STAGE && !(GT > 0 && GT < 32);  // as softmax_fwd's
  const int lead = BLOCK_STAGED ? 0 : at.lead;
  for (; row - lead < rows; row += step) {
    const bool live = BLOCK_STAGED || row < rows;
    RowLayout<T> R = L;  // past the end: the last row again, not stored
    const long long off = shift_row(R, live ? row : rows - 1, rows, n, begin, chunk);
    P ry[MAXP], rd[MAXP];
    load_row_pair<STAGE, T, MAXP>(ry, rd, sy, sd, y, dy, off, step * n, row + step < rows, R);
    A c = A(0);
    by_mode<MODE>(mode, [&](auto tag) {
#pragma unroll
      for (int p = 0; p < MAXP; ++p)
        if (p < packs)
#pragma unroll
          for (int e = 0; e < V; ++e)
            c += softmax_grad_term<decltype(tag)::value>(elem<A>(ry[p], e), elem<A>(rd[p], e));
    });
    c = row_reduce<SumOp>(c, G, mask, scratch);
    if (parts > 1) {
      const A mine[1] = {c};
      const A* s = row_parts<A, 1>(mine, slots, sync, row, part, parts, phase);
      if (phase == 1) continue;
      A cs[1];
      sum_parts<A, 1>(s, parts, cs);
      c = cs[0];
    }
    opaque<T, MAXP>(ry);  // convert again below rather than keep float copies live (half types)
    opaque<T, MAXP>(rd);
    auto grad_pack = [&](auto tag, int p) {  // dx of pack p
      P o;
      auto out = [&](int e) { return softmax_grad<decltype(tag)::value>(elem<A>(ry[p], e), elem<A>(rd[p], e), c); };
#pragma unroll
      for (int e = 0; e < V; e += 2) store2(&o.v[e], out(e), out(e + 1));
      return o;
    };
    if constexpr (MODE == ANY_MODE) {
      // every pack's dx in place of its y under one branch, then the stores (each pack stored as the branch
      // computes it spilled 92-96 bytes)
      by_mode(mode, [&](auto tag) {
#pragma unroll
        for (int p = 0; p < MAXP; ++p)
          if (p < packs) ry[p] = grad_pack(tag, p);
      });
    }
    auto pack = [&](int p) {
      if constexpr (MODE == ANY_MODE) return ry[p];
      else return grad_pack(ModeTag<MODE>(), p);
    };
    if constexpr (SHIFT) {
      store_shifted<T, MAXP>(dx + off, R, live, row + 1 < rows, sy, pack);
    } else {
#pragma unroll
      for (int p = 0; p < MAXP; ++p) {
        if (p < packs) {
          const P o = pack(p);
          if (live) store_pack<T>(dx + off, o, p, L);
        }
      }
    }
  }
}

// Long rows over `parts` co-resident blocks, pipelined as softmax_fwd_parts, with each set holding the
// thread's packs of y and dy. Launch: grid = parts * row groups, every block resident; blocks of <= 512
// threads; dynamic shared memory of 3 * 2 * MAXP * blockDim.x 16-byte slots (MAXP = RowPacks: 192 KB for
// float32 at 512, one block per SM; 96 KB for a half type); n <= parts * packs * blockDim.x * V; aligned
// rows (FORM SHIFTED: shifted ones, as softmax_fwd's; words: rows * parts tagged 64-bit slots, zero before the first
// publish: zero_words). dx may be dy.
template <typename T, unsigned FORM>
__global__ void __launch_bounds__(512, 1) softmax_bwd_parts(const T* y, const T* dy, T* dx, int mode, long long rows,
                                                            long long n, long long chunk, int packs, int parts,
                                                            unsigned long long* words) {
  constexpr bool SHIFT = FORM & SHIFTED;
  static_assert((FORM & ~SHIFTED) == 0, "PLAIN or SHIFTED");
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  constexpr int MAXP = RowPacks<T>::value;
  __shared__ float scratch_mem[2 * 32];
  RowScratch<float, 1> scratch{scratch_mem};
  const int part = blockIdx.x % parts;
  const long long begin = part * chunk;
  const RowLayout<T> L{(int)min(chunk, n - begin), (int)threadIdx.x, (int)blockDim.x, packs, !SHIFT, false, SHIFT};
  const T* const src[2] = {y, dy};
  auto reduce = [&](long long row, const P* set) {
    float c = 0.f;
    at_row<SHIFT>(L, row, rows, n, begin, chunk, [&](const RowLayout<T>& R, long long) {
      by_mode(mode, [&](auto tag) {
        for_own_packs<MAXP>(R, [&](int p) {
          P yp = own_slot<MAXP>(set, 0, p), gp = own_slot<MAXP>(set, 1, p);
          if constexpr (SHIFT) {  // 0 outside the row
            yp = row_pack<T>(yp, p, R, 0.f);
            gp = row_pack<T>(gp, p, R, 0.f);
          }
#pragma unroll
          for (int e = 0; e < V; ++e)
            c += softmax_grad_term<decltype(tag)::value>(elem<float>(yp, e), elem<float>(gp, e));
        });
      });
    });
    const float mine[1] = {block_reduce<SumOp, true>(c, scratch.at(0))};
    scratch.next_row();
    publish_tagged<1>(mine, words, row, part, parts);
  };
  auto write = [&](long long row, const P* set, unsigned long long early) {
    float cs[1];
    sum_parts<float, 1>(collect_tagged<1>(words, row, parts, early), parts, cs);
    const float c = cs[0];
    at_row<SHIFT>(L, row, rows, n, begin, chunk, [&](const RowLayout<T>& R, long long off) {
      T* dxr = dx + off;
      by_mode(mode, [&](auto tag) {
#pragma unroll
        for (int p = 0; p < MAXP; ++p) {
          if (p < packs) {
            const P yp = own_slot<MAXP>(set, 0, p), gp = own_slot<MAXP>(set, 1, p);
            P o;
            auto out = [&](int e) {
              return softmax_grad<decltype(tag)::value>(elem<float>(yp, e), elem<float>(gp, e), c);
            };
#pragma unroll
            for (int e = 0; e < V; e += 2) store2(&o.v[e], out(e), out(e + 1));
            store_pack<T>(dxr, o, p, R);
          }
        }
      });
    });
  };
  pipelined_parts<T, MAXP, 2, 1, false, SHIFT>(src, rows, n, begin, chunk, parts, L, words, reduce, write);
}

// Rows of N = 1, 2 or 4 elements (N divides V), elementwise: a thread's 16-byte pack holds V / N whole rows, each
// reduced in registers (no group, no shared memory). N = 1: x - max is 0, or NaN where x is infinite or NaN (as the
// row kernels give), so softmax is 1 + d and log_softmax d. Backward: softmax_grad with the row's sum of N terms. a is
// x (FORWARD) or y, g unused (FORWARD) or dy. The whole body by_mode: a row is a few instructions.
// Launch: 1-D grid of 256-thread blocks striding over `rows`, by 16-byte packs when every pointer is 16-byte aligned
// (`aligned`), the rest (or every row, unaligned) a row a thread. out may be a or g.
template <typename T, int DIR, int N>
__global__ void __launch_bounds__(256) softmax_small_rows(const T* a, const T* g, T* out, int mode, long long rows,
                                                          int aligned) {
  typedef typename AccOf<T>::type A;
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  constexpr bool BWD = DIR == BACKWARD;
  static_assert(V % N == 0, "a pack holds whole rows");
  by_mode(mode, [&](auto tag) {
    constexpr int MODE = decltype(tag)::value;
    auto row = [](A* v, const A* d) {  // v: the row's x (forward) or y, then its result; d: dy
      if (BWD) {
        A c = A(0);
#pragma unroll
        for (int e = 0; e < N; ++e) c += softmax_grad_term<MODE>(v[e], d[e]);
#pragma unroll
        for (int e = 0; e < N; ++e) v[e] = softmax_grad<MODE>(v[e], d[e], c);
      } else if (N == 1) {
        const A z = v[0] - v[0];
        v[0] = MODE == SOFTMAX ? z + A(1) : z;
      } else {
        A m = v[0], s = A(0);
#pragma unroll
        for (int e = 1; e < N; ++e) m = MaxOp::combine(m, v[e]);
#pragma unroll
        for (int e = 0; e < N; ++e) s += fast_exp<A>(v[e] - m);
        const A inv = A(1) / s, ls = acc_log<A>(s);
#pragma unroll
        for (int e = 0; e < N; ++e) v[e] = softmax_out<MODE>(v[e] - m, inv, ls);
      }
    };
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long packs = aligned ? rows * N / V : 0;
    for (long long i = first; i < packs; i += stride) {
      const P ap = reinterpret_cast<const P*>(a)[i];
      const P gp = BWD ? reinterpret_cast<const P*>(g)[i] : ap;
      A v[V], d[V];
#pragma unroll
      for (int e = 0; e < V; ++e) v[e] = elem<A>(ap, e), d[e] = elem<A>(gp, e);
#pragma unroll
      for (int r = 0; r < V; r += N) row(v + r, d + r);
      P o;
#pragma unroll
      for (int e = 0; e < V; e += 2) store2(&o.v[e], v[e], v[e + 1]);
      reinterpret_cast<P*>(out)[i] = o;
    }
    for (long long r = packs * V / N + first; r < rows; r += stride) {
      A v[N], d[N];
#pragma unroll
      for (int e = 0; e < N; ++e) v[e] = cast<A>(a[r * N + e]), d[e] = cast<A>(BWD ? g[r * N + e] : a[r * N + e]);
      row(v, d);
#pragma unroll
      for (int e = 0; e < N; ++e) out[r * N + e] = cast<T>(v[e]);
    }
  });
}

// Short rows through shared memory ("tiled rows"): a block's ROWS = rows_per_thread * blockDim.x / GL consecutive rows
// are one contiguous tile of ROWS * n elements, 16-byte aligned when the matrix is (ROWS a multiple of 32), so it moves
// in (tile_in: cp.async) and out (tile_out: 16-byte stores) as whole packs, whatever n is: no per-row end packs to
// mask or hand over, as the shifted sub-warp rows have. GL threads then take a row in shared memory (fold_span /
// map_span: 2-byte types by words): lane j its span from lane_start (odd n: conflict-free banks), four running
// maxima / sums a span, the lanes' results combined by shuffles; a row's GL lanes are adjacent. GL 1 for short rows,
// more for long ones (a thread's chain of ~n steps and few rows an SM made one thread a row latency-bound there).
// FORWARD: a is x, out y; BACKWARD: a is y, g dy, out dx; the result overwrites a's tile before the store. MODE: see
// ANY_MODE (the half backward: 32 -> 40 registers on sm_90 shared, 8 -> 6 blocks an SM on short rows).
// Launch: 1-D grid of ceil(rows / ROWS) blocks of <= 256 * GL threads (a multiple of 32 * GL), dynamic shared memory
// of (BACKWARD ? 2 : 1) tiles of ceil(ROWS * n / V) 16-byte slots; every pointer 16-byte aligned. y may be x, dx may
// be dy.
template <typename T, int DIR, int GL, int MODE = ANY_MODE>
__global__ void __launch_bounds__(256 * GL) softmax_tiled(const T* a, const T* g, T* out, int mode, long long rows,
                                                          int n, int rows_per_thread) {
  typedef typename AccOf<T>::type A;
  constexpr int V = Vec16<T>::N;
  constexpr bool BWD = DIR == BACKWARD;
  extern __shared__ int4 tile_mem[];
  const int row_step = blockDim.x / GL, tile_rows = rows_per_thread * row_step;
  const RowTile t(rows, n, tile_rows);
  const int slots = (tile_rows * n + V - 1) / V;  // the second tile's offset
  tile_in<T>(tile_mem, a, t);
  if (BWD) tile_in<T>(tile_mem + slots, g, t);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  const int lane = threadIdx.x % GL, lo = lane_start<T, GL>(n, lane), len = lane_start<T, GL>(n, lane + 1) - lo;
  const unsigned mask = group_mask(GL);  // the row's GL lanes
  const int first = threadIdx.x / GL;
  auto row_at = [&](int i) { return reinterpret_cast<T*>(tile_mem) + i * n + lo; };
  if constexpr (BWD) {  // the row loop under one branch (one a row took more registers)
    by_mode<MODE>(mode, [&](auto tag) {
      constexpr int M = decltype(tag)::value;
      for (int i = first; i < t.nrows; i += row_step) {
        T* const r = row_at(i);
        const T* const rg = reinterpret_cast<const T*>(tile_mem + slots) + i * n + lo;
        const A c = group_reduce<SumOp>(
            fold_span<SumOp>(r, rg, len, A(0), [](A y, A dy) { return softmax_grad_term<M>(y, dy); }), GL, mask);
        map_span<A>(r, rg, len, [&](A y, A dy, int) { return softmax_grad<M>(y, dy, c); });
      }
    });
  } else {  // the row's max and sum the same in both modes
    for (int i = first; i < t.nrows; i += row_step) {
      T* const r = row_at(i);
      const A m = group_reduce<MaxOp>(fold_span<MaxOp>(r, r, len, lowest<A>(), [](A x, A) { return x; }), GL, mask);
      const A s =
          group_reduce<SumOp>(fold_span<SumOp>(r, r, len, A(0), [&](A x, A) { return fast_exp<A>(x - m); }), GL, mask);
      by_mode<MODE>(mode, [&](auto tag) {
        constexpr int M = decltype(tag)::value;
        const A inv = A(1) / s, ls = acc_log<A>(s);
        map_span<A>(r, r, len, [&](A x, A, int) { return softmax_out<M>(x - m, inv, ls); });
      });
    }
  }
  __syncthreads();
  tile_out<T>(out, tile_mem, t);
}
