// Row-wise kernels (softmax, normalisation): a row segment held in registers as 16-byte packs,
// reductions over the threads that share a row, and the exchange between the blocks that share one.
//
// Layout: a row (or one of its `parts` segments) is handled by a group of G threads (G a power of
// two <= 32, or the whole block). Thread `lane` of the group owns packs p = 0 .. packs-1, each of V
// consecutive elements starting at element (p * G + lane) * V of the segment, so a group's loads of
// one p are contiguous. `aligned` means every pointer is 16-byte aligned and the row length is a
// multiple of V: packs move as one 16-byte access; otherwise each element moves alone (same layout),
// unless the row is `shifted` (see shift_row): its packs then start at the 16-byte boundary before it.
#pragma once
#include "reduce.cuh"
#include "cluster.cuh"

template <typename A> __device__ __forceinline__ A fast_exp(A x);
// ex2.approx.ftz: __expf without the subnormal-result fix-up (its predicated extra steps held registers
// and made the float log_softmax backward spill); results below 2^-126 (x < -87.3) become 0.
template <> __device__ __forceinline__ float fast_exp<float>(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * 1.4426950408889634f));
  return r;
}
template <> __device__ __forceinline__ double fast_exp<double>(double x) { return exp(x); }
template <typename A> __device__ __forceinline__ A acc_log(A x);
template <> __device__ __forceinline__ float acc_log<float>(float x) { return logf(x); }
template <> __device__ __forceinline__ double acc_log<double>(double x) { return log(x); }
template <typename A> __device__ __forceinline__ A acc_rsqrt(A x);
template <> __device__ __forceinline__ float acc_rsqrt<float>(float x) { return rsqrtf(x); }
template <> __device__ __forceinline__ double acc_rsqrt<double>(double x) { return 1.0 / sqrt(x); }
template <typename A> __device__ __forceinline__ A acc_div(A a, A b);
template <> __device__ __forceinline__ float acc_div<float>(float a, float b) { return __fdividef(a, b); }  // ~2 ulp
template <> __device__ __forceinline__ double acc_div<double>(double a, double b) { return a / b; }

// 16-byte packs a thread holds per row tensor: 16 elements (4 for float64), so that a kernel holding
// two tensors (backward) stays within 64 registers, spill-free.
template <typename T> struct RowPacks { static constexpr int value = Vec16<T>::N == 4 ? 4 : 2; };
// Forward kernels hold one tensor: 4 packs (32 elements of a half type, 16 of float32, 8 of float64).
template <typename T> struct FwdPacks { static constexpr int value = sizeof(T) == 8 ? 2 : 4; };
// Resident blocks per SM the kernels' __launch_bounds__ ask for (float64's exp needs more registers).
template <typename T> struct RowMinBlocks { static constexpr int value = sizeof(T) == 8 ? 1 : 2; };
// Largest block of the forward kernels: 1024 threads at 64 registers (one block per SM holds a
// 32768-element half row, or 16384 float32, without splitting it), 512 at 128 registers for float64.
template <typename T> struct FwdThreads { static constexpr int value = sizeof(T) == 8 ? 512 : 1024; };

// Element e of a pack in the accumulator type. A bfloat16 comes from its 32-bit word with one shift or
// mask: the generic conversion of an extracted upper half costs a PRMT and a shift.
template <typename A, typename T, int N>
__device__ __forceinline__ A elem(const Pack<T, N>& pk, int e) {
  return cast<A>(pk.v[e]);
}
template <>
__device__ __forceinline__ float elem<float, bfloat16, 8>(const Pack<bfloat16, 8>& pk, int e) {
  const float2 f = unpack2<bfloat16>(reinterpret_cast<const unsigned*>(&pk)[e >> 1]);
  return e & 1 ? f.y : f.x;
}

template <typename T> struct RowLayout {
  static constexpr int V = Vec16<T>::N;
  int len;  // elements of this segment (a segment fits one block's registers: < 2^31)
  int lane, G, packs;
  bool aligned;
  bool full = false;  // every pack p < packs lies inside the segment (a compile-time fact where it is one)
  bool shifted = false;  // (not aligned) the segment's elements are [lo, len) of packs from a 16-byte boundary
  int lo = 0;
  bool readable = true;  // shifted: a pack across the row's end may be read whole (it stays inside the matrix)
  __device__ __forceinline__ int at(int p) const { return (p * G + lane) * V; }
  __device__ __forceinline__ bool inside(int p) const { return full || at(p) < len; }  // pack p, aligned rows
  __device__ __forceinline__ bool whole(int i) const { return i >= lo && i + V <= len; }  // shifted pack at i
  __device__ __forceinline__ bool mine(int i) const { return i >= lo && i < len; }  // shifted element i
};

// Shifted rows (softmax.cu's SHIFT instances): 16-byte aligned arrays whose row length is not a
// multiple of V. A row's packs start at the 16-byte boundary `head` = (row * n) % V elements before it, so every
// pack inside the row moves as one 16-byte access and only the two across its ends are masked, where the element
// path moves each element alone (bfloat16 rows of 100: 3.8x slower than torch). Segments of a long row split
// these packs at multiples of `chunk` (the host plans n + V - 1 elements). Sets L's lo / len / readable for the
// row and returns the element offset of the segment's first pack; other layouts: row * n + begin, L unchanged.
template <typename T>
__device__ __forceinline__ long long shift_row(RowLayout<T>& L, long long row, long long rows, long long n,
                                               long long begin, long long chunk) {
  if (!L.shifted) return row * n + begin;
  const int head = (int)((row * n) & (L.V - 1));
  L.lo = begin == 0 ? head : 0;
  L.len = (int)min(chunk, n + head - begin);
  L.readable = row < rows - 1;
  return row * n + begin - head;
}

