// Padding in one kernel: NumPy's constant / edge / reflect / symmetric / wrap modes and brick-wall
// tiling, plus the backward gather-sum (deterministic, no atomics).
//
// Every output element is written once. The host (ops/pad.py) merges axes so the kernel sees the
// output as `rows` rows of `wtot` elements: up to PAD_MAXD outer axes (each with its own index map),
// one last padded axis, and an optional inner block of `blk` unpadded elements contiguous in x
// (channels-last images: the C axis rides along inside the W axis). Per axis, the source index of
// output coordinate o (k = o - before) is
//   constant: k if 0 <= k < n, else the pad value of the highest padded axis (NumPy's corner rule)
//   edge:     clamp(k, 0, n - 1)
//   periodic: q = k mod P, then q < n ? q : R - q          (P, R below: exactly numpy.pad, wide
//             wrap P = n; reflect P = 2n - 2 (1 if n == 1), R = P; symmetric P = 2n, R = P - 1)
//   brick:    wrap on every axis, and the last axis is shifted right by stagger * band, where
//             band = floor(k_row / n_row) counts tile bands on the second-to-last axis.
// Padding only copies, so the kernels move raw bits: T is an unsigned type of the element's size.
// Kernels: pad_flat (narrow rows, element by element), pad_rows (a warp a row segment), pad_periodic
// (brick and short wrap rows: stores only), pad_gather (the backward, one padded axis a launch) and
// pad_gather2 (the backward of the last two axes at once).
#ifdef PAD_HOST
// Compiled as plain C++ by the CPU test harness (tests/test_pad.py) to check this exact logic.
#define PAD_HD inline
template <typename To, typename From> inline To pad_cast(From v) { return (To)v; }
#else
#include "common/types.cuh"
#define PAD_HD __device__ __forceinline__
template <typename To, typename From> __device__ __forceinline__ To pad_cast(From v) { return cast<To>(v); }
#endif

constexpr int PAD_MAXD = 6;    // outer axes after merging (ops/pad.py splits larger problems)
// The kernels' MODE (their first template argument; name expressions spell it, e.g. pad_rows<PAD_EDGE, ...>).
enum { PAD_CONSTANT = 0, PAD_EDGE = 1, PAD_PERIODIC = 2, PAD_BRICK = 3 };
enum { FOLD_WRAP = 0, FOLD_REFLECT = 1, FOLD_SYMMETRIC = 2 };

template <typename T> struct alignas(16) PadPack { T v[16 / sizeof(T)]; };

struct PadParams {
  long long rows, wtot;          // output rows and elements per row (= lout * blk)
  long long tiles, tpr;          // units in all and per row (pad_rows, pad_periodic)
  int tile_chunks, unroll;       // 16-byte chunks per unit (0: pad_flat); unroll: read by no kernel (see PAD_FORWARD_ARGS)
  int nd, fold;                  // outer axes; FOLD_* for PAD_PERIODIC
  long long out[PAD_MAXD], n[PAD_MAXD], before[PAD_MAXD], stride[PAD_MAXD];  // outer axes
  long long lout, ln, lbefore, lstride, blk;  // last axis (stride in elements of x) and inner block
  long long stagger;             // brick: shift per band, in [0, ln)
  int contig;                    // lstride == blk: the interior of a row is contiguous in x
  unsigned long long cval[2 * PAD_MAXD + 2];  // constant mode: raw bits per (axis, side); last axis last
  // (indexed with compile-time indices only, so the parameters stay out of local memory)
};

struct PadRow {
  long long src;     // element offset in x of the row's source (last-axis index 0)
  long long origin;  // output column (in units of blk) of source index 0 on the last axis
  int cidx;          // constant mode: >= 0 when an outer axis is in its pad ...
  unsigned long long cv;  // ... and then the pad value (raw bits) of the highest such axis
};

PAD_HD long long pad_pmod(long long a, long long m) {  // m > 0; result in [0, m)
  if (a > -0x40000000LL && a < 0x40000000LL && m < 0x40000000LL) {
    const int r = (int)a % (int)m;
    return r < 0 ? r + m : r;
  }
  const long long r = a % m;
  return r < 0 ? r + m : r;
}

