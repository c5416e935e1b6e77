// Padding in one kernel: NumPy's constant / edge / reflect / symmetric / wrap modes and brick-wall
// tiling, plus the backward gather-sum (deterministic, no atomics); and numpy.pad's computing modes
// (linear_ramp, maximum, minimum, mean, median, reflect_type='odd') as per-axis passes over the output.
//
// The copying kernels write every output element once. The host (ops/pad.py) merges axes so the
// kernel sees the output as `rows` rows of `wtot` elements: up to PAD_MAXD outer axes (each with its
// own index map), one last padded axis, and an optional inner block of `blk` unpadded elements
// contiguous in x (channels-last images: the C axis rides along inside the W axis). Per axis, the
// source index of output coordinate o (k = o - before) is
//   constant: k if 0 <= k < n, else the pad value of the highest padded axis (NumPy's corner rule)
//   edge:     clamp(k, 0, n - 1)
//   periodic: q = k mod P, then q < n ? q : R - q          (P, R below: exactly numpy.pad, wide
//             wrap P = n; reflect P = 2n - 2 (1 if n == 1), R = P; symmetric P = 2n, R = P - 1)
//   brick:    wrap on every axis, and the last axis is shifted right by stagger * band, where
//             band = floor(k_row / n_row) counts tile bands on the second-to-last axis.
// Padding only copies, so the kernels move raw bits: T is an unsigned type of the element's size
// (PadRaw16 for complex128).
// Kernels: pad_flat (narrow rows, element by element), pad_rows (a warp a row segment), pad_periodic
// (brick and short wrap rows: stores only), pad_gather (the backward, one padded axis a launch),
// pad_gather2 (the backward of the last two axes at once), and the per-axis passes pad_axis_fill /
// pad_axis_odd / pad_axis_stat / pad_ramp_flags + pad_axis_ramp.
#ifdef PAD_HOST
// Compiled as plain C++ by the CPU test harnesses (tests/test_pad.py) to check this exact logic.
#include <cmath>
#include <cstring>
#define PAD_HD inline
#define PAD_CONSTEXPR constexpr
template <typename To, typename From> inline To pad_cast(From v) { return (To)v; }
template <typename T, int N> struct alignas(sizeof(T) * N) Pack { T v[N]; };
template <typename T> struct AccOf { typedef T type; };
#else
#include "common/types.cuh"
#define PAD_HD __device__ __forceinline__
#define PAD_CONSTEXPR __host__ __device__ constexpr
template <typename To, typename From> __device__ __forceinline__ To pad_cast(From v) { return cast<To>(v); }
#endif

constexpr int PAD_MAXD = 6;    // outer axes after merging (ops/pad.py splits larger problems)
// The kernels' MODE (their first template argument; name expressions spell it, e.g. pad_rows<PAD_EDGE, ...>).
enum { PAD_CONSTANT = 0, PAD_EDGE = 1, PAD_PERIODIC = 2, PAD_BRICK = 3 };
enum { FOLD_WRAP = 0, FOLD_REFLECT = 1, FOLD_SYMMETRIC = 2 };

template <typename T> struct alignas(16) PadPack { T v[16 / sizeof(T)]; };

// A 16-byte element (complex128) for the copying kernels. A constant converts to its first 8 bytes (the real
// part), so ops/pad.py gives these kernels complex128 constants with a zero imaginary part only.
struct alignas(8) PadRaw16 {
  unsigned long long lo, hi;
  PadRaw16() = default;
  PAD_HD PadRaw16(unsigned long long v) : lo(v), hi(0) {}
};

struct PadParams {
  long long rows, wtot;          // output rows and elements per row (= lout * blk)
  long long tiles, tpr;          // units in all and per row (pad_rows, pad_periodic)
  int tile_chunks, group;        // 16-byte chunks per unit (0: pad_flat); pad_rows: lanes a unit (power of 2)
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

PAD_HD int pad_clamp0(int a) { return a < 0 ? 0 : a; }

PAD_HD int pad_pmod32(int a, int m) {  // m > 0; result in [0, m)
  if (a >= -m && a - m < m) return a < 0 ? a + m : a >= m ? a - m : a;  // within a period of [0, m): no division
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

// 16 bytes as four words: pad_rows' batched chunks (a PadPack of bytes kept byte by byte would take 16 registers).
struct alignas(16) PadWords { unsigned w[4]; };

// v repeated over 16 bytes.
template <typename T>
PAD_HD PadWords pad_splat(T v) {
  PadWords o;
  if constexpr (sizeof(T) == 16) {
    o.w[0] = (unsigned)v.lo, o.w[1] = (unsigned)(v.lo >> 32), o.w[2] = (unsigned)v.hi, o.w[3] = (unsigned)(v.hi >> 32);
  } else if constexpr (sizeof(T) == 8) {
    o.w[0] = o.w[2] = (unsigned)v, o.w[1] = o.w[3] = (unsigned)(v >> 32);
  } else {
    const unsigned w = sizeof(T) == 1 ? (unsigned)v * 0x01010101u : sizeof(T) == 2 ? (unsigned)v * 0x00010001u : (unsigned)v;
    o.w[0] = o.w[1] = o.w[2] = o.w[3] = w;
  }
  return o;
}

#ifdef PAD_HOST
PAD_HD PadWords pad_load_words(const void* a) { PadWords o; memcpy(&o, a, 16); return o; }
PAD_HD void pad_store_words(void* dst, const PadWords& v) { memcpy(dst, &v, 16); }
#else
PAD_HD PadWords pad_load_words(const void* a) { return *reinterpret_cast<const PadWords*>(a); }
PAD_HD void pad_store_words(void* dst, const PadWords& v) { *reinterpret_cast<PadWords*>(dst) = v; }
#endif

// The 16 bytes of output starting at column col0 of a row, element by element through the index map (one modulo
// a chunk). col0 may be negative for a row that starts mid-chunk; columns outside [0, wtot) are left unset.
// DIRECT: stored to yrow[column] 8 elements at a time (loads of a group first: 1- and 2-byte elements, whose 16
// loads in flight took 16 registers besides pad_rows' batch); else all into out.
template <int MODE, typename T, bool DIRECT = false>
PAD_HD void pad_load_chunk(const PadParams& p, const PadRow& r, const T* x, int col0, PadPack<T>& out,
                           T* yrow = nullptr) {
  constexpr int V = 16 / sizeof(T), U = DIRECT && V > 4 ? 4 : V, GROUPS_UNROLL = DIRECT ? 1 : V;
  const int blk = (int)p.blk, ln = (int)p.ln, wtot = (int)p.wtot;
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
#pragma unroll GROUPS_UNROLL
  for (int e0 = 0; e0 < V; e0 += U) {
    T v[U];
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = col0 + e0 + i;
      if (c < 0 || c >= wtot) continue;
      if (MODE == PAD_CONSTANT) {
        v[i] = k < 0 ? (T)p.cval[2 * PAD_MAXD]
               : k >= ln ? (T)p.cval[2 * PAD_MAXD + 1]
               : r.cidx >= 0 ? (T)r.cv
                             : xr[k * p.lstride + b];
      } else if (MODE == PAD_EDGE) {
        v[i] = xr[(k < 0 ? 0 : k >= ln ? ln - 1 : k) * p.lstride + b];
      } else {
        v[i] = xr[(q < ln ? q : fold == FOLD_REFLECT ? P - q : P - 1 - q) * p.lstride + b];
      }
      if (++b == blk) {
        b = 0;
        ++k;
        if (++q == P) q = 0;
      }
    }
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int c = col0 + e0 + i;
      if (c < 0 || c >= wtot) continue;
      if constexpr (DIRECT) yrow[c] = v[i];
      else out.v[e0 + i] = v[i];
    }
  }
}

#ifdef PAD_HOST
PAD_HD unsigned pad_byte_perm(unsigned a, unsigned b, unsigned sel) {  // CUDA's __byte_perm (selectors 0-7)
  const unsigned long long v = (unsigned long long)b << 32 | a;
  unsigned out = 0;
  for (int n = 0; n < 4; ++n) out |= (unsigned)(v >> (8 * ((sel >> (4 * n)) & 7)) & 0xff) << (8 * n);
  return out;
}
PAD_HD unsigned pad_word(const unsigned char* a) { unsigned w; memcpy(&w, a, 4); return w; }
PAD_HD int pad_lowest_bit(unsigned m) { return __builtin_ctz(m); }  // m != 0
#else
PAD_HD unsigned pad_byte_perm(unsigned a, unsigned b, unsigned sel) { return __byte_perm(a, b, sel); }
PAD_HD unsigned pad_word(const unsigned char* a) { return *reinterpret_cast<const unsigned*>(a); }
PAD_HD int pad_lowest_bit(unsigned m) { return __ffs(m) - 1; }
#endif