// f(layout, offset) for a row's segment: L and row * n + begin, or with SHIFT the row's own layout (shift_row), so
// that instances without SHIFT compile to the code they were.
template <bool SHIFT, typename T, typename F>
__device__ __forceinline__ void at_row(const RowLayout<T>& L, long long row, long long rows, long long n,
                                       long long begin, long long chunk, F f) {
  if constexpr (SHIFT) {
    RowLayout<T> R = L;
    const long long off = shift_row(R, row, rows, n, begin, chunk);
    f(static_cast<const RowLayout<T>&>(R), off);
  } else {
    f(L, row * n + begin);
  }
}

// Pack p of a segment with the elements outside a shifted row set to `fill` (other layouts: v as it is).
template <typename T>
__device__ __forceinline__ typename Vec16<T>::type row_pack(typename Vec16<T>::type v, int p, const RowLayout<T>& L,
                                                            float fill) {
  const int i = L.at(p);
  if (L.shifted && !L.whole(i))
#pragma unroll
    for (int e = 0; e < L.V; ++e) v.v[e] = L.mine(i + e) ? v.v[e] : cast<T>(fill);
  return v;
}

// r[p] <- the thread's packs of `src` (a segment start) for p < packs; elements past the segment
// end get `fill` (a value neutral for the caller's reductions), so no later pass needs a bounds test.
template <typename T, int MAXP>
__device__ __forceinline__ void load_packs(typename Vec16<T>::type (&r)[MAXP], const T* src, const RowLayout<T>& L,
                                           float fill) {
  typedef typename Vec16<T>::type P;
  const T f = cast<T>(fill);
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    if (p < L.packs) {
      const int i = L.at(p);
      if (L.aligned) {
        if (L.inside(p)) {
          r[p] = *reinterpret_cast<const P*>(src + i);
        } else {
#pragma unroll
          for (int e = 0; e < L.V; ++e) r[p].v[e] = f;
        }
      } else if (L.shifted) {
        // a pack across the row's end holds another row's elements (read, not used) or, at the matrix's
        // end, nothing: element by element there. (Packs past the row: the fill alone, so that a warp whose
        // groups hold such packs does not step through the element loads.)
        if (i >= L.len) {
#pragma unroll
          for (int e = 0; e < L.V; ++e) r[p].v[e] = f;
        } else if (L.whole(i) || L.readable) {
          r[p] = row_pack<T>(*reinterpret_cast<const P*>(src + i), p, L, fill);
        } else {
#pragma unroll
          for (int e = 0; e < L.V; ++e) r[p].v[e] = L.mine(i + e) ? src[i + e] : f;
        }
      } else {
#pragma unroll
        for (int e = 0; e < L.V; ++e) r[p].v[e] = i + e < L.len ? src[i + e] : f;
      }
    }
  }
}

// Asynchronous 16-byte copies global -> shared (sm_80+, no registers held while in flight).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
// The same for the first `bytes` (< 16) of the 16: the rest of the slot zero, nothing read past them.
__device__ __forceinline__ void cp_async16_part(void* smem, const void* gmem, int bytes) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// The next row's packs, copied asynchronously while the current row is reduced, exchanged and
// written (rows then overlap within a block). Slot p of thread t is stage[p * blockDim.x + t]: a warp's
// 16-byte accesses are contiguous (no bank conflicts), and a thread reads back only its own slots, so
// no barrier is needed. Aligned segments only; unstage_packs fills what stage_packs skipped.
template <typename T, int MAXP>
__device__ __forceinline__ void stage_packs(typename Vec16<T>::type* stage, const T* src, const RowLayout<T>& L) {
#pragma unroll
  for (int p = 0; p < MAXP; ++p)
    if (p < L.packs && L.inside(p)) cp_async16(stage + p * blockDim.x + threadIdx.x, src + L.at(p));
}
// The same for a shifted row (shift_row): its whole packs, the matrix's last pack only up to the matrix's end.
template <typename T, int MAXP>
__device__ __forceinline__ void stage_shifted_packs(typename Vec16<T>::type* stage, const T* src,
                                                    const RowLayout<T>& L) {
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    const int i = L.at(p);
    if (p < L.packs && i < L.len) {
      if (!L.readable && i + L.V > L.len)
        cp_async16_part(stage + p * blockDim.x + threadIdx.x, src + i, (L.len - i) * (int)sizeof(T));
      else
        cp_async16(stage + p * blockDim.x + threadIdx.x, src + i);
    }
  }
}
// Pack slots of a shifted row staged by stage_shifted_packs into registers, the elements outside the row `fill`.
template <typename T, int MAXP>
__device__ __forceinline__ void unstage_shifted_packs(typename Vec16<T>::type (&r)[MAXP],
                                                      const typename Vec16<T>::type* stage, const RowLayout<T>& L,
                                                      float fill) {
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    if (p < L.packs) {
      if (L.at(p) < L.len) {
        r[p] = row_pack<T>(stage[p * blockDim.x + threadIdx.x], p, L, fill);
      } else {
#pragma unroll
        for (int e = 0; e < L.V; ++e) r[p].v[e] = cast<T>(fill);
      }
    }
  }
}
template <typename T, int MAXP>
__device__ __forceinline__ void unstage_packs(typename Vec16<T>::type (&r)[MAXP], const typename Vec16<T>::type* stage,
                                              const RowLayout<T>& L, float fill) {
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    if (p < L.packs) {
      if (L.inside(p)) {
        r[p] = stage[p * blockDim.x + threadIdx.x];
      } else {
#pragma unroll
        for (int e = 0; e < L.V; ++e) r[p].v[e] = cast<T>(fill);
      }
    }
  }
}