PAD_HD long long pad_floordiv(long long a, long long m) {  // m > 0
  if (a > -0x40000000LL && a < 0x40000000LL && m < 0x40000000LL) {
    const int q = (int)a / (int)m;
    return ((int)a - q * (int)m != 0 && a < 0) ? q - 1 : q;
  }
  const long long q = a / m;
  return (a % m != 0 && a < 0) ? q - 1 : q;
}

// q = a / b, r = a % b for a >= 0, b > 0: 32-bit when both fit (64-bit division is a long
// subroutine on the GPU, and the row decode sits on each tile's critical path).
PAD_HD void pad_divmod(long long a, long long b, long long& q, long long& r) {
  if (((unsigned long long)a | (unsigned long long)b) < 0x80000000ULL) {
    const unsigned q32 = (unsigned)a / (unsigned)b;
    q = q32;
    r = a - (long long)q32 * b;
  } else {
    q = a / b;
    r = a - q * b;
  }
}

PAD_HD long long pad_period(long long n, int fold) {
  return fold == FOLD_WRAP ? n : fold == FOLD_REFLECT ? (n > 1 ? 2 * n - 2 : 1) : 2 * n;
}

PAD_HD long long pad_fold(long long q, long long n, long long P, int fold) {  // q in [0, P)
  return q < n ? q : (fold == FOLD_REFLECT ? P - q : P - 1 - q);
}

// Source offset (or constant index) of output row `row`: outer coordinates from the last axis down.
template <int MODE>
PAD_HD PadRow pad_decode_row(const PadParams& p, long long row) {
  PadRow r;
  r.src = 0;
  r.origin = p.lbefore;
  r.cidx = -1;
  r.cv = 0;
  long long rem = row;
#pragma unroll
  for (int d = PAD_MAXD - 1; d >= 0; --d) {
    if (d >= p.nd) continue;
    long long o;
    pad_divmod(rem, p.out[d], rem, o);
    const long long k = o - p.before[d], n = p.n[d];
    if (MODE == PAD_CONSTANT) {
      if (k < 0 || k >= n) {
        if (r.cidx < 0) {  // the highest padded axis wins
          r.cidx = 2 * d + (k >= n ? 1 : 0);
          r.cv = k >= n ? p.cval[2 * d + 1] : p.cval[2 * d];
        }
      } else {
        r.src += k * p.stride[d];
      }
    } else if (MODE == PAD_EDGE) {
      r.src += (k < 0 ? 0 : k >= n ? n - 1 : k) * p.stride[d];
    } else {
      const int fold = MODE == PAD_BRICK ? FOLD_WRAP : p.fold;
      const long long P = pad_period(n, fold);
      r.src += pad_fold(pad_pmod(k, P), n, P, fold) * p.stride[d];
      if (MODE == PAD_BRICK && d == p.nd - 1)
        r.origin = pad_pmod(p.lbefore + p.stagger * pad_floordiv(k, n), p.ln);
    }
  }
  return r;
}

PAD_HD int pad_pmod32(int a, int m) {  // m > 0; result in [0, m)
  const int r = a % m;
  return r < 0 ? r + m : r;
}

// Column-level math is 32-bit (the host keeps wtot < 2^31); row offsets and strides are 64-bit.
// One element of a row: column c in [0, wtot).
template <int MODE, typename T>
PAD_HD T pad_value(const PadParams& p, const PadRow& r, const T* x, int c) {
  const int blk = (int)p.blk, ln = (int)p.ln;
  const int w = blk == 1 ? c : c / blk, b = c - w * blk;
  const int k = w - (int)r.origin;
  const T* xr = x + r.src + b;
  if (MODE == PAD_CONSTANT) {
    if (k < 0) return (T)p.cval[2 * PAD_MAXD];
    if (k >= ln) return (T)p.cval[2 * PAD_MAXD + 1];
    if (r.cidx >= 0) return (T)r.cv;
    return xr[k * p.lstride];
  } else if (MODE == PAD_EDGE) {
    return xr[(k < 0 ? 0 : k >= ln ? ln - 1 : k) * p.lstride];
  } else {
    const int fold = MODE == PAD_BRICK ? FOLD_WRAP : p.fold;
    const int P = (int)pad_period(ln, fold);
    const int q = pad_pmod32(k, P);
    return xr[(q < ln ? q : fold == FOLD_REFLECT ? P - q : P - 1 - q) * p.lstride];
  }
}

