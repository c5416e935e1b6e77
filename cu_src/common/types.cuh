// Element types, float32 accumulation for half types, conversions and 16-byte packs.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef __half half;
typedef __nv_bfloat16 bfloat16;

// Accumulator of a type: float for float16/bfloat16/float32, double for float64, int64 for ints.
template <typename T> struct AccOf { typedef float type; };
template <> struct AccOf<double> { typedef double type; };
template <> struct AccOf<int> { typedef long long type; };
template <> struct AccOf<long long> { typedef long long type; };

// Conversions that go through float for the half types (no implicit half <-> integer paths).
template <typename To, typename From> struct Cast { static __device__ __forceinline__ To run(From x) { return static_cast<To>(x); } };
template <typename From> struct Cast<half, From> { static __device__ __forceinline__ half run(From x) { return __float2half_rn(static_cast<float>(x)); } };
template <typename From> struct Cast<bfloat16, From> { static __device__ __forceinline__ bfloat16 run(From x) { return __float2bfloat16_rn(static_cast<float>(x)); } };
template <typename To> struct Cast<To, half> { static __device__ __forceinline__ To run(half x) { return static_cast<To>(__half2float(x)); } };
template <typename To> struct Cast<To, bfloat16> { static __device__ __forceinline__ To run(bfloat16 x) { return static_cast<To>(__bfloat162float(x)); } };
template <> struct Cast<half, half> { static __device__ __forceinline__ half run(half x) { return x; } };
template <> struct Cast<bfloat16, bfloat16> { static __device__ __forceinline__ bfloat16 run(bfloat16 x) { return x; } };
template <typename To, typename From> __device__ __forceinline__ To cast(From x) { return Cast<To, From>::run(x); }

// Two consecutive elements (v 4-byte aligned) from two accumulator values: one paired conversion
// (one F2FP) for the half types instead of two conversions and a merge.
template <typename T, typename A> __device__ __forceinline__ void store2(T* v, A a, A b) {
  v[0] = cast<T>(a);
  v[1] = cast<T>(b);
}
__device__ __forceinline__ void store2(half* v, float a, float b) { *reinterpret_cast<__half2*>(v) = __floats2half2_rn(a, b); }
__device__ __forceinline__ void store2(bfloat16* v, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(v) = __floats2bfloat162_rn(a, b);
}

// The two elements of a 32-bit word of a half type, as floats (a bfloat16 by a shift or a mask).
template <typename T> __device__ __forceinline__ float2 unpack2(unsigned w);
template <> __device__ __forceinline__ float2 unpack2<half>(unsigned w) {
  return __half22float2(reinterpret_cast<const __half2&>(w));
}
template <> __device__ __forceinline__ float2 unpack2<bfloat16>(unsigned w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// N elements moved as one aligned access (16 bytes -> one LDG.128).
template <typename T, int N> struct alignas(sizeof(T) * N) Pack { T v[N]; };
template <typename T> struct Vec16 { static constexpr int N = 16 / sizeof(T); typedef Pack<T, N> type; };

// Elements from p to the next 16-byte boundary (p must be aligned to its element size).
template <typename T> __device__ __forceinline__ long long elems_to_aligned16(const T* p) {
  return (long long)(((16 - (reinterpret_cast<unsigned long long>(p) & 15)) & 15) / sizeof(T));
}