// cp_async_wait<n>() for a run-time n <= MAX.
template <int MAX>
__device__ __forceinline__ void cp_async_wait_dyn(int n) {
  if (n >= MAX) {
    cp_async_wait<MAX>();
  } else if constexpr (MAX > 0) {
    cp_async_wait_dyn<MAX - 1>(n);
  }
}

// An optimisation barrier on register packs: the compiler must assume they changed, so it converts
// them again in the next pass instead of keeping the previous pass's float values live (which would
// double the registers a half-type row needs and spill).
// Packs before FROM are left alone (dead after the previous pass, they need no registers).
template <typename T, int MAXP, int FROM = 0>
__device__ __forceinline__ void opaque(typename Vec16<T>::type (&r)[MAXP]) {
#pragma unroll
  for (int p = FROM; p < MAXP; ++p) {
    unsigned* w = reinterpret_cast<unsigned*>(&r[p]);
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(w[i]));
  }
}

// A staged row loop's first step: the row at `off` copied into the shared slots s before the loop
// (each iteration's load_row then takes it and stages the next). Nothing without STAGE. STAGE 2 (two
// rows ahead): also the row at off + step (when any2) into the second set of slots, s + MAXP * blockDim.x.
template <int STAGE, typename T, int MAXP>
__device__ __forceinline__ void stage_first(typename Vec16<T>::type* s, const T* a, long long off, bool any,
                                            const RowLayout<T>& L, long long step = 0, bool any2 = false) {
  if (STAGE && any) {
    stage_packs<T, MAXP>(s, a + off, L);
    cp_async_commit();
    if (STAGE == 2) {
      if (any2) stage_packs<T, MAXP>(s + MAXP * blockDim.x, a + off + step, L);
      cp_async_commit();  // possibly empty: load_row's wait counts groups
    }
  }
}

// The same for a backward row's two inputs (x or y, and dy) into the slots sa / sb, one copy group.
template <typename T, int MAXP>
__device__ __forceinline__ void stage_first_pair(typename Vec16<T>::type* sa, typename Vec16<T>::type* sb,
                                                 const T* a, const T* b, long long off, bool any,
                                                 const RowLayout<T>& L) {
  if (any) {
    stage_packs<T, MAXP>(sa, a + off, L);
    stage_packs<T, MAXP>(sb, b + off, L);
    cp_async_commit();
  }
}

// One input row at `off` into registers (past-the-end elements `fill`). STAGE: from the shared slots s
// (filled by stage_packs for this row), and with has_next the row at off + step is copied in behind it
// (STAGE 2: s is this row's set of slots and off + step the row two ahead; the other set's copy stays
// in flight).
template <int STAGE, typename T, int MAXP>
__device__ __forceinline__ void load_row(typename Vec16<T>::type (&r)[MAXP], typename Vec16<T>::type* s, const T* a,
                                         long long off, long long step, bool has_next, const RowLayout<T>& L,
                                         float fill) {
  if (STAGE) {
    cp_async_wait<STAGE == 2 ? 1 : 0>();
    unstage_packs<T, MAXP>(r, s, L, fill);
    opaque<T, MAXP>(r);  // the slots are read into registers before the next copy overwrites them
    if (has_next) stage_packs<T, MAXP>(s, a + off + step, L);
    cp_async_commit();
  } else {
    load_packs<T, MAXP>(r, a + off, L, fill);
  }
}

// The two inputs of a backward row (x or y, and dy) at `off` into registers, past-the-end elements 0.
// STAGE: they come from the shared slots sa / sb (filled by stage_packs for this row), and with has_next
// the row at off + step is copied in behind them while this one is processed.
template <bool STAGE, typename T, int MAXP>
__device__ __forceinline__ void load_row_pair(typename Vec16<T>::type (&ra)[MAXP], typename Vec16<T>::type (&rb)[MAXP],
                                              typename Vec16<T>::type* sa, typename Vec16<T>::type* sb,
                                              const T* a, const T* b, long long off, long long step,
                                              bool has_next, const RowLayout<T>& L) {
  if (STAGE) {
    cp_async_wait<0>();
    unstage_packs<T, MAXP>(ra, sa, L, 0.f);
    unstage_packs<T, MAXP>(rb, sb, L, 0.f);
    opaque<T, MAXP>(ra);  // the slots are read into registers before the next copies overwrite them
    opaque<T, MAXP>(rb);
    if (has_next) {
      stage_packs<T, MAXP>(sa, a + off + step, L);
      stage_packs<T, MAXP>(sb, b + off + step, L);
    }
    cp_async_commit();
  } else {
    load_packs<T, MAXP>(ra, a + off, L, 0.f);
    load_packs<T, MAXP>(rb, b + off, L, 0.f);
  }
}

// Writes pack p (only the elements inside the segment).
template <typename T>
__device__ __forceinline__ void store_pack(T* dst, const typename Vec16<T>::type& v, int p, const RowLayout<T>& L) {
  typedef typename Vec16<T>::type P;
  const int i = L.at(p);
  if (L.aligned) {
    if (L.inside(p)) *reinterpret_cast<P*>(dst + i) = v;
  } else if (L.shifted && L.whole(i)) {
    *reinterpret_cast<P*>(dst + i) = v;
  } else {
#pragma unroll
    for (int e = 0; e < L.V; ++e)
      if (L.shifted ? L.mine(i + e) : i + e < L.len) dst[i + e] = v.v[e];
  }
}