// The 16 bytes of output starting at column col0 of a row (col0 may be negative for a row that
// starts mid-chunk; columns outside [0, wtot) are left unset). Interior chunks are one 16-byte load
// when x is aligned alike; others walk the index map element by element (one modulo per chunk).
template <int MODE, typename T>
PAD_HD void pad_load_chunk(const PadParams& p, const PadRow& r, const T* x, int col0, PadPack<T>& out) {
  constexpr int V = 16 / sizeof(T);
  const int blk = (int)p.blk, ln = (int)p.ln, wtot = (int)p.wtot;
  if (MODE != PAD_BRICK) {
    const int lo = (int)p.lbefore * blk, hi = lo + ln * blk;
    if (MODE == PAD_CONSTANT && col0 >= 0 && col0 + V <= wtot && (col0 + V <= lo || col0 >= hi)) {
      const T v = col0 + V <= lo ? (T)p.cval[2 * PAD_MAXD] : (T)p.cval[2 * PAD_MAXD + 1];  // wholly in a pad
#pragma unroll
      for (int e = 0; e < V; ++e) out.v[e] = v;
      return;
    }
    if (col0 >= lo && col0 + V <= hi) {
      if (MODE == PAD_CONSTANT && r.cidx >= 0) {
        const T v = (T)r.cv;
#pragma unroll
        for (int e = 0; e < V; ++e) out.v[e] = v;
        return;
      }
      if (p.contig) {
        const T* s = x + r.src + (col0 - lo);
        if ((reinterpret_cast<unsigned long long>(s) & 15) == 0) {
          out = *reinterpret_cast<const PadPack<T>*>(s);
          return;
        }
      }
    }
  }
  const int c0 = col0 < 0 ? 0 : col0;
  int w = blk == 1 ? c0 : c0 / blk, b = c0 - w * blk;
  int k = w - (int)r.origin;
  const int fold = MODE == PAD_BRICK ? FOLD_WRAP : p.fold;
  int P = 1, q = 0;
  if (MODE == PAD_PERIODIC || MODE == PAD_BRICK) {
    P = (int)pad_period(ln, fold);
    q = pad_pmod32(k, P);
  }
  const T* xr = x + r.src;
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const int c = col0 + e;
    if (c < 0 || c >= wtot) continue;
    T v;
    if (MODE == PAD_CONSTANT) {
      v = k < 0 ? (T)p.cval[2 * PAD_MAXD]
          : k >= ln ? (T)p.cval[2 * PAD_MAXD + 1]
          : r.cidx >= 0 ? (T)r.cv
                        : xr[k * p.lstride + b];
    } else if (MODE == PAD_EDGE) {
      v = xr[(k < 0 ? 0 : k >= ln ? ln - 1 : k) * p.lstride + b];
    } else {
      v = xr[(q < ln ? q : fold == FOLD_REFLECT ? P - q : P - 1 - q) * p.lstride + b];
    }
    out.v[e] = v;
    if (++b == blk) {
      b = 0;
      ++k;
      if (++q == P) q = 0;
    }
  }
}

template <typename T>
PAD_HD void pad_store_chunk(T* y, long long row_start, int col0, int wtot, const PadPack<T>& v) {
  constexpr int V = 16 / sizeof(T);
  if (col0 >= 0 && col0 + V <= wtot) {
    *reinterpret_cast<PadPack<T>*>(y + row_start + col0) = v;
    return;
  }
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const int c = col0 + e;
    if (c >= 0 && c < wtot) y[row_start + c] = v.v[e];
  }
}

