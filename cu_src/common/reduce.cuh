// Reduction operators (NumPy NaN semantics) and warp / group / block reductions built on shuffles.
#pragma once
#include "types.cuh"

template <typename A> __device__ __forceinline__ A lowest();
template <> __device__ __forceinline__ float lowest<float>() { return __int_as_float(0xff800000); }
template <> __device__ __forceinline__ double lowest<double>() { return __longlong_as_double(0xfff0000000000000ULL); }
template <> __device__ __forceinline__ long long lowest<long long>() { return (long long)0x8000000000000000ULL; }
template <typename A> __device__ __forceinline__ A highest();
template <> __device__ __forceinline__ float highest<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double highest<double>() { return __longlong_as_double(0x7ff0000000000000ULL); }
template <> __device__ __forceinline__ long long highest<long long>() { return 0x7fffffffffffffffLL; }

struct SumOp {
  template <typename A> static __device__ __forceinline__ A identity() { return A(0); }
  template <typename A> static __device__ __forceinline__ A combine(A a, A b) { return a + b; }
};
// a != a is true only for NaN, so NaN wins from either side (like numpy.max); float uses the one
// instruction that does the same (max.NaN, sm_80+).
struct MaxOp {
  template <typename A> static __device__ __forceinline__ A identity() { return lowest<A>(); }
  template <typename A> static __device__ __forceinline__ A combine(A a, A b) { return (a > b || a != a) ? a : b; }
};
template <> __device__ __forceinline__ float MaxOp::combine<float>(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
struct MinOp {
  template <typename A> static __device__ __forceinline__ A identity() { return highest<A>(); }
  template <typename A> static __device__ __forceinline__ A combine(A a, A b) { return (a < b || a != a) ? a : b; }
};
template <> __device__ __forceinline__ float MinOp::combine<float>(float a, float b) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// Butterfly over `width` consecutive lanes (a power of two <= 32); every lane gets the result.
// `mask` names the lanes taking part (a sub-warp group whose partners may have left a loop).
// Unrolled with immediate offsets (a run-time width only predicates the steps). An offset below the
// width keeps a lane inside its group, so the shuffles need no width (one instruction less a step).
template <typename Op, typename A>
__device__ __forceinline__ A group_reduce(A v, int width, unsigned mask = 0xffffffffu) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    if (offset < width) v = Op::combine(v, __shfl_xor_sync(mask, v, offset));
  return v;
}

// Two sums over the same lanes, their shuffles interleaved (one latency chain instead of two).
template <typename A>
__device__ __forceinline__ void group_reduce2(A& a, A& b, int width, unsigned mask = 0xffffffffu) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    if (offset < width) {
      const A ta = __shfl_xor_sync(mask, a, offset), tb = __shfl_xor_sync(mask, b, offset);
      a += ta;
      b += tb;
    }
}

// Whole-block reduction (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// Fixed combination order: deterministic. Ends with a barrier so `scratch` may be reused; with ONCE it
// does not (one barrier instead of two): the caller then alternates scratch buffers so that another
// barrier comes between this call's reads of `scratch` and the buffer's next write.
template <typename Op, bool ONCE = false, typename A>
__device__ __forceinline__ A block_reduce(A v, A* scratch /* >= 32 entries */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = group_reduce<Op>(v, 32);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : Op::template identity<A>();
  v = group_reduce<Op>(v, 32);
  if (!ONCE) __syncthreads();
  return v;
}

// Reduction over `group` consecutive threads spanning whole warps (64..1024, a power of two); every
// thread of the group gets the result. Each group syncs on its own named barrier (ids 1..15), so
// groups of one block may run different trip counts. scratch: one slot per warp of the block.
template <typename Op, typename A>
__device__ __forceinline__ A multiwarp_reduce(A v, A* scratch, int group) {
  const int warp = threadIdx.x >> 5, first = (threadIdx.x & ~(group - 1)) >> 5, barrier = 1 + threadIdx.x / group;
  v = group_reduce<Op>(v, 32);
  if ((threadIdx.x & 31) == 0) scratch[warp] = v;
  asm volatile("bar.sync %0, %1;" ::"r"(barrier), "r"(group) : "memory");
  v = scratch[first];
  for (int w = 1; w < (group >> 5); ++w) v = Op::combine(v, scratch[first + w]);
  asm volatile("bar.sync %0, %1;" ::"r"(barrier), "r"(group) : "memory");
  return v;
}