// The output packs out(p), p < packs, of a shifted row (shift_row; dst: the segment's first pack). Each element
// store at a row's end is a partial L2 sector write (bfloat16 rows of 100 written so at both ends: 5x slower
// than aligned rows, L2-bound), so the pack a sub-warp row shares with the next row of its warp is written once,
// whole: the next group hands its head pack over in `slots` (dynamic shared memory, one 16-byte slot a group of
// the block) and this row's group merges it into its tail pack. Only a warp's first and last rows, rows shorter
// than a pack and block rows write their ends element by element. Whole warps must call it together.
template <typename T, int MAXP, typename F>
__device__ __forceinline__ void store_shifted(T* dst, const RowLayout<T>& L, bool live, bool next_live,
                                              typename Vec16<T>::type* slots, F out) {
  typedef typename Vec16<T>::type P;
  const int gs = __ffs(L.G) - 1, gi = threadIdx.x >> gs, in_warp = threadIdx.x & 31;
  const bool pairs = L.G < 32 && L.len - L.lo >= L.V;  // a row of a pack or more shares a pack with one other
  const bool give = pairs && live && L.lane == 0 && L.lo > 0 && in_warp >= L.G;
  const bool take = pairs && live && next_live && in_warp < 32 - L.G;
  const P first = out(0);  // pack 0: handed over, or stored below
  if (give) slots[gi] = first;
  __syncwarp();
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    const int i = L.at(p);
    if (p < L.packs && live && i < L.len && !(p == 0 && give)) {
      P o = p == 0 ? first : out(p);
      // __stwb: stored as a P or an int4, NVVM split the pack into four 4-byte stores
      if (L.whole(i)) {
        __stwb(reinterpret_cast<int4*>(dst + i), reinterpret_cast<const int4&>(o));
      } else if (take && i >= L.lo) {  // the tail, shared with the next row
        const P next = slots[gi + 1];
#pragma unroll
        for (int e = 0; e < L.V; ++e) o.v[e] = i + e < L.len ? o.v[e] : next.v[e];
        __stwb(reinterpret_cast<int4*>(dst + i), reinterpret_cast<const int4&>(o));
      } else {
#pragma unroll
        for (int e = 0; e < L.V; ++e)
          if (L.mine(i + e)) dst[i + e] = o.v[e];
      }
    }
  }
  __syncwarp();  // the slots are read before the next row's hand-over
}

// Pack p of a per-column vector (weight / bias; `base` already offset to the segment), or `fill`
// in every element when the vector is absent.
// NC loads through the read-only path (__ldg): a second pass over the same columns then issues a
// different instruction, so the compiler reloads (a cache hit) instead of keeping the first pass's
// values live in registers.
// For a half type every branch yields the pack as four 32-bit words, so the branches meet in 4
// registers (8 elements merged one by one cost a PRMT each); wider types keep separate returns (the
// merged form made the float backward spill).
template <typename T, bool NC = false>
__device__ __forceinline__ typename Vec16<T>::type column_pack(const T* base, int p, const RowLayout<T>& L, float fill) {
  typedef typename Vec16<T>::type P;
  const int i = L.at(p);
  if constexpr (sizeof(T) == 2) {
    union {
      int4 raw;
      P v;
    } u;
    if (base != nullptr && L.aligned && L.inside(p)) {
      u.raw = NC ? __ldg(reinterpret_cast<const int4*>(base + i)) : *reinterpret_cast<const int4*>(base + i);
    } else {
#pragma unroll
      for (int e = 0; e < L.V; ++e) u.v.v[e] = base != nullptr && !L.aligned && i + e < L.len ? base[i + e] : cast<T>(fill);
    }
    return u.v;
  } else {
    P v;
    if (base == nullptr) {
#pragma unroll
      for (int e = 0; e < L.V; ++e) v.v[e] = cast<T>(fill);
      return v;
    }
    if (L.aligned) {
      if (L.inside(p)) {
        if (!NC) return *reinterpret_cast<const P*>(base + i);
        const int4 raw = __ldg(reinterpret_cast<const int4*>(base + i));
        return *reinterpret_cast<const P*>(&raw);
      }
#pragma unroll
      for (int e = 0; e < L.V; ++e) v.v[e] = cast<T>(fill);
    } else {
#pragma unroll
      for (int e = 0; e < L.V; ++e) v.v[e] = i + e < L.len ? base[i + e] : cast<T>(fill);
    }
    return v;
  }
}

// The per-column vector (weight / bias) under a shifted row's pack (shift_row): its V elements from column c0 (the
// pack's first element's column: negative for a head pack), `fill` outside [0, n) or everywhere when base is null. A
// pack inside the row (`whole`) reads 32-bit words from the vector's 16-byte aligned base, cached: a half type's
// window on an odd column takes one word more and a funnel shift a word.
template <typename T>
__device__ __forceinline__ typename Vec16<T>::type column_window(const T* base, int c0, int n, bool whole, float fill) {
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N;
  P v;
  if (base != nullptr && whole) {
    if constexpr (sizeof(T) == 2) {
      const unsigned* wd = reinterpret_cast<const unsigned*>(base) + (c0 >> 1);
      const int odd = c0 & 1;
      unsigned u[5];
#pragma unroll
      for (int k = 0; k < 4; ++k) u[k] = __ldg(wd + k);
      u[4] = odd ? __ldg(wd + 4) : 0u;  // (its word holds column c0 + 7: inside the vector)
      unsigned* o = reinterpret_cast<unsigned*>(&v);
#pragma unroll
      for (int k = 0; k < 4; ++k) o[k] = __funnelshift_r(u[k], u[k + 1], 16 * odd);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) v.v[e] = __ldg(base + c0 + e);
    }
    return v;
  }
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const int c = c0 + e;
    v.v[e] = base != nullptr && c >= 0 && c < n ? base[c] : cast<T>(fill);
  }
  return v;
}

// Pack p's per-column vector: column_pack, or under a shifted row's pack (shift_row) column_window.
template <typename T, bool NC = false>
__device__ __forceinline__ typename Vec16<T>::type column_at(const T* base, int p, const RowLayout<T>& L, float fill) {
  if (!L.shifted) return column_pack<T, NC>(base, p, L, fill);
  const int i = L.at(p);
  return column_window<T>(base, i - L.lo, L.len - L.lo, L.whole(i), fill);
}