// Column of the first element of chunk `j` of tile segment `seg` of a row starting at element E:
// chunks are 16-byte aligned in y (y itself is 16-byte aligned).
template <typename T>
PAD_HD int pad_chunk_col(long long E, int seg, int tile_chunks, int j) {
  constexpr int V = 16 / (int)sizeof(T);
  return -(int)(E & (V - 1)) + (seg * tile_chunks + j) * V;
}

// One 16-byte chunk of the flat output (pad_flat): element by element (scalar stores), the row
// decoded when it changes.
template <int MODE, typename T>
PAD_HD void pad_flat_chunk(const PadParams& p, const T* x, T* y, long long g, long long& cur_row, PadRow& r) {
  constexpr int V = 16 / sizeof(T);
  const long long total = p.rows * p.wtot, G = g * V;
  long long row = G / p.wtot;
  int c = (int)(G - row * p.wtot);
#pragma unroll 1
  for (int e = 0; e < V && G + e < total; ++e) {
    if (row != cur_row) {
      r = pad_decode_row<MODE>(p, row);
      cur_row = row;
    }
    y[G + e] = pad_value<MODE, T>(p, r, x, c);
    if (++c == p.wtot) {
      c = 0;
      ++row;
    }
  }
}

// ---- Backward: the gradient of one padded axis, gathered. g is a C-contiguous (A, outk, C) array,
// r the (A, n, C) result: r[a, i, c] = sum of g[a, o, c] over the output coordinates o whose source
// index is i, in increasing o per residue class (a fixed order: deterministic).
enum { FOLD_EDGE_AXIS = 0, FOLD_PERIODIC_AXIS = 1, FOLD_BRICK_AXIS = 2 };

PAD_HD long long pad_first(long long v, long long P) {  // the smallest o >= 0 with o = v (mod P)
  return (v >= 0 && v < P) ? v : pad_pmod(v, P);
}

template <int FMODE, typename Tin, typename A>
PAD_HD A pad_gather_one(const Tin* g, long long a, long long i, long long c, long long outk, long long n,
                        long long C, long long before, int fold, long long brows, long long bp0,
                        long long bth, long long stagger) {
  const Tin* base = g + a * outk * C + c;
  A acc = A(0);
  if (FMODE == FOLD_EDGE_AXIS) {
    const long long lo = i == 0 ? 0 : before + i, hi = i == n - 1 ? outk : before + i + 1;
    for (long long o = lo; o < hi; ++o) acc += pad_cast<A>(base[o * C]);
    return acc;
  }
  long long origin = before;
  if (FMODE == FOLD_BRICK_AXIS) {
    origin = before + stagger * pad_floordiv(a % brows - bp0, bth);
    fold = FOLD_WRAP;
  }
  const long long P = pad_period(n, fold);
  for (long long o = pad_first(origin + i, P); o < outk; o += P) acc += pad_cast<A>(base[o * C]);
  if (fold != FOLD_WRAP) {
    const long long i2 = pad_first(fold == FOLD_REFLECT ? P - i : P - 1 - i, P);
    if (i2 != i)
      for (long long o = pad_first(origin + i2, P); o < outk; o += P) acc += pad_cast<A>(base[o * C]);
  }
  return acc;
}

// The output coordinates of one axis that fold onto index i: `count` runs o0, o0 + step, ... < end (the order
// pad_gather_one sums them in). Brick columns excepted (their origin moves with the row band).
struct PadRuns {
  long long o0[2], step, end;
  int count;
};

template <int FMODE>
PAD_HD PadRuns pad_runs(long long i, long long n, long long outk, long long before, int fold) {
  PadRuns r;
  r.count = 1;
  r.o0[1] = outk;
  if (FMODE == FOLD_EDGE_AXIS) {
    r.o0[0] = i == 0 ? 0 : before + i;
    r.end = i == n - 1 ? outk : before + i + 1;
    r.step = 1;
    return r;
  }
  const long long P = pad_period(n, fold);
  r.o0[0] = pad_first(before + i, P);
  r.step = P;
  r.end = outk;
  if (fold != FOLD_WRAP) {
    const long long i2 = pad_first(fold == FOLD_REFLECT ? P - i : P - 1 - i, P);
    if (i2 != i) {
      r.o0[1] = pad_first(before + i2, P);
      r.count = 2;
    }
  }
  return r;
}

