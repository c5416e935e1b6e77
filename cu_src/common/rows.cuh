// Row-wise kernels (softmax, normalisation): a row segment held in registers as 16-byte packs,
// reductions over the threads that share a row, and the exchange between the blocks that share one.
//
// Layout: a row (or one of its `parts` segments) is handled by a group of G threads (G a power of
// two <= 32, or the whole block). Thread `lane` of the group owns packs p = 0 .. packs-1, each of V
// consecutive elements starting at element (p * G + lane) * V of the segment, so a group's loads of
// one p are contiguous. `aligned` means every pointer is 16-byte aligned and the row length is a
// multiple of V: packs move as one 16-byte access; otherwise each element moves alone (same layout).
#pragma once
#include "reduce.cuh"

// 16-byte packs a thread holds per row tensor: 16 elements (4 for float64), so that a kernel holding
// two tensors (backward) stays within 64 registers, spill-free.
template <typename T> struct RowPacks { static constexpr int value = Vec16<T>::N == 4 ? 4 : 2; };
// Forward kernels hold one tensor: 4 packs (32 elements of a half type, 16 of float32, 8 of float64).
template <typename T> struct FwdPacks { static constexpr int value = sizeof(T) == 8 ? 2 : 4; };
// Resident blocks per SM the kernels' __launch_bounds__ ask for (float64's exp needs more registers).
template <typename T> struct RowMinBlocks { static constexpr int value = sizeof(T) == 8 ? 1 : 2; };

template <typename T> struct RowLayout {
  static constexpr int V = Vec16<T>::N;
  int len;  // elements of this segment (a segment fits one block's registers: < 2^31)
  int lane, G, packs;
  bool aligned;
  __device__ __forceinline__ int at(int p) const { return (p * G + lane) * V; }
};

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
        if (i < L.len) {
          r[p] = *reinterpret_cast<const P*>(src + i);
        } else {
#pragma unroll
          for (int e = 0; e < L.V; ++e) r[p].v[e] = f;
        }
      } else {
#pragma unroll
        for (int e = 0; e < L.V; ++e) r[p].v[e] = i + e < L.len ? src[i + e] : f;
      }
    }
  }
}

// An optimisation barrier on register packs: the compiler must assume they changed, so it converts
// them again in the next pass instead of keeping the previous pass's float values live (which would
// double the registers a half-type row needs and spill).
template <typename T, int MAXP>
__device__ __forceinline__ void opaque(typename Vec16<T>::type (&r)[MAXP]) {
#pragma unroll
  for (int p = 0; p < MAXP; ++p) {
    unsigned* w = reinterpret_cast<unsigned*>(&r[p]);
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(w[i]));
  }
}

// Writes pack p (only the elements inside the segment).
template <typename T>
__device__ __forceinline__ void store_pack(T* dst, const typename Vec16<T>::type& v, int p, const RowLayout<T>& L) {
  typedef typename Vec16<T>::type P;
  const int i = L.at(p);
  if (L.aligned) {
    if (i < L.len) *reinterpret_cast<P*>(dst + i) = v;
  } else {
#pragma unroll
    for (int e = 0; e < L.V; ++e)
      if (i + e < L.len) dst[i + e] = v.v[e];
  }
}

// Pack p of a per-column vector (weight / bias; `base` already offset to the segment), or `fill`
// in every element when the vector is absent.
// NC loads through the read-only path (__ldg): a second pass over the same columns then issues a
// different instruction, so the compiler reloads (a cache hit) instead of keeping the first pass's
// values live in registers.
template <typename T, bool NC = false>
__device__ __forceinline__ typename Vec16<T>::type column_pack(const T* base, int p, const RowLayout<T>& L, float fill) {
  typename Vec16<T>::type v;
  if (base == nullptr) {
#pragma unroll
    for (int e = 0; e < L.V; ++e) v.v[e] = cast<T>(fill);
    return v;
  }
  const int i = L.at(p);
  if (L.aligned) {
    if (i < L.len) {
      if (!NC) return *reinterpret_cast<const typename Vec16<T>::type*>(base + i);
      const int4 raw = __ldg(reinterpret_cast<const int4*>(base + i));
      return *reinterpret_cast<const typename Vec16<T>::type*>(&raw);
    }
#pragma unroll
    for (int e = 0; e < L.V; ++e) v.v[e] = cast<T>(fill);
  } else {
#pragma unroll
    for (int e = 0; e < L.V; ++e) v.v[e] = i + e < L.len ? base[i + e] : cast<T>(fill);
  }
  return v;
}

// The mask of the group's lanes inside the warp (for shuffles when groups of one warp may leave
// their row loop at different iterations).
__device__ __forceinline__ unsigned group_mask(int G) {
  if (G >= 32) return 0xffffffffu;
  return ((1u << G) - 1u) << ((threadIdx.x & 31) & ~(G - 1));
}

// Reduction over the threads sharing a row segment: a shuffle butterfly for a sub-warp group, the
// block reduction (two barriers, fixed order) when the group is the block. Every thread gets it.
template <typename Op, typename A>
__device__ __forceinline__ A row_reduce(A v, int G, unsigned mask, A* scratch /* 32 */) {
  return G > 32 ? block_reduce<Op>(v, scratch) : group_reduce<Op>(v, G, mask);
}

// Blocks part = 0 .. parts-1 of a row each publish K accumulators into slots[row][part][K], then wait
// until every part of the row has published; the caller then reads the row's slots with __ldcg
// (L2: another block wrote them) in part order, so every block combines identically
// (deterministic). Needs all blocks of a row resident at once: the host sizes the grid for that.
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
  return s;
}

// The partial statistics of a row split over `parts` blocks, by launch phase:
//   0: one launch, the blocks of a row co-resident: exchange_parts (publish, wait, read);
//   1: first of two launches: publish only (the caller then skips the row's output);
//   2: second launch: read what launch 1 published (no co-residency needed, one more read of x).
template <typename A, int K>
__device__ __forceinline__ const A* row_parts(const A (&v)[K], A* slots, int* sync, long long row, int part, int parts,
                                              int phase) {
  if (phase == 0) return exchange_parts<A, K>(v, slots, sync, row, part, parts);
  A* s = slots + row * parts * K;
  if (phase == 1 && threadIdx.x == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) s[part * K + k] = v[k];
  }
  return s;
}

// out[k] = sum over the parts' slots s[q * K + k]: thread t reads parts t, t + block, ... (parallel L2
// loads), then a block reduction in fixed order, so every block of a row gets the same sums.
template <typename A, int K>
__device__ __forceinline__ void sum_parts(const A* s, int parts, A (&out)[K], A* scratch) {
  A acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = A(0);
  for (int q = threadIdx.x; q < parts; q += blockDim.x)
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] += __ldcg(s + q * K + k);
#pragma unroll
  for (int k = 0; k < K; ++k) out[k] = block_reduce<SumOp>(acc[k], scratch);
}

template <typename A> __device__ __forceinline__ A fast_exp(A x);
template <> __device__ __forceinline__ float fast_exp<float>(float x) { return __expf(x); }
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