// A forward kernel's compile-time row group GT: 0 the run-time arguments G / parts / aligned; 1..32 a sub-warp
// group of GT threads, ROW_BLOCK a block a row, both one aligned segment. Sets the arguments to what GT says,
// so that every test of them folds (log_softmax float32, G 8: 1296 -> 392 SASS instructions).
constexpr int ROW_BLOCK = 1024;
// __launch_bounds__ of the forward kernels: unstaged block rows (GT ROW_BLOCK, STAGE 0) come in blocks of <= 256
// threads (the host stages larger ones), bounded for 5 resident an SM (48 registers; at 50-56 only 4 fit: 8192² bf16
// layer_norm 71.6 -> 69.2 us, softmax 68.4 -> 65.5, 4096² f32 softmax 33.4 -> 32.7), else FwdThreads, one an SM.
template <typename T, int STAGE, int GT> struct FwdBounds {
  static constexpr bool small = GT == ROW_BLOCK && !STAGE && sizeof(T) < 8;
  static constexpr int threads = small ? 256 : FwdThreads<T>::value, blocks = small ? 5 : 1;
};
template <int GT>
__device__ __forceinline__ void fix_group(int& G, int& parts, int& aligned) {
  if (GT) {
    G = GT == ROW_BLOCK ? (int)blockDim.x : GT;
    parts = aligned = 1;
    if (GT == ROW_BLOCK) __builtin_assume(G > 32);
  }
}

// The mask of the group's lanes inside the warp (for shuffles when groups of one warp may leave
// their row loop at different iterations).
__device__ __forceinline__ unsigned group_mask(int G) {
  if (G >= 32) return 0xffffffffu;
  return ((1u << G) - 1u) << ((threadIdx.x & 31) & ~(G - 1));
}

// A thread's place in the row grid: groups of G threads (a power of two) a row segment, gpb groups a
// block, `parts` blocks a row; block b takes segment `part` = b % parts of the rows of its group gi in row
// group rg = b / parts, row groups stepping by nrg = grid / parts. Shifts by log2 G, not divisions (~20
// instructions each; a thread on 65536x128 executes ~650). (Skipping the divisions by parts where it is 1
// spilled the staged float rms forward.)
// lead: the group's place in its warp (0 for a group of a warp or more). softmax_fwd / softmax_bwd loop while
// the warp's first group has a row (row - lead < rows), so whole warps reach the shuffles and their mask is
// the constant full one (no divergence check and WARPSYNC a step); a group past the last row loads the last
// row again and stores nothing.
// block: G is the block (a compile-time fact the shifts cannot see).
struct RowGrid {
  int gpb, gi, part, lead;
  long long nrg, rg;
  __device__ __forceinline__ RowGrid(int G, int parts, bool block = false) {
    const int gs = __ffs(G) - 1;
    gpb = block ? 1 : blockDim.x >> gs;
    gi = block ? 0 : threadIdx.x >> gs;
    lead = G < 32 && !block ? (threadIdx.x & 31) >> gs : 0;
    part = blockIdx.x % parts;
    nrg = gridDim.x / parts;
    rg = blockIdx.x / parts;
  }
};

// Reduction over the threads sharing a row segment: a shuffle butterfly for a sub-warp group, the
// block reduction (two barriers, fixed order) when the group is the block. Every thread gets it.
// ONCE: one barrier (block_reduce's ONCE: the caller alternates scratch buffers, see RowScratch).
template <typename Op, bool ONCE = false, typename A>
__device__ __forceinline__ A row_reduce(A v, int G, unsigned mask, A* scratch /* 32 */) {
  return G > 32 ? block_reduce<Op, ONCE>(v, scratch) : group_reduce<Op>(v, G, mask);
}

// Scratch for one-barrier block reductions (ONCE) in a row loop: buffer `at(k)` of the current row, the
// two sets alternating by row, so that a buffer is written again only after a later barrier (the next
// row's reduction) has ended every read of it. S sets of 32 entries a row.
// odd(), the row's parity, also picks a twice-staged row's set of slots (STAGE 2).
template <typename A, int S>
struct RowScratch {
  A* base;
  int flip = 0;
  __device__ __forceinline__ A* at(int k) const { return base + flip + 32 * k; }
  __device__ __forceinline__ void next_row() { flip ^= 32 * S; }
  __device__ __forceinline__ int odd() const { return flip != 0; }
};

// Two sums over the threads sharing a row segment, with one pair of barriers on the block path (ONCE:
// one barrier, as row_reduce). scratch: 64 entries.
template <bool ONCE = false, typename A>
__device__ __forceinline__ void row_reduce2(A& a, A& b, int G, unsigned mask, A* scratch) {
  if (G <= 32) {
    group_reduce2<A>(a, b, G, mask);
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  group_reduce2<A>(a, b, 32);
  if (lane == 0) {
    scratch[warp] = a;
    scratch[32 + warp] = b;
  }
  __syncthreads();
  a = lane < warps ? scratch[lane] : A(0);
  b = lane < warps ? scratch[32 + lane] : A(0);
  group_reduce2<A>(a, b, 32);
  if (!ONCE) __syncthreads();
}

// Parts per row the one-launch exchange supports (its shared copy of a row's slots: 2 per part).
constexpr int MAX_EXCHANGE_PARTS = 256;
template <typename A>
__device__ __forceinline__ A* parts_copy() {
  __shared__ A got[2 * MAX_EXCHANGE_PARTS];
  return got;
}

// Blocks part = 0 .. parts-1 of a row each publish K accumulators into slots[row][part][K], then wait
// until every part of the row has published, then copy the row's slots (read through L2: other
// blocks wrote them) into shared memory; the caller reads that copy in part order, so every block
// combines identically (deterministic). Needs all blocks of a row resident at once: the host sizes
// the grid for that. The copy is rewritten by the next row's exchange only after the caller's block
// reductions (their barriers end every read of it).
// `sync` holds one counter per row, zero before the launch. Called by every thread of the block.
template <typename A, int K>
__device__ __forceinline__ const A* exchange_parts(const A (&v)[K], A* slots, int* sync, long long row, int part,
                                                   int parts) {
  A* s = slots + row * parts * K;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) s[part * K + k] = v[k];
    __threadfence();
    atomicAdd(sync + row, 1);
    while (atomicAdd(sync + row, 0) < parts) __nanosleep(64);
    __threadfence();
  }
  __syncthreads();
  A* got = parts_copy<A>();
  for (int i = threadIdx.x; i < parts * K; i += blockDim.x) got[i] = __ldcg(s + i);
  __syncthreads();
  return got;
}