// One element of the last two axes' gather-sum: per source row (rows' runs in order) a partial over the source
// columns, the partials added in row order: the sums of two pad_gather launches (columns, then rows), exactly.
template <typename Tin, typename A>
PAD_HD A pad_gather_two_one(const Tin* base, long long outw, const PadRuns& rows, const PadRuns& cols) {
  A acc = A(0);
#pragma unroll
  for (int k = 0; k < 2; ++k) {  // (constant indices into the runs: they stay in registers)
    if (k == rows.count) break;
    for (long long oh = rows.o0[k]; oh < rows.end; oh += rows.step) {
      A part = A(0);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        if (m == cols.count) break;
        for (long long ow = cols.o0[m]; ow < cols.end; ow += cols.step) part += pad_cast<A>(base[oh * outw + ow]);
      }
      acc += part;
    }
  }
  return acc;
}

// ---- Rows of >= 32 chunks, a warp per unit (pad_rows, the default): unit t is segment t % tpr of
// row t / tpr, `tile_chunks` chunks long. Every lane decodes the row itself (same values on all
// lanes: no shared memory, no barrier), then walks the unit's chunks PAD_BATCH at a time per lane,
// loads first, stores after, so a warp keeps up to 32 * PAD_BATCH * 16 bytes in flight.
template <typename T> struct PadBatch { static constexpr int value = sizeof(T) >= 4 ? 4 : (int)sizeof(T); };

template <int MODE, typename T>
PAD_HD void pad_rows_unit(const PadParams& p, const T* x, T* y, long long t, int lane) {
  constexpr int B = PadBatch<T>::value;
  long long row, seg;
  pad_divmod(t, p.tpr, row, seg);
  const PadRow r = pad_decode_row<MODE>(p, row);
  const long long E = row * p.wtot;
  const int w32 = (int)p.wtot, S = p.tile_chunks;
  for (int j0 = 0; j0 < S; j0 += 32 * B) {
    PadPack<T> v[B];
    int col[B];
#pragma unroll
    for (int u = 0; u < B; ++u) {
      const int j = j0 + u * 32 + lane;
      col[u] = j < S ? pad_chunk_col<T>(E, (int)seg, S, j) : w32;
      if (col[u] < w32) pad_load_chunk<MODE, T>(p, r, x, col[u], v[u]);
    }
#pragma unroll
    for (int u = 0; u < B; ++u)
      if (col[u] < w32) pad_store_chunk<T>(y, E, col[u], w32, v[u]);
  }
}

// ---- Periodic rows (pad_periodic: brick, and wrap of a short last axis; blk == 1): the row's values
// repeat every ln / gcd(ln, V) chunks, and the block's thread count is a multiple of that period, so
// each thread computes its 16 bytes once per unit and stores them at every chunk it owns: the loop
// is stores only. Unit t: segment t % tpr (tile_chunks chunks, a multiple of the block) of row t / tpr.
struct PadPeriodicUnit {
  long long E, src;  // element offset of the row in y; of its source row in x
  int seg, end;      // segment, and its chunks (the row's last segment may be shorter)
  int origin;        // output column of source column 0, in [0, ln)
};

// Unit t's row and segment (one thread decodes it for the block).
PAD_HD PadPeriodicUnit pad_periodic_decode(const PadParams& p, long long t, int elems_per_chunk) {
  const int V = elems_per_chunk;
  PadPeriodicUnit u;
  long long row, seg;
  pad_divmod(t, p.tpr, row, seg);
  const PadRow r = pad_decode_row<PAD_BRICK>(p, row);
  u.E = row * p.wtot;
  u.src = r.src;
  u.origin = (int)pad_pmod(r.origin, p.ln);
  u.seg = (int)seg;
  const int nch = (int)(((u.E & (V - 1)) + p.wtot + V - 1) / V), rest = nch - u.seg * p.tile_chunks;
  u.end = rest < p.tile_chunks ? rest : p.tile_chunks;
  return u;
}