// A whole chunk of 1- or 2-byte elements (blk 1, lstride 1) whose sources are one run of x (ascending, reversed,
// or one element repeated): aligned word loads and byte permutes instead of 8-16 scalar loads, stored at dst
// (16-byte aligned). False, nothing done, for other chunks (a fold or a pad edge inside, partial, strided).
template <int MODE, typename T>
PAD_HD bool pad_run_chunk(const PadParams& p, const PadRow& r, const T* x, T* dst, int col0) {
  constexpr int V = 16 / sizeof(T);
  if constexpr (sizeof(T) > 2) {
    return false;
  } else {
    if (p.blk != 1 || p.lstride != 1 || col0 < 0 || col0 + V > (int)p.wtot) return false;
    const int ln = (int)p.ln, k = col0 - (int)r.origin;
    int s, dir;  // sources s, s + dir, ..., s + (V - 1) dir (before r.src)
    if (MODE == PAD_CONSTANT) {
      if (r.cidx >= 0 || k < 0 || k > ln - V) return false;
      s = k, dir = 1;
    } else if (MODE == PAD_EDGE) {
      if (k + V <= 1) s = 0, dir = 0;
      else if (k >= ln - 1) s = ln - 1, dir = 0;
      else if (k >= 0 && k <= ln - V) s = k, dir = 1;
      else return false;
    } else {
      const int fold = MODE == PAD_BRICK ? FOLD_WRAP : p.fold;
      const int P = (int)pad_period(ln, fold), q = pad_pmod32(k, P);
      if (q <= ln - V) s = q, dir = 1;
      else if (fold != FOLD_WRAP && q >= ln && q + V <= P) s = fold == FOLD_REFLECT ? P - q : P - 1 - q, dir = -1;
      else return false;  // folds inside the chunk
    }
    const T* xr = x + r.src;
    if (dir == 0) {
      const unsigned e = (unsigned)xr[s], w = sizeof(T) == 1 ? e * 0x01010101u : e * 0x00010001u;
      pad_store_words(dst, PadWords{{w, w, w, w}});
      return true;
    }
    // the run's 16 bytes from the words w[0..4] around them: byte sh + i of the words is byte i of the run
    const unsigned char* a = reinterpret_cast<const unsigned char*>(xr + (dir > 0 ? s : s - (V - 1)));
    const unsigned sh = (unsigned)(reinterpret_cast<unsigned long long>(a) & 3);
    a -= sh;
    const unsigned w0 = pad_word(a), w1 = pad_word(a + 4), w2 = pad_word(a + 8), w3 = pad_word(a + 12);
    const unsigned w4 = sh ? pad_word(a + 16) : 0u;  // (not past the run's last word)
    if (dir > 0) {
      const unsigned sel = 0x3210u + 0x1111u * sh;
      pad_store_words(dst, PadWords{{pad_byte_perm(w0, w1, sel), pad_byte_perm(w1, w2, sel),
                                     pad_byte_perm(w2, w3, sel), pad_byte_perm(w3, w4, sel)}});
    } else {  // output word i: the run's word 3 - i, its elements reversed
      const unsigned sel = (sizeof(T) == 1 ? 0x0123u : 0x1032u) + 0x1111u * sh;
      pad_store_words(dst, PadWords{{pad_byte_perm(w3, w4, sel), pad_byte_perm(w2, w3, sel),
                                     pad_byte_perm(w1, w2, sel), pad_byte_perm(w0, w1, sel)}});
    }
    return true;
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

// ---- Backward of the last two axes in one pass (pad_gather2): r (A, nh, nw) <- the gather-sum of g (A, outh, outw),
// both C-contiguous (FMODE: FOLD_EDGE_AXIS or FOLD_PERIODIC_AXIS): per source row (rows' runs in order) a partial over
// the source columns, the partials added in row order, the sums of two pad_gather launches.
// Columns [jlo, jhi) (the host's interior_span) have one source each, at before_w + index; rows [ilo, ihi) likewise.
// The work is two sets of items, each numbered row by row: the aligned quads of 4 columns inside the column span
// (quad columns [4 qlo, 4 qhi)), and the other columns one item each. A thread takes PAD_GATHER_QUADS quads a grid
// apart and loads each one's first source row (one vector load when aligned) before it adds anything; then columns,
// one at a time, the first value of each (row run, column run) pair loaded before the sums. Two loops, so that a
// warp runs one kind of item and the code stays small.
constexpr int PAD_GATHER_QUADS = 4;

// The quads of a row: [qlo, qhi) in units of 4 columns (empty: qlo == qhi == 0).
PAD_HD void pad_gather2_quads(long long jlo, long long jhi, long long& qlo, long long& qhi) {
  qlo = (jlo + 3) / 4;
  qhi = jhi / 4;
  if (qhi <= qlo) qlo = qhi = 0;
}

// q = a / b, r = a % b for 0 <= a < 2^51, b >= 1, with inv = 1.0 / b: a double product, then one correction (its
// error is below 1). A few instructions where a 64-bit division is a long subroutine.
PAD_HD void pad_divmod_inv(long long a, long long b, double inv, long long& q, long long& r) {
  q = (long long)((double)a * inv);
  r = a - q * b;
  if (r < 0) {
    --q;
    r += b;
  } else if (r >= b) {
    ++q;
    r -= b;
  }
}

// The launch's sizes: nq quads and nc other columns a row, nrows = A * nh rows; 1.0 / nq, 1.0 / nc, 1.0 / nh.
struct PadGather2 {
  long long qlo, nq, nc, nrows;
  double inv_nq, inv_nc, inv_nh;
};

PAD_HD PadGather2 pad_gather2_sizes(long long A, long long nh, long long nw, long long jlo, long long jhi) {
  PadGather2 s;
  long long qhi;
  pad_gather2_quads(jlo, jhi, s.qlo, qhi);
  s.nq = qhi - s.qlo;
  s.nc = nw - 4 * s.nq;
  s.nrows = A * nh;
  s.inv_nq = s.nq ? 1.0 / (double)s.nq : 0.0;
  s.inv_nc = s.nc ? 1.0 / (double)s.nc : 0.0;
  s.inv_nh = 1.0 / (double)nh;
  return s;
}

// Quad t: its row of r (a, i) and its first column j0.
PAD_HD void pad_gather2_quad_at(const PadGather2& S, long long nh, long long t, long long& row, long long& a,
                                long long& i, long long& j0) {
  long long k;
  pad_divmod_inv(t, S.nq, S.inv_nq, row, k);
  pad_divmod_inv(row, nh, S.inv_nh, a, i);
  j0 = 4 * (S.qlo + k);
}

// One thread's quads t0 + u * threads, u < PAD_GATHER_QUADS (the kernel's first loop; the host harness runs it too).
template <int FMODE, typename Tin, typename Tout>
PAD_HD void pad_gather2_quad_step(const Tin* __restrict__ g, Tout* __restrict__ r, const PadGather2& S, long long outh,
                                  long long nh, long long outw, long long nw, long long before_h, long long before_w,
                                  int fold, long long ilo, long long ihi, long long t0, long long threads) {
  typedef typename AccOf<Tin>::type Acc;
  typedef Pack<Tin, 4> In4;
  typedef Pack<Tout, 4> Out4;
  const long long quads = S.nrows * S.nq;
  Acc v[PAD_GATHER_QUADS][4];  // the quads' sums
#pragma unroll
  for (int u = 0; u < PAD_GATHER_QUADS; ++u) {
    const long long t = t0 + u * threads;
    if (t >= quads) break;
    long long row, a, i, j0;
    pad_gather2_quad_at(S, nh, t, row, a, i, j0);
    const long long oh = i >= ilo && i < ihi ? before_h + i : pad_runs<FMODE>(i, nh, outh, before_h, fold).o0[0];
    const Tin* src = g + (a * outh + oh) * outw + before_w + j0;
    if ((reinterpret_cast<unsigned long long>(src) & (sizeof(In4) - 1)) == 0) {
      const In4 x = *reinterpret_cast<const In4*>(src);
#pragma unroll
      for (int e = 0; e < 4; ++e) v[u][e] = Acc(0) + pad_cast<Acc>(x.v[e]);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) v[u][e] = Acc(0) + pad_cast<Acc>(src[e]);
    }
  }
#pragma unroll
  for (int u = 0; u < PAD_GATHER_QUADS; ++u) {
    const long long t = t0 + u * threads;
    if (t >= quads) break;
    long long row, a, i, j0;
    pad_gather2_quad_at(S, nh, t, row, a, i, j0);
    if (i < ilo || i >= ihi) {  // the row's further sources, in order (the first is in v)
      const PadRuns rows = pad_runs<FMODE>(i, nh, outh, before_h, fold);
      const Tin* src = g + a * outh * outw + before_w + j0;
#pragma unroll
      for (int kr = 0; kr < 2; ++kr) {
        if (kr == rows.count) break;
#pragma unroll 4
        for (long long oh = rows.o0[kr] + (kr == 0 ? rows.step : 0); oh < rows.end; oh += rows.step)
#pragma unroll
          for (int e = 0; e < 4; ++e) v[u][e] += pad_cast<Acc>(src[oh * outw + e]);
      }
    }
    Tout* dst = r + row * nw + j0;
    if ((reinterpret_cast<unsigned long long>(dst) & (sizeof(Out4) - 1)) == 0) {
      Out4 y;
#pragma unroll
      for (int e = 0; e < 4; ++e) y.v[e] = pad_cast<Tout>(v[u][e]);
      *reinterpret_cast<Out4*>(dst) = y;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[e] = pad_cast<Tout>(v[u][e]);
    }
  }
}

// Column item t (the kernel's second loop; the host harness runs it too): every (row, column) source in order, the
// runs' first pairs loaded together, the rest (pads wider than the axis) in the sums.
template <int FMODE, typename Tin, typename Tout>
PAD_HD void pad_gather2_column(const Tin* __restrict__ g, Tout* __restrict__ r, const PadGather2& S, long long outh,
                               long long nh, long long outw, long long nw, long long before_h, long long before_w,
                               int fold, long long t) {
  typedef typename AccOf<Tin>::type Acc;
  long long row, k, a, i;
  pad_divmod_inv(t, S.nc, S.inv_nc, row, k);
  pad_divmod_inv(row, nh, S.inv_nh, a, i);
  const long long j = k < 4 * S.qlo ? k : k + 4 * S.nq;
  const Tin* gin = g + a * outh * outw;
  const PadRuns rows = pad_runs<FMODE>(i, nh, outh, before_h, fold), cols = pad_runs<FMODE>(j, nw, outw, before_w, fold);
  Acc first[2][2];
#pragma unroll
  for (int kr = 0; kr < 2; ++kr)
#pragma unroll
    for (int m = 0; m < 2; ++m)  // (a run may be empty: its first coordinate at or past the end)
      first[kr][m] = kr < rows.count && m < cols.count && rows.o0[kr] < rows.end && cols.o0[m] < cols.end
                         ? pad_cast<Acc>(gin[rows.o0[kr] * outw + cols.o0[m]]) : Acc(0);
  Acc acc = Acc(0);
#pragma unroll
  for (int kr = 0; kr < 2; ++kr) {
    if (kr == rows.count) break;
    for (long long oh = rows.o0[kr]; oh < rows.end; oh += rows.step) {
      Acc part = Acc(0);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        if (m == cols.count) break;
        if (cols.o0[m] >= cols.end) continue;
        part += oh == rows.o0[kr] ? first[kr][m] : pad_cast<Acc>(gin[oh * outw + cols.o0[m]]);
#pragma unroll 4
        for (long long ow = cols.o0[m] + cols.step; ow < cols.end; ow += cols.step) part += pad_cast<Acc>(gin[oh * outw + ow]);
      }
      acc += part;
    }
  }
  r[row * nw + j] = pad_cast<Tout>(acc);
}