// The exchange for float accumulators, in one L2 round trip after the last part publishes: each
// value travels with its tag in one 64-bit word (tag 1 in the high half, the float's bits in the low
// half; the words are zero before the launch), so a reader that sees the tag sees the value: no
// fences, no counters. Thread i of the block polls word i (i < parts * K) until tagged and copies the
// value into shared memory, which it returns; the caller reads it in part order (deterministic).
// Needs all blocks of a row resident at once, as exchange_parts.
__device__ __forceinline__ void st_relaxed_u64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long ld_relaxed_u64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
template <int K>
__device__ __forceinline__ void publish_tagged(const float (&v)[K], unsigned long long* words, long long row, int part,
                                               int parts) {
  unsigned long long* s = words + row * parts * K;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) st_relaxed_u64(s + part * K + k, (1ull << 32) | __float_as_uint(v[k]));
  }
}
// The thread's first word of a row (word threadIdx.x, or 0 past the row's words), loaded early so that its
// L2 round trip overlaps other work; collect_tagged then polls only if it was not yet tagged.
template <int K>
__device__ __forceinline__ unsigned long long peek_tagged(const unsigned long long* words, long long row, int parts) {
  return threadIdx.x < parts * K ? ld_relaxed_u64(words + row * parts * K + threadIdx.x) : 0ull;
}
template <int K>
__device__ __forceinline__ const float* collect_tagged(const unsigned long long* words, long long row, int parts,
                                                       unsigned long long early = 0) {
  float* got = parts_copy<float>();
  const unsigned long long* s = words + row * parts * K;
  for (int i = threadIdx.x; i < parts * K; i += blockDim.x) {
    unsigned long long x = i == threadIdx.x ? early : 0ull;
    while ((x >> 32) == 0 && ((x = ld_relaxed_u64(s + i)) >> 32) == 0) __nanosleep(32);
    got[i] = __uint_as_float((unsigned)x);
  }
  __syncthreads();
  return got;
}
template <int K>
__device__ __noinline__ const float* exchange_tagged(const float (&v)[K], unsigned long long* words, long long row,
                                                        int part, int parts) {
  publish_tagged<K>(v, words, row, part, parts);
  return collect_tagged<K>(words, row, parts);
}

// Op over term(q) of the parts q = 0 .. parts-1 of a row (e.g. read from collect_tagged's copy), by every
// warp alike: lane l takes parts l, l + 32, ..., then a butterfly. No block barrier; every warp of every
// block of the row gets the same value (deterministic).
template <typename Op, typename A = float, typename F>
__device__ __forceinline__ A warp_combine(int parts, F term) {
  A v = Op::template identity<A>();
#pragma unroll 1
  for (int q = threadIdx.x & 31; q < parts; q += 32) v = Op::combine(v, term(q));
  return group_reduce<Op>(v, 32);
}

// Pack p of input t of this thread in a pipelined_parts set.
template <int MAXP, typename P>
__device__ __forceinline__ P own_slot(const P* set, int t, int p) {
  return set[(t * MAXP + p) * blockDim.x + threadIdx.x];
}

// f(p) for each pack p of this thread that lies inside its segment (of a pipelined_parts set: own_slot).
template <int MAXP, typename T, typename F>
__device__ __forceinline__ void for_own_packs(const RowLayout<T>& L, F f) {
#pragma unroll
  for (int p = 0; p < MAXP; ++p)
    if (p < L.packs && L.inside(p)) f(p);
}