// This thread's 16 bytes of unit u (V scalar loads from the tile row; the same at all its chunks).
template <typename T>
PAD_HD void pad_periodic_pack(const PadParams& p, const T* x, const PadPeriodicUnit& u, int tid, PadPack<T>& v) {
  constexpr int V = 16 / sizeof(T);
  const int ln = (int)p.ln;
  int q = pad_pmod32(pad_chunk_col<T>(u.E, u.seg, p.tile_chunks, tid) - u.origin, ln);
#pragma unroll
  for (int e = 0; e < V; ++e) {
    v.v[e] = x[u.src + q * p.lstride];
    if (++q == ln) q = 0;
  }
}

template <typename T>
PAD_HD void pad_periodic_store(const PadParams& p, T* y, const PadPeriodicUnit& u, int tid, int threads,
                               const PadPack<T>& v) {
#pragma unroll 4
  for (int j = tid; j < u.end; j += threads)
    pad_store_chunk<T>(y, u.E, pad_chunk_col<T>(u.E, u.seg, p.tile_chunks, j), (int)p.wtot, v);
}

#ifndef PAD_HOST
// Every forward kernel takes the same arguments (ops/pad.py Geometry.args) and rebuilds PadParams. `unroll` is
// read by none of them (the retired block-tile paths used it); dropping it would move the later parameters and
// with them the kernels' code, measured as it is.
#define PAD_AXIS_ARGS(i) long long o##i, long long n##i, long long b##i, long long s##i
#define PAD_AXIS_SET(i) p.out[i] = o##i; p.n[i] = n##i; p.before[i] = b##i; p.stride[i] = s##i;
#define PAD_FORWARD_ARGS                                                                               \
  const T* __restrict__ x, T* __restrict__ y, long long rows, long long wtot, long long tiles,         \
      long long tpr, int tile_chunks, int unroll, int nd, int fold, PAD_AXIS_ARGS(0), PAD_AXIS_ARGS(1), \
      PAD_AXIS_ARGS(2), PAD_AXIS_ARGS(3), PAD_AXIS_ARGS(4), PAD_AXIS_ARGS(5), long long lout,          \
      long long ln, long long lbefore, long long lstride, long long blk, long long stagger, int contig, \
      unsigned long long c0, unsigned long long c1, unsigned long long c2, unsigned long long c3,       \
      unsigned long long c4, unsigned long long c5, unsigned long long c6, unsigned long long c7,       \
      unsigned long long c8, unsigned long long c9, unsigned long long c10, unsigned long long c11,     \
      unsigned long long c12, unsigned long long c13
#define PAD_FORWARD_PARAMS(p)                                                                          \
  PadParams p;                                                                                         \
  p.rows = rows; p.wtot = wtot; p.tiles = tiles; p.tpr = tpr; p.tile_chunks = tile_chunks;            \
  p.unroll = unroll; p.nd = nd; p.fold = fold;                                                         \
  PAD_AXIS_SET(0) PAD_AXIS_SET(1) PAD_AXIS_SET(2) PAD_AXIS_SET(3) PAD_AXIS_SET(4) PAD_AXIS_SET(5)      \
  p.lout = lout; p.ln = ln; p.lbefore = lbefore; p.lstride = lstride; p.blk = blk;                     \
  p.stagger = stagger; p.contig = contig;                                                              \
  p.cval[0] = c0; p.cval[1] = c1; p.cval[2] = c2; p.cval[3] = c3; p.cval[4] = c4; p.cval[5] = c5;      \
  p.cval[6] = c6; p.cval[7] = c7; p.cval[8] = c8; p.cval[9] = c9; p.cval[10] = c10;                    \
  p.cval[11] = c11; p.cval[12] = c12; p.cval[13] = c13;