#ifndef PAD_HOST
// Launch: 1-D grid (capped; grid-strides over both sets of items), block 256; any size (64-bit). 3 blocks an SM
// (2 for double): the registers of PAD_GATHER_QUADS quads in flight without spills.
template <int FMODE, typename Tin, typename Tout>
__global__ void __launch_bounds__(256, sizeof(Tin) == 8 ? 2 : 3) pad_gather2(const Tin* __restrict__ g, Tout* __restrict__ r,
                                                   long long A, long long outh, long long nh, long long outw,
                                                   long long nw, long long before_h, long long before_w, int fold,
                                                   long long ilo, long long ihi, long long jlo, long long jhi) {
  const PadGather2 S = pad_gather2_sizes(A, nh, nw, jlo, jhi);
  const long long threads = (long long)gridDim.x * blockDim.x, tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (long long t0 = tid; t0 < S.nrows * S.nq; t0 += threads * PAD_GATHER_QUADS)
    pad_gather2_quad_step<FMODE, Tin, Tout>(g, r, S, outh, nh, outw, nw, before_h, before_w, fold, ilo, ihi, t0, threads);
#pragma unroll 1
  for (long long t = tid; t < S.nrows * S.nc; t += threads)
    pad_gather2_column<FMODE, Tin, Tout>(g, r, S, outh, nh, outw, nw, before_h, before_w, fold, t);
}
#endif

// ---- Rows of >= 32 chunks (pad_rows, the default): unit t is segment t % tpr of row t / tpr, `tile_chunks`
// chunks long, taken by a group of p.group lanes: a warp, or 8 lanes for short rows (ops/pad.py), so that a warp's
// row decode and per-step work cover 4 rows. Every lane decodes its row itself (no shared memory, no barrier),
// then walks the unit PadBatch chunks a lane per step: phase 1 (unrolled, one compare a chunk) loads the wholly
// interior chunks when x is aligned like y, so a warp keeps up to 32 * PadBatch * 16 bytes in flight, and stores
// them; phase 2 then does the other chunks one at a time (constant fills, runs of x, element by element), with
// the batch's registers free.
// Batch: 4 for 4- to 16-byte types; 3 for 1- and 2-byte types: 48 registers (5 blocks an SM), and 3 steps of 8 lanes
// for a 72-chunk uint8 row (1024 + 2 * 64); 6 spilled for uint8 (sm_90), and for uint16 (64 registers, one step a
// 144-chunk row) measured no faster: constant / reflect 92.2 / 89.8% of copy against 93.8 / 90.1 (H200).
template <typename T> struct PadBatch { static constexpr int value = sizeof(T) >= 4 ? 4 : 3; };