// Rows split over `parts` co-resident blocks, pipelined: each block's segment of a row is staged in one
// of three sets of shared slots (TENSORS inputs of MAXP packs per thread each), and while row j's partial
// statistics travel to the row's other blocks, row j + 1 is reduced and row j + 2 is loading. So no
// block waits on the exchange with nothing to do (the one-launch exchange above waits once per row).
//   reduce(row, set): the set holds this thread's packs of the row (slot p of input t of thread i at
//                     set[(t * MAXP + p) * blockDim.x + i]); publish the block's partials (publish_tagged)
//   write(row, set, early): collect the row's partials (collect_tagged, K words a part), combine them, write
//                     the output; with PEEK, `early` is the thread's word of them read before reduce (peek_tagged:
//                     256x262144 f32 softmax forward 143.3 -> 139.0 us, layer_norm 143.0 -> 141.4; the backwards
//                     measured equal or slower: rms_norm 198.1 -> 201.7), else 0
// The block's rows are blockIdx.x / parts + k * (gridDim.x / parts); the callers' reductions must
// tolerate a reduce directly after a reduce (RowScratch's alternating sets). Aligned segments, or with SHIFT shifted
// rows: the callers lay each row out with shift_row (the elements outside the row are in its set: row_pack).
template <typename T, int MAXP, int TENSORS, int K, bool PEEK, bool SHIFT = false, typename Reduce, typename Write>
__device__ __forceinline__ void pipelined_parts(const T* const (&src)[TENSORS], long long rows, long long n,
                                                long long begin, long long chunk, int parts, const RowLayout<T>& L,
                                                const unsigned long long* words, Reduce reduce, Write write) {
  typedef typename Vec16<T>::type P;
  extern __shared__ int4 staged[];
  const int per_set = TENSORS * MAXP * blockDim.x;
  const long long first = blockIdx.x / parts, step = gridDim.x / parts;
  const long long count = first < rows ? (rows - 1 - first) / step + 1 : 0;
  auto set = [&](long long j) { return reinterpret_cast<P*>(staged) + (int)(j % 3) * per_set; };
  auto stage = [&](long long j) {
    if (j < count)
      at_row<SHIFT>(L, first + j * step, rows, n, begin, chunk, [&](const RowLayout<T>& R, long long off) {
#pragma unroll
        for (int t = 0; t < TENSORS; ++t) {
          if constexpr (SHIFT) stage_shifted_packs<T, MAXP>(set(j) + t * MAXP * blockDim.x, src[t] + off, R);
          else stage_packs<T, MAXP>(set(j) + t * MAXP * blockDim.x, src[t] + off, R);
        }
      });
    cp_async_commit();  // possibly empty: the waits count groups
  };
  stage(0);
  stage(1);
  wait_prerequisites();  // launched after zero_words (the host's pipelined launch): the words are zero past here
  for (long long j = 0; j <= count; ++j) {
    if (j < count) cp_async_wait<1>();  // row j's group (row j + 1's may still be in flight)
    // Row j - 1's words, published by its parts a row ago: their L2 round trip overlaps reduce(j).
    const unsigned long long early = PEEK && j > 0 ? peek_tagged<K>(words, first + (j - 1) * step, parts) : 0ull;
    if (j < count) reduce(first + j * step, set(j));
    if (j > 0) write(first + (j - 1) * step, set(j - 1), early);
    stage(j + 2);  // into the set row j - 1 just left
  }
}

// The exchange words of a pipelined_parts launch set to zero. That launch follows as a programmatic dependent
// (sm_90): its blocks start at once, stage their first rows and wait for this grid only before the first
// publish, so the zeroing costs no launch gap (a memset before it did). Grid-stride, any geometry.
__global__ void zero_words(unsigned long long* words, long long count) {
  launch_dependents();
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count; i += (long long)gridDim.x * blockDim.x)
    words[i] = 0ull;
}

// A value of the parts' slots: the exchange's shared copy (one launch) or global memory written by
// the previous launch (two launches): a plain generic load either way.
template <typename A>
__device__ __forceinline__ A ld_part(const A* p) {
  return *p;
}

// The partial statistics of a row split over `parts` blocks, by launch phase:
//   0: one launch, the blocks of a row co-resident: exchange_tagged for float accumulators (`slots`
//      then holds 64-bit words), exchange_parts for double (publish, wait, read);
//   3: as 0 but exchange_parts (counters) for any accumulator (the measured alternative);
//   1: first of two launches: publish only (the caller then skips the row's output);
//   2: second launch: read what launch 1 published (no co-residency needed, one more read of x).
template <typename A, int K>
__device__ __forceinline__ const A* row_parts(const A (&v)[K], A* slots, int* sync, long long row, int part, int parts,
                                              int phase) {
  if (phase == 0 || phase == 3) {
    if constexpr (sizeof(A) == 4) {
      if (phase == 0) return exchange_tagged<K>(v, reinterpret_cast<unsigned long long*>(slots), row, part, parts);
    }
    return exchange_parts<A, K>(v, slots, sync, row, part, parts);
  }
  A* s = slots + row * parts * K;
  if (phase == 1 && threadIdx.x == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) s[part * K + k] = v[k];
  }
  return s;
}

// out[k] = sum over the parts' slots s[q * K + k] (the exchange's copy, collect_tagged's, or global memory
// written by a previous launch), by every warp alike (warp_combine): the same sums in every block of a row.
template <typename A, int K>
__device__ __forceinline__ void sum_parts(const A* s, int parts, A (&out)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) out[k] = warp_combine<SumOp, A>(parts, [&](int q) { return ld_part(s + q * K + k); });
}