// Narrow rows (fewer chunks than ops/pad.py's TUNING.narrow_chunks; any row on the ladder's "flat" rung): the
// flat output in 16-byte chunks, one a thread a step, element by element. Launch: any 1-D grid of 256-thread blocks, grid-stride (64-bit); tile_chunks 0;
// y 16-byte aligned; x any alignment and strides.
template <int MODE, typename T>
__global__ void __launch_bounds__(256, sizeof(T) >= 4 ? 4 : 3) pad_flat(PAD_FORWARD_ARGS) {
  PAD_FORWARD_PARAMS(p)
  const long long nchunks = (rows * wtot + 16 / (long long)sizeof(T) - 1) / (16 / (long long)sizeof(T));
  long long cur_row = -1;
  PadRow r = {0, 0, -1, 0};
  for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < nchunks; g += (long long)gridDim.x * blockDim.x)
    pad_flat_chunk<MODE, T>(p, x, y, g, cur_row, r);
}

// Rows of >= 32 chunks that are not periodic (pad_rows_unit above). Launch: 256-thread blocks, a grid of waves
// from the occupancy calculator, grid-stride over tiles = rows * tpr units of one warp; wtot < 2^31 - 64.
template <int MODE, typename T>
__global__ void __launch_bounds__(256, 4) pad_rows(PAD_FORWARD_ARGS) {
  PAD_FORWARD_PARAMS(p)
  const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
  for (long long t = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; t < tiles; t += warps)
    pad_rows_unit<MODE, T>(p, x, y, t, threadIdx.x & 31);
}

// Brick and short-period wrap rows, blk == 1 (pad_periodic_* above). Launch: blockDim a multiple of the row's
// period in chunks (<= 256), tile_chunks a multiple of blockDim; grid-stride over the units. Thread 0
// decodes the next unit into shared memory while the block stores the current one (the decode is
// the costly part per thread: done by every thread it took more issue slots than the stores).
template <typename T>
__global__ void __launch_bounds__(256, 4) pad_periodic(PAD_FORWARD_ARGS) {
  PAD_FORWARD_PARAMS(p)
  constexpr int V = 16 / sizeof(T);
  __shared__ PadPeriodicUnit info[2];
  long long t = blockIdx.x;
  if (threadIdx.x == 0 && t < tiles) info[0] = pad_periodic_decode(p, t, V);
  __syncthreads();
  for (int buf = 0; t < tiles; t += gridDim.x, buf ^= 1) {
    const PadPeriodicUnit u = info[buf];
    PadPack<T> v;
    pad_periodic_pack<T>(p, x, u, threadIdx.x, v);
    if (threadIdx.x == 0 && t + gridDim.x < tiles) info[buf ^ 1] = pad_periodic_decode(p, t + gridDim.x, V);
    pad_periodic_store<T>(p, y, u, threadIdx.x, blockDim.x, v);
    __syncthreads();
  }
}

// Backward of one axis: r (A, n, C) <- gather-sum of g (A, outk, C), both C-contiguous; FMODE a FOLD_*_AXIS. The
// result is walked as rows x columns: C > 1: rows (a, i), columns c (the residues of i are row-uniform);
// C == 1: rows a, columns i. Launch: grid (ceil(cols / 256) capped, <= 65535 rows), block 256; both
// dimensions grid-stride (64-bit). Accumulates in float (double for double), in a fixed order.
template <int FMODE, typename Tin, typename Tout>
__global__ void __launch_bounds__(256, 4) pad_gather(const Tin* __restrict__ g, Tout* __restrict__ r, long long A,
                                                  long long outk, long long n, long long C, long long before,
                                                  int fold, long long brows, long long bp0, long long bth,
                                                  long long stagger) {
  typedef typename AccOf<Tin>::type Acc;
  const bool by_i = C == 1;
  const long long R = by_i ? A : A * n, Q = by_i ? n : C;
  for (long long row = blockIdx.y; row < R; row += gridDim.y) {
    const long long a = by_i ? row : row / n, ir = by_i ? 0 : row - a * n;
    for (long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x; col < Q; col += (long long)gridDim.x * blockDim.x) {
      const Acc v = pad_gather_one<FMODE, Tin, Acc>(g, a, by_i ? col : ir, by_i ? 0 : col, outk, n, C, before, fold,
                                                    brows, bp0, bth, stagger);
      r[row * Q + col] = cast<Tout>(v);
    }
  }
}
// Backward of the last two axes in one pass: r (A, nh, nw) <- the gather-sum of g (A, outh, outw), both C-contiguous
// (FMODE: FOLD_EDGE_AXIS or FOLD_PERIODIC_AXIS), the same sums as two pad_gather launches without the intermediate.
// The work is quads of 4 columns of a row, numbered row by row; a thread takes PAD_GATHER_COLS quads a grid apart
// and loads them all before it stores. Rows [ilo, ihi) and columns [jlo, jhi) (the host's interior_span) have one
// source each, at before + index: such a quad, aligned, is one vector load; other elements sum their runs after the
// quads are stored. Launch: 1-D grid (capped; grid-strides), block 256; any size (64-bit).
constexpr int PAD_GATHER_COLS = 4;