template <int MODE, typename T>
PAD_HD void pad_rows_unit(const PadParams& p, const T* x, T* y, long long t, int glane) {
  constexpr int B = PadBatch<T>::value, V = 16 / (int)sizeof(T);
  long long row = t, seg = 0;
  if (p.tpr != 1) pad_divmod(t, p.tpr, row, seg);
  const PadRow r = pad_decode_row<MODE>(p, row);
  const long long E = row * p.wtot;
  T* const yr = y + E;            // column c at yr + c
  const T* const xr = x + r.src;  // interior column c (contig) at xr + (c - lo)
  const int w32 = (int)p.wtot, S = p.tile_chunks, G = p.group, blk = (int)p.blk;
  const int lo = (int)p.lbefore * blk, span = (int)p.ln * blk;  // the interior: columns [lo, lo + span)
  const int c0 = (int)seg * S * V - (int)(E & (V - 1));         // column of the unit's chunk 0 (16-byte aligned in y)
  // A chunk by k = c - lo, its first column less lo; ranges of k [a, a + n) are tested as (unsigned)(k - a) < n. In
  // the unit: k < kend. Loaded (phase 1): wholly interior (0 <= k <= span - V) in a row whose interior is contiguous
  // in x and aligned like y (its chunks are V elements apart: aligned alike). Constant fills (phase 2): wholly in
  // the row (0 <= c, c + V <= wtot) and wholly before (k <= -V) or after (k >= span) the interior, and a constant
  // row's wholly interior chunks. The others are built in phase 2 (runs of x, or element by element).
  const int kend = (c0 + S * V < w32 ? c0 + S * V : w32) - lo;
  const int inner = pad_clamp0(span - V + 1 < kend ? span - V + 1 : kend);
  const bool crow = MODE == PAD_CONSTANT && r.cidx >= 0;
  const bool load = MODE != PAD_BRICK && !crow && p.contig &&
                    (((unsigned)reinterpret_cast<unsigned long long>(xr) + (unsigned)(c0 - lo) * sizeof(T)) & 15) == 0;
  const unsigned n_load = load ? inner : 0;
  const int kstep = G * V;  // k from one of a lane's chunks to its next
  for (int jb = glane; jb < S; jb += G * B) {
    const int kb = c0 - lo + jb * V;  // k of the lane's chunk u = 0 (chunk jb)
    const char* const xb = reinterpret_cast<const char*>(xr + kb);  // chunk u's source: xb + 16 G u (when loaded)
    char* const yb = reinterpret_cast<char*>(yr + lo + kb);          // chunk u: yb + 16 G u
    PadWords v[B];
    unsigned rest = 0;  // bit u: chunk u left to phase 2
#pragma unroll
    for (int u = 0; u < B; ++u) {
      const int k = kb + kstep * u;
      if ((unsigned)k < n_load) v[u] = pad_load_words(xb + 16u * G * u);
      rest |= (unsigned)(k < kend && (unsigned)k >= n_load) << u;
    }
#pragma unroll
    for (int u = 0; u < B; ++u)
      if ((unsigned)(kb + kstep * u) < n_load) pad_store_words(yb + 16u * G * u, v[u]);
    for (; rest; rest &= rest - 1) {  // (lanes take their own chunks: one pass per chunk of the busiest lane)
      const int u = pad_lowest_bit(rest), k = kb + kstep * u, c = k + lo;
      if (MODE == PAD_CONSTANT && (unsigned)c <= (unsigned)(w32 - V) &&
          (k <= -V || k >= span || (crow && k >= 0 && k <= span - V))) {
        const T fill = k < 0 ? (T)p.cval[2 * PAD_MAXD] : k >= span ? (T)p.cval[2 * PAD_MAXD + 1] : (T)r.cv;
        pad_store_words(yb + 16u * G * u, pad_splat<T>(fill));
        continue;
      }
      if (pad_run_chunk<MODE, T>(p, r, x, yr + c, c)) continue;
      PadPack<T> e;
      if constexpr (sizeof(T) <= 2) {
        pad_load_chunk<MODE, T, true>(p, r, x, c, e, yr);
      } else {
        pad_load_chunk<MODE, T>(p, r, x, c, e);
        pad_store_chunk<T>(y, E, c, w32, e);
      }
    }
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

// ---- numpy.pad's computing modes: per-axis passes over the output y, in place -----------------------
// ops/pad.py first copies x into y's interior (pad_flat / pad_rows with zero pads), then runs one pass per
// padded axis in numpy's order (axis 0 first). A pass walks the 1-D vectors ("lines") along its axis that
// numpy pads at that axis' turn (its _view_roi): the axes before it over their full, already padded extent,
// the axes after it over their interior, so later axes read earlier axes' pads (numpy's corners). A line
// is read and written by one group of `group` lanes (1, or 32: a warp, for long contiguous lines) and by
// no other: the lines of a pass are disjoint.

// dtype codes (in the order of ops/pad.py DTYPES); the computing passes are instanced by dtype, not by size.
enum { PAD_BOOL, PAD_INT8, PAD_UINT8, PAD_INT16, PAD_UINT16, PAD_INT32, PAD_UINT32, PAD_INT64, PAD_UINT64,
       PAD_FLOAT16, PAD_BFLOAT16, PAD_FLOAT32, PAD_FLOAT64, PAD_COMPLEX64, PAD_COMPLEX128 };
enum { PAD_STAT_MAXIMUM = 0, PAD_STAT_MINIMUM = 1, PAD_STAT_MEAN = 2, PAD_STAT_MEDIAN = 3 };  // ops/pad.py STATS

PAD_CONSTEXPR int pad_dt_size(int dt) {
  return dt <= PAD_UINT8 ? 1 : dt <= PAD_UINT16 || dt == PAD_FLOAT16 || dt == PAD_BFLOAT16 ? 2
       : dt <= PAD_UINT32 || dt == PAD_FLOAT32 ? 4 : dt == PAD_COMPLEX128 ? 16 : 8;
}
PAD_CONSTEXPR bool pad_dt_signed(int dt) {
  return dt == PAD_INT8 || dt == PAD_INT16 || dt == PAD_INT32 || dt == PAD_INT64;
}
PAD_CONSTEXPR bool pad_dt_unsigned(int dt) {
  return dt == PAD_UINT8 || dt == PAD_UINT16 || dt == PAD_UINT32 || dt == PAD_UINT64;
}
PAD_CONSTEXPR bool pad_dt_integer(int dt) { return pad_dt_signed(dt) || pad_dt_unsigned(dt); }
PAD_CONSTEXPR bool pad_dt_complex(int dt) { return dt == PAD_COMPLEX64 || dt == PAD_COMPLEX128; }
PAD_CONSTEXPR bool pad_dt_inexact(int dt) { return dt >= PAD_FLOAT16; }
PAD_CONSTEXPR unsigned long long pad_mask(int w) { return w >= 64 ? ~0ULL : (1ULL << w) - 1; }
// Bits of one ordering key word: the element (real types) or one part (complex types).
PAD_CONSTEXPR int pad_key_bits(int dt) { return 8 * (pad_dt_complex(dt) ? pad_dt_size(dt) / 2 : pad_dt_size(dt)); }

struct PadBits { unsigned long long lo, hi; };  // an element's raw bits (lo: its first 8 bytes)
struct PadCx { double re, im; };                 // an element's value (im 0 for real types)
struct PadKey { unsigned long long hi, lo; };    // an order-preserving key (lo: a complex' imaginary part)

#ifdef PAD_HOST
PAD_HD double pad_f64(unsigned long long u) { double d; memcpy(&d, &u, 8); return d; }
PAD_HD unsigned long long pad_u64(double d) { unsigned long long u; memcpy(&u, &d, 8); return u; }
PAD_HD float pad_f32(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
PAD_HD unsigned pad_u32(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
PAD_HD double pad_dadd(double a, double b) { return a + b; }
PAD_HD double pad_dsub(double a, double b) { return a - b; }
PAD_HD double pad_dmul(double a, double b) { return a * b; }
PAD_HD float pad_to_f32(double d) { return (float)d; }
PAD_HD double pad_rcp_approx(double b) { return (double)(1.0f / (float)b); }  // about 24 bits, as the GPU's
#else
PAD_HD double pad_f64(unsigned long long u) { return __longlong_as_double((long long)u); }
PAD_HD unsigned long long pad_u64(double d) { return (unsigned long long)__double_as_longlong(d); }
PAD_HD float pad_f32(unsigned u) { return __uint_as_float(u); }
PAD_HD unsigned pad_u32(float f) { return __float_as_uint(f); }
// Explicitly rounded operations: no contraction into FMAs, so each step rounds as NumPy's does.
PAD_HD double pad_dadd(double a, double b) { return __dadd_rn(a, b); }
PAD_HD double pad_dsub(double a, double b) { return __dsub_rn(a, b); }
PAD_HD double pad_dmul(double a, double b) { return __dmul_rn(a, b); }
PAD_HD float pad_to_f32(double d) { return __double2float_rn(d); }
PAD_HD double pad_rcp_approx(double b) {
  double y;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(b));
  return y;
}
#endif

// a / b rounded to nearest even for a divisor b >= 1 (the passes divide only by counts): a reciprocal by two Newton
// steps, then the nearest of the quotient and its two neighbours by their exact remainders (ties to even). No
// slow-path call, unlike __ddiv_rn (a call spills the passes' live registers). Quotients in the subnormal range
// may be off in their last bit.
PAD_HD double pad_ddiv(double a, double b) {
  if (a == 0.0 || !(fabs(a) <= 1.7976931348623157e308) || b == 1.0) return a;
  if (!(b <= 1.7976931348623157e308)) return copysign(0.0, a);
  double y = pad_rcp_approx(b);
  double e = fma(-b, y, 1.0);
  y = fma(e, y, y);
  e = fma(-b, y, 1.0);
  y = fma(e, y, y);
  double q = pad_dmul(a, y), r = fabs(fma(-b, q, a));
  const unsigned long long bits = pad_u64(q);
  for (int k = -1; k <= 1; k += 2) {
    const double c = pad_f64(bits + k), rc = fabs(fma(-b, c, a));
    if (rc < r || (rc == r && !((bits + k) & 1))) {
      q = c;
      r = rc;
    }
  }
  return q;
}

// float16 <-> double without the half intrinsics, so the host harness checks the same code: a half's
// value exactly; a double rounded to the nearest half, ties to even (NumPy's conversions).
PAD_HD double pad_half_value(unsigned h) {
  const int e = (int)((h >> 10) & 31u), m = (int)(h & 1023u);
  const double v = e == 0 ? (double)m * 5.9604644775390625e-08  // m 2^-24
                 : e == 31 ? pad_f64(0x7ff0000000000000ULL | ((unsigned long long)m << 42) | (m ? 1ULL << 51 : 0))
                           : (double)(m | 1024) * pad_f64((unsigned long long)(e - 25 + 1023) << 52);
  return (h & 0x8000u) ? -v : v;
}

PAD_HD unsigned pad_half_bits(double d) {
  const unsigned long long u = pad_u64(d);
  const unsigned sign = (unsigned)(u >> 48) & 0x8000u;
  const double a = d < 0 ? -d : d;
  if (a != a) return sign | 0x7e00u | (unsigned)((u >> 42) & 0x1ffu);
  if (a >= 65520.0) return sign | 0x7c00u;                           // halfway above 65504 and beyond: inf
  if (a < 6.103515625e-05) return sign | (unsigned)rint(a * 16777216.0);  // subnormal: units of 2^-24
  const unsigned long long ua = pad_u64(a);
  const int e = (int)(ua >> 52) - 1023;                                          // a = m 2^e, m in [1, 2)
  const double m = pad_f64((ua & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);
  return sign | (unsigned)(((e + 15) << 10) + (int)rint((m - 1.0) * 1024.0));   // a carry bumps the exponent
}

// bfloat16 (no NumPy type): through float32, rounding to nearest even at each step (as torch and ml_dtypes).
PAD_HD double pad_bf16_value(unsigned h) { return (double)pad_f32(h << 16); }

PAD_HD unsigned pad_bf16_bits(double d) {
  const unsigned u = pad_u32(pad_to_f32(d));
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// v rounded to the precision of dtype DT's (real) parts. float16 and bfloat16 arithmetic is NumPy's: the
// operation in float32, then rounded to the half type.
template <int DT>
PAD_HD double pad_round(double v) {
  if (DT == PAD_FLOAT16) return pad_half_value(pad_half_bits((double)pad_to_f32(v)));
  if (DT == PAD_BFLOAT16) return pad_bf16_value(pad_bf16_bits(v));
  if (DT == PAD_FLOAT32 || DT == PAD_COMPLEX64) return (double)pad_to_f32(v);
  return v;
}

template <int DT>
PAD_HD PadBits pad_get(const unsigned char* y, long long i) {
  constexpr int S = pad_dt_size(DT);
  const unsigned char* p = y + i * S;
  PadBits b = {0, 0};
  if constexpr (S == 1) b.lo = *p;
  else if constexpr (S == 2) b.lo = *reinterpret_cast<const unsigned short*>(p);
  else if constexpr (S == 4) b.lo = *reinterpret_cast<const unsigned int*>(p);
  else b.lo = *reinterpret_cast<const unsigned long long*>(p);
  if constexpr (S == 16) b.hi = reinterpret_cast<const unsigned long long*>(p)[1];
  return b;
}

template <int DT>
PAD_HD void pad_put(unsigned char* y, long long i, PadBits b) {
  constexpr int S = pad_dt_size(DT);
  unsigned char* p = y + i * S;
  if constexpr (S == 1) *p = (unsigned char)b.lo;
  else if constexpr (S == 2) *reinterpret_cast<unsigned short*>(p) = (unsigned short)b.lo;
  else if constexpr (S == 4) *reinterpret_cast<unsigned int*>(p) = (unsigned int)b.lo;
  else *reinterpret_cast<unsigned long long*>(p) = b.lo;
  if constexpr (S == 16) reinterpret_cast<unsigned long long*>(p)[1] = b.hi;
}

// The element's value, as NumPy casts it to float64 (exact but for (u)int64 beyond 2^53: rounded).
template <int DT>
PAD_HD PadCx pad_number(PadBits b) {
  constexpr int W = 8 * pad_dt_size(DT);
  PadCx v = {0.0, 0.0};
  if constexpr (DT == PAD_BOOL) v.re = b.lo ? 1.0 : 0.0;
  else if constexpr (pad_dt_signed(DT)) v.re = (double)((long long)(b.lo << (64 - W)) >> (64 - W));
  else if constexpr (pad_dt_unsigned(DT)) v.re = (double)b.lo;
  else if constexpr (DT == PAD_FLOAT16) v.re = pad_half_value((unsigned)b.lo);
  else if constexpr (DT == PAD_BFLOAT16) v.re = pad_bf16_value((unsigned)b.lo);
  else if constexpr (DT == PAD_FLOAT32) v.re = (double)pad_f32((unsigned)b.lo);
  else if constexpr (DT == PAD_FLOAT64) v.re = pad_f64(b.lo);
  else if constexpr (DT == PAD_COMPLEX64) {
    v.re = (double)pad_f32((unsigned)b.lo);
    v.im = (double)pad_f32((unsigned)(b.lo >> 32));
  } else {
    v.re = pad_f64(b.lo);
    v.im = pad_f64(b.hi);
  }
  return v;
}

enum { PAD_CAST = 0, PAD_FLOOR = 1, PAD_RINT = 2 };  // how a value becomes an integer element

// v as an element of dtype DT, as NumPy's astype: a complex into a real type keeps its real part; into an
// integer type after `to_int` (numpy.pad floors linear ramps and rounds means and medians, ties to even).
template <int DT>
PAD_HD PadBits pad_from_number(PadCx v, int to_int) {
  constexpr int W = 8 * pad_dt_size(DT);
  PadBits b = {0, 0};
  if constexpr (DT == PAD_BOOL) {
    b.lo = (v.re != 0.0 || v.im != 0.0) ? 1 : 0;
  } else if constexpr (pad_dt_integer(DT)) {
    const double r = to_int == PAD_FLOOR ? floor(v.re) : to_int == PAD_RINT ? rint(v.re) : v.re;
    b.lo = DT == PAD_UINT64 ? (unsigned long long)r : (unsigned long long)(long long)r & pad_mask(W);
  } else if constexpr (DT == PAD_FLOAT16) {
    b.lo = pad_half_bits(v.re);
  } else if constexpr (DT == PAD_BFLOAT16) {
    b.lo = pad_bf16_bits(v.re);
  } else if constexpr (DT == PAD_FLOAT32) {
    b.lo = pad_u32(pad_to_f32(v.re));
  } else if constexpr (DT == PAD_FLOAT64) {
    b.lo = pad_u64(v.re);
  } else if constexpr (DT == PAD_COMPLEX64) {
    b.lo = (unsigned long long)pad_u32(pad_to_f32(v.re)) | (unsigned long long)pad_u32(pad_to_f32(v.im)) << 32;
  } else {
    b.lo = pad_u64(v.re);
    b.hi = pad_u64(v.im);
  }
  return b;
}

template <int DT>
PAD_HD bool pad_is_nan(PadBits b) {
  if (!pad_dt_inexact(DT)) return false;
  const PadCx v = pad_number<DT>(b);
  return v.re != v.re || v.im != v.im;
}

// Order-preserving key of one real part of W bits (NaN excluded; -0 and +0 share the key of +0, as they
// compare equal).
template <int DT>
PAD_HD unsigned long long pad_part_key(unsigned long long u) {
  constexpr int W = pad_key_bits(DT);
  constexpr unsigned long long sign = 1ULL << (W - 1), mask = pad_mask(W);
  if constexpr (DT == PAD_BOOL) return u ? 1 : 0;
  else if constexpr (pad_dt_unsigned(DT)) return u;
  else if constexpr (pad_dt_signed(DT)) return u ^ sign;
  else if ((u & ~sign & mask) == 0) return sign;
  else return (u & sign) ? (~u & mask) : (u | sign);
}

template <int DT>
PAD_HD unsigned long long pad_part_unkey(unsigned long long k) {
  constexpr int W = pad_key_bits(DT);
  constexpr unsigned long long sign = 1ULL << (W - 1), mask = pad_mask(W);
  if constexpr (!pad_dt_inexact(DT)) return pad_dt_signed(DT) ? k ^ sign : k;
  else return (k & sign) ? (k ^ sign) : (~k & mask);
}

// Complex keys order as NumPy sorts complex numbers: by real part, then imaginary part.
template <int DT>
PAD_HD PadKey pad_key(PadBits b) {
  PadKey k = {0, 0};
  if constexpr (DT == PAD_COMPLEX64) {
    k.hi = pad_part_key<DT>(b.lo & 0xffffffffULL);
    k.lo = pad_part_key<DT>(b.lo >> 32);
  } else if constexpr (DT == PAD_COMPLEX128) {
    k.hi = pad_part_key<DT>(b.lo);
    k.lo = pad_part_key<DT>(b.hi);
  } else {
    k.hi = pad_part_key<DT>(b.lo);
  }
  return k;
}

template <int DT>
PAD_HD PadBits pad_unkey(PadKey k) {
  PadBits b = {0, 0};
  if constexpr (DT == PAD_COMPLEX64) {
    b.lo = pad_part_unkey<DT>(k.hi) | pad_part_unkey<DT>(k.lo) << 32;
  } else if constexpr (DT == PAD_COMPLEX128) {
    b.lo = pad_part_unkey<DT>(k.hi);
    b.hi = pad_part_unkey<DT>(k.lo);
  } else {
    b.lo = pad_part_unkey<DT>(k.hi);
  }
  return b;
}

PAD_HD bool pad_key_less(PadKey a, PadKey b) { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo); }

// A line's group of G lanes (1, or a full warp of 32) combines its partial results; on the host G is 1.
#ifdef PAD_HOST
PAD_HD double pad_group_sum(double v, int) { return v; }
PAD_HD long long pad_group_sum(long long v, int) { return v; }
PAD_HD PadKey pad_group_key(PadKey k, int, bool) { return k; }
PAD_HD void pad_group_nan(int&, PadBits&, int) {}
PAD_HD void pad_group_sync(int) {}
#else
__device__ __forceinline__ double pad_group_sum(double v, int G) {
  if (G > 1)
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ long long pad_group_sum(long long v, int G) {
  if (G > 1)
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ PadKey pad_group_key(PadKey k, int G, bool largest) {
  if (G > 1)
    for (int o = 16; o; o >>= 1) {
      const PadKey t = {__shfl_xor_sync(0xffffffffu, k.hi, o), __shfl_xor_sync(0xffffffffu, k.lo, o)};
      if (largest ? pad_key_less(k, t) : pad_key_less(t, k)) k = t;
    }
  return k;
}
// Whether any lane saw a NaN, and then one NaN for all lanes (the one of largest bits: every lane agrees).
__device__ __forceinline__ void pad_group_nan(int& has, PadBits& nan, int G) {
  if (G > 1)
    for (int o = 16; o; o >>= 1) {
      const int h = __shfl_xor_sync(0xffffffffu, has, o);
      const PadBits t = {__shfl_xor_sync(0xffffffffu, nan.lo, o), __shfl_xor_sync(0xffffffffu, nan.hi, o)};
      if (h && (!has || t.hi > nan.hi || (t.hi == nan.hi && t.lo > nan.lo))) {
        has = 1;
        nan = t;
      }
    }
}
__device__ __forceinline__ void pad_group_sync(int G) {
  if (G > 1) __syncwarp();
}
#endif

// ---- maximum, minimum, mean, median of one region of a line (numpy's _get_stats) ----------------------

// The mean of `count` elements summing to (sr, si), as numpy.mean: integer and bool sums in float64, the
// quotient rounded (ties to even) for integer dtypes; a complex sum divided as NumPy divides a complex by a
// real count (Smith's rule: times 1 / count). Sums here are float64 for every dtype.
template <int DT>
PAD_HD PadBits pad_mean_result(double sr, double si, long long count) {
  PadCx m = {0.0, 0.0};
  if (count == 0) {  // the mean of nothing: NaN (pad_ddiv divides by counts of at least 1)
    m.re = m.im = pad_f64(0x7ff8000000000000ULL);
    if (!pad_dt_complex(DT)) m.im = 0.0;
  } else if (pad_dt_complex(DT)) {
    const double rat = pad_ddiv(0.0, (double)count), scl = pad_ddiv(1.0, pad_dadd((double)count, pad_dmul(0.0, rat)));
    m.re = pad_dmul(pad_dadd(sr, pad_dmul(si, rat)), scl);
    m.im = pad_dmul(pad_dsub(si, pad_dmul(sr, rat)), scl);
  } else {
    m.re = pad_ddiv(sr, (double)count);
  }
  return pad_from_number<DT>(m, PAD_RINT);
}

// The median from its middle elements a (and b for an even count), as numpy.median: their mean in NumPy's
// accumulator (float64 for integer and bool dtypes, float32 for float16, the dtype's own precision otherwise),
// rounded (ties to even) for integer dtypes.
template <int DT>
PAD_HD PadBits pad_median_result(PadKey a, PadKey b, bool odd) {
  const PadCx va = pad_number<DT>(pad_unkey<DT>(a)), vb = pad_number<DT>(pad_unkey<DT>(b));
  constexpr int ACC = DT == PAD_FLOAT16 || DT == PAD_BFLOAT16 ? PAD_FLOAT32 : pad_dt_inexact(DT) ? DT : PAD_FLOAT64;
  const double half = odd ? 1.0 : 0.5;  // 1 / count, exact: dividing by the count is multiplying by it
  const PadCx s = {odd ? va.re : pad_round<ACC>(pad_dadd(va.re, vb.re)),
                   odd ? va.im : pad_round<ACC>(pad_dadd(va.im, vb.im))};
  PadCx m = {0.0, 0.0};
  if (pad_dt_complex(DT)) {  // Smith's rule for the real count: (s.re + s.im * 0) / count, (s.im - s.re * 0) / count
    m.re = pad_round<ACC>(pad_dmul(pad_round<ACC>(pad_dadd(s.re, pad_dmul(s.im, 0.0))), half));
    m.im = pad_round<ACC>(pad_dmul(pad_round<ACC>(pad_dsub(s.im, pad_dmul(s.re, 0.0))), half));
  } else {
    m.re = pad_round<ACC>(pad_dmul(s.re, half));
  }
  return pad_from_number<DT>(m, PAD_RINT);
}

// The k-th smallest key (0-based) of the region's `len` elements at y[off + i * step]: a radix select, most
// significant bit first, one pass over the region per key bit (a complex's imaginary part after its real part).
template <int DT>
PAD_HD PadKey pad_select(const unsigned char* y, long long off, long long step, long long len, long long k,
                         int lane, int G) {
  constexpr int W = pad_key_bits(DT);
  PadKey r = {0, 0};
  for (int bit = W - 1; bit >= 0; --bit) {
    long long below = 0;  // elements with r's bits above `bit` and a 0 at `bit`
    for (long long i = lane; i < len; i += G)
      below += (pad_key<DT>(pad_get<DT>(y, off + i * step)).hi >> bit) == (r.hi >> bit);
    below = pad_group_sum(below, G);
    if (k >= below) {
      r.hi |= 1ULL << bit;
      k -= below;
    }
  }
  if (pad_dt_complex(DT))
    for (int bit = W - 1; bit >= 0; --bit) {
      long long below = 0;
      for (long long i = lane; i < len; i += G) {
        const PadKey q = pad_key<DT>(pad_get<DT>(y, off + i * step));
        below += q.hi == r.hi && (q.lo >> bit) == (r.lo >> bit);
      }
      below = pad_group_sum(below, G);
      if (k >= below) {
        r.lo |= 1ULL << bit;
        k -= below;
      }
    }
  return r;
}

// The statistic `stat` (PAD_STAT_*) of the region's `len` elements at y[off + i * step], the same value on every
// lane of the group. maximum, minimum and median: NaN if the region holds one (NumPy's propagation); len 0: the
// mean and median are NaN, as numpy's (maximum and minimum of nothing are refused by ops/pad.py).
template <int DT>
PAD_HD PadBits pad_region_stat(const unsigned char* y, long long off, long long step, long long len, int stat,
                               int lane, int G) {
  if (stat == PAD_STAT_MEAN) {
    double sr = 0.0, si = 0.0;
    for (long long i = lane; i < len; i += G) {
      const PadCx v = pad_number<DT>(pad_get<DT>(y, off + i * step));
      sr = pad_dadd(sr, v.re);
      si = pad_dadd(si, v.im);
    }
    return pad_mean_result<DT>(pad_group_sum(sr, G), pad_group_sum(si, G), len);
  }
  if (pad_dt_inexact(DT)) {
    int has = 0;
    PadBits nan = {0, 0};
    for (long long i = lane; i < len && !has; i += G) {
      const PadBits b = pad_get<DT>(y, off + i * step);
      if (pad_is_nan<DT>(b)) {
        has = 1;
        nan = b;
      }
    }
    pad_group_nan(has, nan, G);
    if (has) return nan;
  }
  if (stat == PAD_STAT_MAXIMUM || stat == PAD_STAT_MINIMUM) {
    const bool largest = stat == PAD_STAT_MAXIMUM;
    PadKey best = largest ? PadKey{0, 0} : PadKey{~0ULL, ~0ULL};
    for (long long i = lane; i < len; i += G) {
      const PadKey q = pad_key<DT>(pad_get<DT>(y, off + i * step));
      if (largest ? pad_key_less(best, q) : pad_key_less(q, best)) best = q;
    }
    return pad_unkey<DT>(pad_group_key(best, G, largest));
  }
  if (len == 0) return pad_mean_result<DT>(0.0, 0.0, 0);
  const long long k = (len - 1) / 2;
  const PadKey a = pad_select<DT>(y, off, step, len, k, lane, G);
  if (len % 2) return pad_median_result<DT>(a, a, true);
  // the next order statistic: a again when it repeats, else the smallest key above it
  long long at_most = 0;
  PadKey next = {~0ULL, ~0ULL};
  for (long long i = lane; i < len; i += G) {
    const PadKey q = pad_key<DT>(pad_get<DT>(y, off + i * step));
    if (!pad_key_less(a, q)) ++at_most;
    else if (pad_key_less(q, next)) next = q;
  }
  at_most = pad_group_sum(at_most, G);
  next = pad_group_key(next, G, false);
  return pad_median_result<DT>(a, at_most >= k + 2 ? a : next, false);
}

// One line of a statistic pass: the statistic of the first `llen` and of the last `rlen` elements of the
// line's interior (n elements from `before`) fill the pads before and after it.
template <int DT>
PAD_HD void pad_line_stat(unsigned char* y, long long off, long long step, long long before, long long n,
                          long long after, int stat, long long llen, long long rlen, int lane, int G) {
  PadBits lv = {0, 0}, rv = {0, 0};
  if (before > 0) lv = pad_region_stat<DT>(y, off + before * step, step, llen, stat, lane, G);
  if (after > 0)
    rv = before > 0 && llen == n && rlen == n
             ? lv
             : pad_region_stat<DT>(y, off + (before + n - rlen) * step, step, rlen, stat, lane, G);
  for (long long j = lane; j < before; j += G) pad_put<DT>(y, off + j * step, lv);
  for (long long j = lane; j < after; j += G) pad_put<DT>(y, off + (before + n + j) * step, rv);
}

// ---- reflect_type='odd' (numpy's _set_reflect_both, chunk by chunk) ------------------------------------

// 2 * edge - v in the dtype's arithmetic, as NumPy evaluates it: integers wrap, bool goes through int64 (then
// nonzero), float16 rounds each operation, complex multiplies by 2 + 0j.
template <int DT>
PAD_HD PadBits pad_odd(PadBits edge, PadBits v) {
  constexpr int W = 8 * pad_dt_size(DT);
  PadBits r = {0, 0};
  if constexpr (DT == PAD_BOOL) {
    r.lo = (edge.lo || v.lo) ? 1 : 0;
  } else if constexpr (pad_dt_integer(DT)) {
    r.lo = (2 * edge.lo - v.lo) & pad_mask(W);
  } else {
    const PadCx e = pad_number<DT>(edge), c = pad_number<DT>(v);
    PadCx t = {pad_round<DT>(pad_dsub(pad_round<DT>(pad_dmul(2.0, e.re)), pad_round<DT>(pad_dmul(0.0, e.im)))),
               pad_round<DT>(pad_dadd(pad_round<DT>(pad_dmul(2.0, e.im)), pad_round<DT>(pad_dmul(0.0, e.re))))};
    t.re = pad_round<DT>(pad_dsub(t.re, c.re));
    t.im = pad_round<DT>(pad_dsub(t.im, c.im));
    r = pad_from_number<DT>(t, PAD_CAST);
  }
  return r;
}

// One line of an odd reflection: numpy's iterations, each reflecting at most a whole number of periods of the
// values so far onto each side (left first), every value 2 * edge - mirrored value; the group's lanes share
// an iteration's chunk and meet between iterations. A singleton axis pads with its edge (numpy's legacy rule).
template <int DT>
PAD_HD void pad_line_odd(unsigned char* y, long long off, long long step, long long before, long long n,
                         long long after, int symmetric, int lane, int G) {
  const long long P = before + n + after, eo = symmetric ? 1 : 0;
  if (n == 1) {
    const PadBits e = pad_get<DT>(y, off + before * step);
    for (long long j = lane; j < before; j += G) pad_put<DT>(y, off + j * step, e);
    for (long long j = lane; j < after; j += G) pad_put<DT>(y, off + (before + 1 + j) * step, e);
    return;
  }
  long long left = before, right = after;
  while (left > 0 || right > 0) {
    const long long have = P - right - left;
    long long periods, rest;  // numpy's old_length: whole periods of the original values (reflect: n - 1 long)
    pad_divmod(symmetric ? have : have - 1, symmetric ? n : n - 1, periods, rest);
    const long long most = periods * (symmetric ? n : n - 1);
    const long long cl = left < most ? left : most, cr = right < most ? right : most;
    if (cl > 0) {
      const PadBits edge = pad_get<DT>(y, off + left * step);
      const long long top = left - eo + cl;  // mirrored values: top, top - 1, ..., left - eo + 1
      for (long long i = lane; i < cl; i += G)
        pad_put<DT>(y, off + (left - cl + i) * step, pad_odd<DT>(edge, pad_get<DT>(y, off + (top - i) * step)));
    }
    if (cr > 0) {
      const PadBits edge = pad_get<DT>(y, off + (P - right - 1) * step);
      const long long top = P - right + eo - 2;  // mirrored values: top, top - 1, ..., top - cr + 1
      for (long long i = lane; i < cr; i += G)
        pad_put<DT>(y, off + (P - right + i) * step, pad_odd<DT>(edge, pad_get<DT>(y, off + (top - i) * step)));
    }
    left -= cl;
    right -= cr;
    pad_group_sync(G);
  }
}

// ---- linear_ramp (numpy.linspace(end_value, edge, width, endpoint=False) per side) ----------------------

// A value of numpy's compute dtype CT (NumPy's result type of the end value and the array, inexact) from bits.
template <int CT>
PAD_HD PadCx pad_ct_value(unsigned long long lo, unsigned long long hi) {
  const PadBits b = {lo, hi};
  return pad_number<CT>(b);
}

// Element i of y (dtype code dt, chosen at run time: the ramp passes are instanced by compute dtype) as a CT.
template <int CT>
PAD_HD PadCx pad_load_ct(const unsigned char* y, long long i, int dt) {
  PadCx v = {0.0, 0.0};
  switch (dt) {
    case PAD_BOOL: v = pad_number<PAD_BOOL>(pad_get<PAD_BOOL>(y, i)); break;
    case PAD_INT8: v = pad_number<PAD_INT8>(pad_get<PAD_INT8>(y, i)); break;
    case PAD_UINT8: v = pad_number<PAD_UINT8>(pad_get<PAD_UINT8>(y, i)); break;
    case PAD_INT16: v = pad_number<PAD_INT16>(pad_get<PAD_INT16>(y, i)); break;
    case PAD_UINT16: v = pad_number<PAD_UINT16>(pad_get<PAD_UINT16>(y, i)); break;
    case PAD_INT32: v = pad_number<PAD_INT32>(pad_get<PAD_INT32>(y, i)); break;
    case PAD_UINT32: v = pad_number<PAD_UINT32>(pad_get<PAD_UINT32>(y, i)); break;
    case PAD_INT64: v = pad_number<PAD_INT64>(pad_get<PAD_INT64>(y, i)); break;
    case PAD_UINT64: v = pad_number<PAD_UINT64>(pad_get<PAD_UINT64>(y, i)); break;
    case PAD_FLOAT16: v = pad_number<PAD_FLOAT16>(pad_get<PAD_FLOAT16>(y, i)); break;
    case PAD_BFLOAT16: v = pad_number<PAD_BFLOAT16>(pad_get<PAD_BFLOAT16>(y, i)); break;
    case PAD_FLOAT32: v = pad_number<PAD_FLOAT32>(pad_get<PAD_FLOAT32>(y, i)); break;
    case PAD_FLOAT64: v = pad_number<PAD_FLOAT64>(pad_get<PAD_FLOAT64>(y, i)); break;
    case PAD_COMPLEX64: v = pad_number<PAD_COMPLEX64>(pad_get<PAD_COMPLEX64>(y, i)); break;
    default: v = pad_number<PAD_COMPLEX128>(pad_get<PAD_COMPLEX128>(y, i)); break;
  }
  v.re = pad_round<CT>(v.re);
  v.im = pad_round<CT>(v.im);
  return v;
}

// v stored as element i of y (dtype code dt): floored first for integer dtypes (linspace's integer rule).
PAD_HD void pad_store_ramp(unsigned char* y, long long i, int dt, PadCx v) {
  switch (dt) {
    case PAD_BOOL: pad_put<PAD_BOOL>(y, i, pad_from_number<PAD_BOOL>(v, PAD_FLOOR)); break;
    case PAD_INT8: pad_put<PAD_INT8>(y, i, pad_from_number<PAD_INT8>(v, PAD_FLOOR)); break;
    case PAD_UINT8: pad_put<PAD_UINT8>(y, i, pad_from_number<PAD_UINT8>(v, PAD_FLOOR)); break;
    case PAD_INT16: pad_put<PAD_INT16>(y, i, pad_from_number<PAD_INT16>(v, PAD_FLOOR)); break;
    case PAD_UINT16: pad_put<PAD_UINT16>(y, i, pad_from_number<PAD_UINT16>(v, PAD_FLOOR)); break;
    case PAD_INT32: pad_put<PAD_INT32>(y, i, pad_from_number<PAD_INT32>(v, PAD_FLOOR)); break;
    case PAD_UINT32: pad_put<PAD_UINT32>(y, i, pad_from_number<PAD_UINT32>(v, PAD_FLOOR)); break;
    case PAD_INT64: pad_put<PAD_INT64>(y, i, pad_from_number<PAD_INT64>(v, PAD_FLOOR)); break;
    case PAD_UINT64: pad_put<PAD_UINT64>(y, i, pad_from_number<PAD_UINT64>(v, PAD_FLOOR)); break;
    case PAD_FLOAT16: pad_put<PAD_FLOAT16>(y, i, pad_from_number<PAD_FLOAT16>(v, PAD_CAST)); break;
    case PAD_BFLOAT16: pad_put<PAD_BFLOAT16>(y, i, pad_from_number<PAD_BFLOAT16>(v, PAD_CAST)); break;
    case PAD_FLOAT32: pad_put<PAD_FLOAT32>(y, i, pad_from_number<PAD_FLOAT32>(v, PAD_CAST)); break;
    case PAD_FLOAT64: pad_put<PAD_FLOAT64>(y, i, pad_from_number<PAD_FLOAT64>(v, PAD_CAST)); break;
    case PAD_COMPLEX64: pad_put<PAD_COMPLEX64>(y, i, pad_from_number<PAD_COMPLEX64>(v, PAD_CAST)); break;
    default: pad_put<PAD_COMPLEX128>(y, i, pad_from_number<PAD_COMPLEX128>(v, PAD_CAST)); break;
  }
}

// NumPy's a / w for a real count w (a complex divisor w + 0j: Smith's rule, times 1 / w), in CT.
template <int CT>
PAD_HD PadCx pad_ct_div(PadCx a, double w) {
  PadCx r = {0.0, 0.0};
  if (pad_dt_complex(CT)) {
    const double rat = pad_round<CT>(pad_ddiv(0.0, w));
    const double scl = pad_round<CT>(pad_ddiv(1.0, pad_round<CT>(pad_dadd(w, pad_round<CT>(pad_dmul(0.0, rat))))));
    r.re = pad_round<CT>(pad_dmul(pad_round<CT>(pad_dadd(a.re, pad_round<CT>(pad_dmul(a.im, rat)))), scl));
    r.im = pad_round<CT>(pad_dmul(pad_round<CT>(pad_dsub(a.im, pad_round<CT>(pad_dmul(a.re, rat)))), scl));
  } else {
    r.re = pad_round<CT>(pad_ddiv(a.re, w));
  }
  return r;
}

template <int CT>
PAD_HD PadCx pad_ct_mul(PadCx a, PadCx b) {
  PadCx r = {0.0, 0.0};
  if (pad_dt_complex(CT)) {
    r.re = pad_round<CT>(pad_dsub(pad_round<CT>(pad_dmul(a.re, b.re)), pad_round<CT>(pad_dmul(a.im, b.im))));
    r.im = pad_round<CT>(pad_dadd(pad_round<CT>(pad_dmul(a.re, b.im)), pad_round<CT>(pad_dmul(a.im, b.re))));
  } else {
    r.re = pad_round<CT>(pad_dmul(a.re, b.re));
  }
  return r;
}

// linspace's step for `width` values from start to stop: (stop - start) / width.
template <int CT>
PAD_HD PadCx pad_ramp_step(PadCx start, PadCx stop, long long width) {
  const PadCx delta = {pad_round<CT>(pad_dsub(stop.re, start.re)), pad_round<CT>(pad_dsub(stop.im, start.im))};
  return pad_ct_div<CT>(delta, pad_round<CT>((double)width));
}

// Value j of numpy.linspace(start, stop, width, endpoint=False) in CT, step by step as NumPy computes it:
// j * step + start, or, when any line's step of this side was zero (`zero_step`, numpy's denormal guard),
// (j / width) * (stop - start) + start.
template <int CT>
PAD_HD PadCx pad_ramp_value(PadCx start, PadCx stop, long long width, long long j, int zero_step) {
  const double w = pad_round<CT>((double)width);
  const PadCx jj = {pad_round<CT>((double)j), 0.0};
  PadCx v;
  if (zero_step) {
    const PadCx delta = {pad_round<CT>(pad_dsub(stop.re, start.re)), pad_round<CT>(pad_dsub(stop.im, start.im))};
    v = pad_ct_mul<CT>(pad_ct_div<CT>(jj, w), delta);
  } else {
    v = pad_ct_mul<CT>(jj, pad_ramp_step<CT>(start, stop, width));
  }
  v.re = pad_round<CT>(pad_dadd(v.re, start.re));
  v.im = pad_round<CT>(pad_dadd(v.im, start.im));
  return v;
}

// Which sides of a line have a zero linspace step (bit 0: before, bit 1: after), for pad_ramp_flags.
template <int CT>
PAD_HD int pad_line_ramp_zero(const unsigned char* y, long long off, long long step, long long before, long long n,
                              long long after, int dt, PadCx start_lo, PadCx start_hi) {
  int bits = 0;
  if (before > 0) {
    const PadCx s = pad_ramp_step<CT>(start_lo, pad_load_ct<CT>(y, off + before * step, dt), before);
    bits |= s.re == 0.0 && s.im == 0.0 ? 1 : 0;
  }
  if (after > 0) {
    const PadCx s = pad_ramp_step<CT>(start_hi, pad_load_ct<CT>(y, off + (before + n - 1) * step, dt), after);
    bits |= s.re == 0.0 && s.im == 0.0 ? 2 : 0;
  }
  return bits;
}

// One line of a linear_ramp pass: the pads before run from the end value to the first interior element (not
// included), the pads after mirror that from the last interior element to the other end value.
template <int CT>
PAD_HD void pad_line_ramp(unsigned char* y, long long off, long long step, long long before, long long n,
                          long long after, int dt, PadCx start_lo, PadCx start_hi, int zero_bits, int lane, int G) {
  const PadCx stop_lo = pad_load_ct<CT>(y, off + before * step, dt);
  const PadCx stop_hi = pad_load_ct<CT>(y, off + (before + n - 1) * step, dt);
  for (long long j = lane; j < before; j += G)
    pad_store_ramp(y, off + j * step, dt, pad_ramp_value<CT>(start_lo, stop_lo, before, j, zero_bits & 1));
  for (long long j = lane; j < after; j += G)
    pad_store_ramp(y, off + (before + n + j) * step, dt,
                   pad_ramp_value<CT>(start_hi, stop_hi, after, after - 1 - j, zero_bits & 2));
}

// ---- constants written per axis (complex128 constants with an imaginary part; constants of a Fortran-ordered
// result whose sides differ): numpy's order, so a later axis' value wins in the corners ----------------------

template <typename T> PAD_HD T pad_raw(unsigned long long lo, unsigned long long) { return (T)lo; }
template <> PAD_HD PadRaw16 pad_raw<PadRaw16>(unsigned long long lo, unsigned long long hi) {
  PadRaw16 v;
  v.lo = lo;
  v.hi = hi;
  return v;
}

template <typename T>
PAD_HD void pad_line_fill(T* y, long long off, long long step, long long before, long long n, long long after,
                          T lo, T hi, int lane, int G) {
  for (long long j = lane; j < before; j += G) y[off + j * step] = lo;
  for (long long j = lane; j < after; j += G) y[off + (before + n + j) * step] = hi;
}

// ---- the lines of a pass ---------------------------------------------------------------------------------

constexpr int PAD_LINE_GROUPS = 8;  // the other axes after merging (ops/pad.py loops over any beyond)

struct PadLines {
  long long nlines;               // below 2^31
  long long count[PAD_LINE_GROUPS], stride[PAD_LINE_GROUPS];  // the other axes, slowest first (count 1: unused)
  long long base;                 // offset of line 0's element 0 (the later axes' interior starts)
  long long step;                 // stride of the padded axis (elements)
  long long before, n, after;     // the padded axis: pad before, interior length, pad after
  int group;                      // lanes a line: 1 or 32
};

// Element offset of line `line`'s first element. Lines and counts below 2^31 (ops/pad.py splits larger
// launches): 32-bit division, no 64-bit division call.
PAD_HD long long pad_line_offset(const PadLines& L, long long line) {
  long long off = L.base;
  unsigned rest = (unsigned)line;
#pragma unroll
  for (int g = PAD_LINE_GROUPS - 1; g >= 0; --g) {
    const unsigned c = (unsigned)L.count[g], q = rest / c;
    off += (long long)(rest - q * c) * L.stride[g];
    rest = q;
  }
  return off;
}

#ifndef PAD_HOST
// Every forward kernel takes the same arguments (ops/pad.py Geometry.args) and rebuilds PadParams. `group` is read
// by pad_rows only.
#define PAD_AXIS_ARGS(i) long long o##i, long long n##i, long long b##i, long long s##i
#define PAD_AXIS_SET(i) p.out[i] = o##i; p.n[i] = n##i; p.before[i] = b##i; p.stride[i] = s##i;
#define PAD_FORWARD_ARGS                                                                               \
  const T* __restrict__ x, T* __restrict__ y, long long rows, long long wtot, long long tiles,         \
      long long tpr, int tile_chunks, int group, int nd, int fold, PAD_AXIS_ARGS(0), PAD_AXIS_ARGS(1),  \
      PAD_AXIS_ARGS(2), PAD_AXIS_ARGS(3), PAD_AXIS_ARGS(4), PAD_AXIS_ARGS(5), long long lout,          \
      long long ln, long long lbefore, long long lstride, long long blk, long long stagger, int contig, \
      unsigned long long c0, unsigned long long c1, unsigned long long c2, unsigned long long c3,       \
      unsigned long long c4, unsigned long long c5, unsigned long long c6, unsigned long long c7,       \
      unsigned long long c8, unsigned long long c9, unsigned long long c10, unsigned long long c11,     \
      unsigned long long c12, unsigned long long c13
#define PAD_FORWARD_PARAMS(p)                                                                          \
  PadParams p;                                                                                         \
  p.rows = rows; p.wtot = wtot; p.tiles = tiles; p.tpr = tpr; p.tile_chunks = tile_chunks;            \
  p.group = group; p.nd = nd; p.fold = fold;                                                           \
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
// from the occupancy calculator, grid-stride over tiles = rows * tpr units of `group` lanes (a power of two
// <= 32); wtot < 2^31 - 64.
template <int MODE, typename T>
__global__ void __launch_bounds__(256, 4) pad_rows(PAD_FORWARD_ARGS) {
  PAD_FORWARD_PARAMS(p)
  const int gs = __ffs(group) - 1;
  const long long units = ((long long)gridDim.x * blockDim.x) >> gs;
  for (long long t = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> gs; t < tiles; t += units)
    pad_rows_unit<MODE, T>(p, x, y, t, threadIdx.x & (group - 1));
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
// ---- the per-axis passes (numpy.pad's computing modes). Every pass takes the lines of one padded axis
// (ops/pad.py line_geometry: PadLines, fewer than 2^31 lines a launch) and is launched with 256-thread blocks
// and a 1-D grid covering the lines, one line to each group of `group` lanes (1 or 32: a warp, its lanes
// striding along the line), no grid stride; y is the output (element offsets 64-bit), written in place.
#define PAD_LINE_ARGS                                                                                      \
  long long nlines, long long c0, long long s0, long long c1, long long s1, long long c2, long long s2,        \
      long long c3, long long s3, long long c4, long long s4, long long c5, long long s5, long long c6,        \
      long long s6, long long c7, long long s7, long long base, long long step, long long before, long long n, \
      long long after, int group
#define PAD_LINE_PARAMS(L)                                                                                  \
  PadLines L;                                                                                              \
  L.nlines = nlines; L.base = base; L.step = step; L.before = before; L.n = n; L.after = after;             \
  L.group = group;                                                                                         \
  L.count[0] = c0; L.count[1] = c1; L.count[2] = c2; L.count[3] = c3;                                      \
  L.count[4] = c4; L.count[5] = c5; L.count[6] = c6; L.count[7] = c7;                                      \
  L.stride[0] = s0; L.stride[1] = s1; L.stride[2] = s2; L.stride[3] = s3;                                  \
  L.stride[4] = s4; L.stride[5] = s5; L.stride[6] = s6; L.stride[7] = s7;
// This thread's line (the same for a group of 32: a warp leaves together) and its lane in the line's group.
#define PAD_THREAD_LINE(L, line, lane)                                                                     \
  const long long line = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> (L.group == 32 ? 5 : 0);    \
  const int lane = (int)(threadIdx.x & (unsigned)(L.group - 1));                                           \
  if (line >= L.nlines) return;

// Constant pads of one axis (lo before, hi after: raw bits, 16-byte elements in two words). Launch: as above.
template <typename T>
__global__ void __launch_bounds__(256, 2) pad_axis_fill(T* __restrict__ y, PAD_LINE_ARGS, unsigned long long lo0,
                                                     unsigned long long lo1, unsigned long long hi0,
                                                     unsigned long long hi1) {
  PAD_LINE_PARAMS(L)
  const T lo = pad_raw<T>(lo0, lo1), hi = pad_raw<T>(hi0, hi1);
  PAD_THREAD_LINE(L, line, lane)
  pad_line_fill<T>(y, pad_line_offset(L, line), step, before, n, after, lo, hi, lane, group);
}

// reflect / symmetric (symmetric = 1) with reflect_type='odd' along one axis. Launch: as above; a group of 32
// lanes meets at __syncwarp between numpy's chunks.
template <int DT>
__global__ void __launch_bounds__(256, 2) pad_axis_odd(unsigned char* __restrict__ y, PAD_LINE_ARGS, int symmetric) {
  PAD_LINE_PARAMS(L)
  PAD_THREAD_LINE(L, line, lane)
  pad_line_odd<DT>(y, pad_line_offset(L, line), step, before, n, after, symmetric, lane, group);
}

// maximum / minimum / mean / median (stat: PAD_STAT_*) of the first llen and last rlen interior elements of each
// line, filling its pads. Launch: as above; a group of 32 combines its lanes' partial results by shuffles. The
// median is a radix select: one pass over the region per key bit.
template <int DT>
__global__ void __launch_bounds__(256, 2) pad_axis_stat(unsigned char* __restrict__ y, PAD_LINE_ARGS, int stat,
                                                     long long llen, long long rlen) {
  PAD_LINE_PARAMS(L)
  PAD_THREAD_LINE(L, line, lane)
  pad_line_stat<DT>(y, pad_line_offset(L, line), step, before, n, after, stat, llen, rlen, lane, group);
}

// linear_ramp, first pass: flags[0] (flags[1]) set when any line's linspace step before (after) the interior is
// zero, as numpy.linspace tests its whole array of steps. Launch: as above with a thread a line (group is not
// read); flags zeroed before.
template <int CT>
__global__ void __launch_bounds__(256, 2) pad_ramp_flags(const unsigned char* __restrict__ y,
                                                      unsigned int* __restrict__ flags, PAD_LINE_ARGS, int dt,
                                                      unsigned long long lo0, unsigned long long lo1,
                                                      unsigned long long hi0, unsigned long long hi1) {
  PAD_LINE_PARAMS(L)
  const PadCx start_lo = pad_ct_value<CT>(lo0, lo1), start_hi = pad_ct_value<CT>(hi0, hi1);
  const long long line = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const int bits = line < nlines ? pad_line_ramp_zero<CT>(y, pad_line_offset(L, line), step, before, n, after, dt,
                                                          start_lo, start_hi) : 0;
  const unsigned lo = __ballot_sync(0xffffffffu, bits & 1), hi = __ballot_sync(0xffffffffu, bits & 2);
  if ((threadIdx.x & 31) == 0) {  // a warp's flags in one atomic each
    if (lo) atomicOr(flags, 1u);
    if (hi) atomicOr(flags + 1, 1u);
  }
}

// linear_ramp, second pass: the ramps of one axis in numpy's compute dtype CT, stored as the array's dtype dt
// (a run-time code). Launch: as above.
template <int CT>
__global__ void __launch_bounds__(256, 2) pad_axis_ramp(unsigned char* __restrict__ y,
                                                     const unsigned int* __restrict__ flags, PAD_LINE_ARGS, int dt,
                                                     unsigned long long lo0, unsigned long long lo1,
                                                     unsigned long long hi0, unsigned long long hi1) {
  PAD_LINE_PARAMS(L)
  const PadCx start_lo = pad_ct_value<CT>(lo0, lo1), start_hi = pad_ct_value<CT>(hi0, hi1);
  const int zero_bits = (flags[0] ? 1 : 0) | (flags[1] ? 2 : 0);
  PAD_THREAD_LINE(L, line, lane)
  pad_line_ramp<CT>(y, pad_line_offset(L, line), step, before, n, after, dt, start_lo, start_hi, zero_bits, lane,
                    group);
}
#endif