// Tiled rows (softmax_tiled, norm_fwd_tiled): block b's tile_rows consecutive rows of a C-contiguous matrix (fewer in
// the last block) are one contiguous stretch of `count` elements from element `base`, 16-byte aligned when the matrix
// is and tile_rows is a multiple of 32, so it moves between global and shared memory (`slots`, 16 bytes each) as whole
// packs whatever the row length: no row end is masked.
struct RowTile {
  long long row0, base;  // the tile's first row and element
  int nrows, count;      // its rows and elements
  __device__ __forceinline__ RowTile(long long rows, int n, int tile_rows) {
    row0 = (long long)blockIdx.x * tile_rows;
    base = row0 * n;
    nrows = (int)min((long long)tile_rows, rows - row0);
    count = nrows * n;
  }
};
// The block's copies of a tile in (cp.async), committed; the caller waits (cp_async_wait<0>, __syncthreads) before
// reading. The matrix's last part pack goes element by element, the rest of its slot zero: a partial cp.async reads
// only its bytes, but compute-sanitizer's initcheck counts all 16 as read.
template <typename T>
__device__ __forceinline__ void tile_in(int4* slots, const T* src, const RowTile& t) {
  constexpr int V = Vec16<T>::N;
  for (int q = threadIdx.x; q * V < t.count; q += blockDim.x) {
    const T* const p = src + t.base + (long long)q * V;
    const int left = t.count - q * V;
    if (left >= V) {
      cp_async16(slots + q, p);
    } else {
      slots[q] = make_int4(0, 0, 0, 0);
      T* const s = reinterpret_cast<T*>(slots + q);
#pragma unroll
      for (int i = 0; i < V - 1; ++i)
        if (i < left) s[i] = p[i];
    }
  }
}
// The tile back to global memory: 16-byte stores (__stwb: NVVM splits plain pack stores), the last part pack
// element by element. After a __syncthreads that follows the tile's last write.
template <typename T>
__device__ __forceinline__ void tile_out(T* dst, const int4* slots, const RowTile& t) {
  constexpr int V = Vec16<T>::N;
  const T* const e = reinterpret_cast<const T*>(slots);
  for (int q = threadIdx.x; q * V < t.count; q += blockDim.x) {
    if (q * V + V <= t.count) {
      __stwb(reinterpret_cast<int4*>(dst + t.base + (long long)q * V), slots[q]);
    } else {
      for (int i = q * V; i < t.count; ++i) dst[t.base + i] = e[i];
    }
  }
}
// Op (SumOp, MaxOp) over f(0) .. f(n - 1) as four independent chains (k mod 4), combined at the end: a thread's row
// loop in a tile is latency-bound, one chain would wait on each step.
template <typename Op, typename A, typename F>
__device__ __forceinline__ A fold4(int n, A init, F f) {
  A p[4] = {init, init, init, init};
  int k = 0;
  for (; k + 4 <= n; k += 4)
#pragma unroll
    for (int j = 0; j < 4; ++j) p[j] = Op::combine(p[j], f(k + j));
  for (; k < n; ++k) p[0] = Op::combine(p[0], f(k));
  return Op::combine(Op::combine(p[0], p[1]), Op::combine(p[2], p[3]));
}
// A thread's span of n elements of a row in a tile, a, and the same span of a second tile, g (the forward passes a
// twice): Op over f(a_j, g_j), and a_j = f(a_j, g_j, j) for every j (j: the element's index in the span, for
// per-column operands such as norm's weight). 2-byte types go by 32-bit words from WORDS_FROM elements, two elements
// a load or store and a step (half the shared-memory instructions of the thread's chain); a span's first element
// shares its word with the span before when it starts at an odd element, its last with the span after when it ends at
// an even one: those two go alone. Shorter spans, and other types, go element by element, four chains (fold4): on a
// few elements a row the words' head / tail steps cost more than they save (H100, bf16 8388608x2 softmax 39.2 us by
// elements, 57.9 by words; 5592405x3 34.8 / 44.8; norm 16777216x1 layer 83.7 / 109.6).
constexpr int WORDS_FROM = 8;
template <typename Op, typename A, typename T, typename F>
__device__ __forceinline__ A fold_span(const T* a, const T* g, int n, A init, F f) {
  if constexpr (sizeof(T) == 2) {
    if (n >= WORDS_FROM) {
      const int head = (reinterpret_cast<size_t>(a) & 2) != 0, words = (n - head) >> 1;
      const unsigned* const wa = reinterpret_cast<const unsigned*>(a + head);
      const unsigned* const wg = reinterpret_cast<const unsigned*>(g + head);
      A r = fold4<Op>(words, init, [&](int k) {
        const float2 x = unpack2<T>(wa[k]), y = unpack2<T>(wg[k]);
        return Op::combine(f(x.x, y.x), f(x.y, y.y));
      });
      if (head) r = Op::combine(r, f(cast<A>(a[0]), cast<A>(g[0])));
      if ((n - head) & 1) r = Op::combine(r, f(cast<A>(a[n - 1]), cast<A>(g[n - 1])));
      return r;
    }
  }
  return fold4<Op>(n, init, [&](int k) { return f(cast<A>(a[k]), cast<A>(g[k])); });
}
template <typename A, typename T, typename F>
__device__ __forceinline__ void map_span(T* a, const T* g, int n, F f) {
  if constexpr (sizeof(T) == 2) {
    if (n >= WORDS_FROM) {
      const int head = (reinterpret_cast<size_t>(a) & 2) != 0, words = (n - head) >> 1;
      const unsigned* const wg = reinterpret_cast<const unsigned*>(g + head);
      unsigned* const wa = reinterpret_cast<unsigned*>(a + head);
#pragma unroll 4
      for (int k = 0; k < words; ++k) {
        const float2 x = unpack2<T>(wa[k]), y = unpack2<T>(wg[k]);
        const int j = head + 2 * k;
        store2(reinterpret_cast<T*>(wa + k), f(x.x, y.x, j), f(x.y, y.y, j + 1));
      }
      if (head) a[0] = cast<T>(f(cast<A>(a[0]), cast<A>(g[0]), 0));
      if ((n - head) & 1) a[n - 1] = cast<T>(f(cast<A>(a[n - 1]), cast<A>(g[n - 1]), n - 1));
      return;
    }
  }
#pragma unroll 4
  for (int k = 0; k < n; ++k) a[k] = cast<T>(f(cast<A>(a[k]), cast<A>(g[k]), k));
}
// Where lane j of the GL threads sharing a row of n elements in a tile starts (j = GL: n): near j * n / GL, at
// j * (32 / GL) words past a multiple of 32 words, so the GL lanes of a warp's rows read GL disjoint bank ranges
// (rows n elements apart: conflict-free for odd n of 4-byte elements; the row's lanes take a chain each).
template <typename T, int GL>
__device__ __forceinline__ int lane_start(int n, int j) {
  constexpr int period = 128 / (int)sizeof(T), unit = period / GL;  // elements of 32 words, of 32 / GL words
  int o = 0;
  for (int q = 1; q <= j && q < GL; ++q) {
    const int t = q * n / GL - q * unit;  // the start nearest q * n / GL in q * unit + period * m
    const int m = (t >= 0 ? t + period / 2 : t - period / 2 + 1) / period;
    o = min(max(q * unit + period * m, o), n);
  }
  return j >= GL ? n : o;
}