template <int FMODE, typename Tin, typename Tout>
__global__ void __launch_bounds__(256, 2) pad_gather2(const Tin* __restrict__ g, Tout* __restrict__ r, long long A,
                                                   long long outh, long long nh, long long outw, long long nw,
                                                   long long before_h, long long before_w, int fold, long long ilo,
                                                   long long ihi, long long jlo, long long jhi) {
  typedef typename AccOf<Tin>::type Acc;
  typedef Pack<Tin, 4> In4;
  typedef Pack<Tout, 4> Out4;
  const long long quads_per_row = (nw + 3) / 4, quads = A * nh * quads_per_row;
  const long long threads = (long long)gridDim.x * blockDim.x;
  for (long long t0 = (long long)blockIdx.x * blockDim.x + threadIdx.x; t0 < quads; t0 += threads * PAD_GATHER_COLS) {
    Acc v[PAD_GATHER_COLS][4];
    Tout* dst[PAD_GATHER_COLS];
    unsigned loaded = 0;  // bit u: quad u was one vector load
#pragma unroll
    for (int u = 0; u < PAD_GATHER_COLS; ++u) {
      const long long t = t0 + u * threads;
      long long row, jq, a, i;
      pad_divmod(t, quads_per_row, row, jq);
      pad_divmod(row, nh, a, i);
      const long long j0 = 4 * jq;
      const Tin* src = g + (a * outh + before_h + i) * outw + before_w + j0;
      dst[u] = r + row * nw + j0;
      if (t < quads && i >= ilo && i < ihi && j0 >= jlo && j0 + 4 <= jhi &&
          (reinterpret_cast<unsigned long long>(src) & (sizeof(In4) - 1)) == 0 &&
          (reinterpret_cast<unsigned long long>(dst[u]) & (sizeof(Out4) - 1)) == 0) {
        loaded |= 1u << u;
        const In4 x = *reinterpret_cast<const In4*>(src);
#pragma unroll
        for (int e = 0; e < 4; ++e) v[u][e] = pad_cast<Acc>(x.v[e]);
      }
    }
#pragma unroll
    for (int u = 0; u < PAD_GATHER_COLS; ++u) {
      if (!(loaded >> u & 1)) continue;
      Out4 y;
#pragma unroll
      for (int e = 0; e < 4; ++e) y.v[e] = cast<Tout>(v[u][e]);
      *reinterpret_cast<Out4*>(dst[u]) = y;
    }
    // the borders (and unaligned quads): each element's runs summed, once the quads' registers are free
#pragma unroll 1
    for (int u = 0; u < PAD_GATHER_COLS; ++u) {
      const long long t = t0 + u * threads;
      if ((loaded >> u & 1) || t >= quads) continue;
      long long row, jq, a, i;
      pad_divmod(t, quads_per_row, row, jq);
      pad_divmod(row, nh, a, i);
      const PadRuns rows = pad_runs<FMODE>(i, nh, outh, before_h, fold);
      for (long long j = 4 * jq; j < 4 * jq + 4 && j < nw; ++j)
        r[row * nw + j] = cast<Tout>(pad_gather_two_one<Tin, Acc>(g + a * outh * outw, outw, rows,
                                                                  pad_runs<FMODE>(j, nw, outw, before_w, fold)));
    }
  }
}
#endif
