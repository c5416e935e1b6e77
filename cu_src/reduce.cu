// Reductions: sum / mean / max / min over rows, columns or everything; deterministic two-pass,
// no floating-point atomics. Plus the original articles' ladder of full-sum kernels (float32, for teaching).
#include "common/reduce.cuh"

enum { OP_SUM = 0, OP_MEAN = 1, OP_MAX = 2, OP_MIN = 3 };
template <int OP> struct OpOf { typedef SumOp type; };  // mean sums, then scales once at the end
template <> struct OpOf<OP_MAX> { typedef MaxOp type; };
template <> struct OpOf<OP_MIN> { typedef MinOp type; };

template <int OP, typename Out, typename A>
__device__ __forceinline__ Out finish(A v, A scale) { return cast<Out>(OP == OP_MEAN ? v * scale : v); }

constexpr int UNROLL = 4;

// (row, part) of a flat index row * parts + part, advanced by a fixed step without 64-bit division
// (a called subroutine in SASS that costs registers and stack).
struct RowPart {
  long long row, step_row;
  unsigned part, parts, step_part;
  __device__ RowPart(unsigned start, unsigned parts_, unsigned step)
      : row(start / parts_), step_row(step / parts_), part(start % parts_), parts(parts_), step_part(step % parts_) {}
  __device__ void advance() {
    row += step_row;
    part += step_part;
    if (part >= parts) { part -= parts; ++row; }
  }
};  // 16-byte loads in flight per thread before the first is used

// Reduce x[row, begin:end) into a per-thread partial. Threads lane, lane+group, ... of one group
// split the work: a scalar head up to 16-byte alignment, an unrolled body of 16-byte packs, a tail.
template <typename Op, typename T, typename A>
__device__ __forceinline__ A segment_partial(const T* __restrict__ p, long long len, int lane, int group) {
  typedef typename Vec16<T>::type P;
  constexpr int VEC = Vec16<T>::N;
  A acc[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) acc[e] = Op::template identity<A>();
  const long long head = min(elems_to_aligned16(p), len);
  for (long long i = lane; i < head; i += group) acc[0] = Op::combine(acc[0], cast<A>(p[i]));
  const P* pv = reinterpret_cast<const P*>(p + head);
  const long long nv = (len - head) / VEC;
  long long v = lane;
  for (; v + (UNROLL - 1) * (long long)group < nv; v += UNROLL * (long long)group) {
    P pk[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) pk[u] = pv[v + u * group];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] = Op::combine(acc[e], cast<A>(pk[u].v[e]));
  }
  for (; v < nv; v += group) {
    const P pk = pv[v];
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[e] = Op::combine(acc[e], cast<A>(pk.v[e]));
  }
  for (long long i = head + nv * VEC + lane; i < len; i += group) acc[0] = Op::combine(acc[0], cast<A>(p[i]));
#pragma unroll
  for (int e = 1; e < VEC; ++e) acc[0] = Op::combine(acc[0], acc[e]);
  return acc[0];
}

// Reduce over the `group` threads of a row group (any power of two <= blockDim.x); all get the result.
template <typename Op, typename A>
__device__ __forceinline__ A row_group_reduce(A v, A* scratch, int group, unsigned mask) {
  return group > 32 ? multiwarp_reduce<Op>(v, scratch, group) : group_reduce<Op>(v, group, mask);
}

// Row reduction of a C-contiguous (rows, n) matrix, each row cut into `splits` chunks of `chunk`.
// Launch: 1-D grid of 256-thread blocks; a group of `group` threads (a power of two <= 256) reduces
// one (row, chunk) segment and grid-strides over rows * splits segments. Any size (64-bit indices),
// any element alignment. With splits > 1 each segment publishes its partial; the last segment of a
// row to arrive (counted in `arrivals`, which it resets to 0) combines the row's partials in a fixed
// order and writes y[row]: one launch, deterministic, no floating-point atomics.
template <int OP, typename T, typename Out>
__global__ void __launch_bounds__(256, 4) reduce_rows(const T* __restrict__ x, Out* __restrict__ y,
                                                      typename AccOf<T>::type* partial, unsigned* arrivals,
                                                      long long rows, long long n, unsigned splits, long long chunk,
                                                      int group, typename AccOf<T>::type scale) {
  typedef typename AccOf<T>::type A;
  typedef typename OpOf<OP>::type Op;
  __shared__ A scratch[8];
  __shared__ bool last_flag[8];
  const int lane = threadIdx.x & (group - 1);
  const unsigned groups_per_grid = gridDim.x * blockDim.x / group;
  const int warp_lane = threadIdx.x & 31;
  const unsigned mask = group >= 32 ? 0xffffffffu : (((1u << group) - 1u) << (warp_lane & ~(group - 1)));
  for (RowPart at((blockIdx.x * blockDim.x + threadIdx.x) / group, splits, groups_per_grid); at.row < rows; at.advance()) {
    const long long begin = at.part * chunk, len = min(chunk, n - begin);
    A v = segment_partial<Op, T, A>(x + at.row * n + begin, len, lane, group);
    v = row_group_reduce<Op>(v, scratch, group, mask);
    if (splits == 1) {
      if (lane == 0) y[at.row] = finish<OP, Out>(v, scale);
      continue;
    }
    bool last = false;
    if (lane == 0) {
      partial[at.row * splits + at.part] = v;
      __threadfence();  // the partial is visible before the arrival is counted
      last = atomicAdd(arrivals + at.row, 1u) == splits - 1;
    }
    if (group > 32) {
      if (lane == 0) last_flag[threadIdx.x / group] = last;
      asm volatile("bar.sync %0, %1;" ::"r"(1 + threadIdx.x / group), "r"(group) : "memory");
      last = last_flag[threadIdx.x / group];
    } else {
      last = __shfl_sync(mask, last, warp_lane & ~(group - 1));
    }
    if (last) {  // uniform across the group
      __threadfence();
      A w = Op::template identity<A>();
      for (long long i = lane; i < splits; i += group) w = Op::combine(w, __ldcg(partial + at.row * splits + i));
      w = row_group_reduce<Op>(w, scratch, group, mask);
      if (lane == 0) {
        y[at.row] = finish<OP, Out>(w, scale);
        arrivals[at.row] = 0;  // ready for the next launch on this stream
      }
    }
  }
}

// Column reduction of a C-contiguous (outer, r, k) array over its middle axis, r cut into `splits`
// chunks of `chunk` rows. Launch: grid (ceil(k / (32 * VEC)), <= 65535), block (32, 8); thread x owns
// VEC adjacent columns (VEC > 1 only if k % VEC == 0 and x is 16-byte aligned), the 8 threads of a
// column stride the rows and meet in shared memory in a fixed order. y[(o * splits + s) * k + col].
template <int OP, typename T, typename Out, int VEC>
__global__ void __launch_bounds__(256, 4) reduce_cols(const T* __restrict__ x, Out* __restrict__ y, long long outer,
                                                   long long r, long long k, unsigned splits, long long chunk,
                                                   typename AccOf<T>::type scale) {
  typedef typename AccOf<T>::type A;
  typedef typename OpOf<OP>::type Op;
  typedef Pack<T, VEC> P;
  constexpr int ROWS = 8;
  __shared__ A partial[ROWS][32 * VEC];
  const long long col = ((long long)blockIdx.x * 32 + threadIdx.x) * VEC;
  for (RowPart at(blockIdx.y, splits, gridDim.y); at.row < outer; at.advance()) {
    const long long o = at.row, oy = o * splits + at.part;
    const long long rb = at.part * chunk, re = min(rb + chunk, r);
    A acc[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[e] = Op::template identity<A>();
    if (col < k) {
      const T* base = x + o * r * k + col;
#pragma unroll 4
      for (long long row = rb + threadIdx.y; row < re; row += ROWS) {
        const P pk = *reinterpret_cast<const P*>(base + row * k);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] = Op::combine(acc[e], cast<A>(pk.v[e]));
      }
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) partial[threadIdx.y][threadIdx.x * VEC + e] = acc[e];
    __syncthreads();
    if (threadIdx.y == 0 && col < k) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        A v = partial[0][threadIdx.x * VEC + e];
        for (int i = 1; i < ROWS; ++i) v = Op::combine(v, partial[i][threadIdx.x * VEC + e]);
        y[oy * k + col + e] = finish<OP, Out>(v, scale);
      }
    }
    __syncthreads();
  }
}

// ---- The ladder of the original reduction articles: full float32 sum, one partial per block, repeated until one
// value remains. Launch: 1-D grid, 256 threads; LADDER_BLOCK (512 for first-add rungs) inputs/block.
constexpr int LADDER_THREADS = 256;

// Rung 1, interleaved addressing: thread tid adds its neighbour at distance i when tid % 2i == 0.
// Half the warp idles from the first step on and the modulo is slow: divergent warps.
__global__ void ladder_interleaved(const float* x, float* y, long long n) {
  __shared__ float s[LADDER_THREADS];
  const int tid = threadIdx.x;
  const long long i0 = (long long)blockIdx.x * blockDim.x + tid;
  s[tid] = i0 < n ? x[i0] : 0.f;
  __syncthreads();
  for (int i = 1; i < blockDim.x; i *= 2) {
    if (tid % (2 * i) == 0) s[tid] += s[tid + i];
    __syncthreads();
  }
  if (tid == 0) y[blockIdx.x] = s[0];
}

// Rung 2, no divergence: consecutive threads take the active slots (index = 2 * i * tid), so whole
// warps retire together; the strided shared accesses now collide in banks.
__global__ void ladder_no_divergence(const float* x, float* y, long long n) {
  __shared__ float s[LADDER_THREADS];
  const int tid = threadIdx.x;
  const long long i0 = (long long)blockIdx.x * blockDim.x + tid;
  s[tid] = i0 < n ? x[i0] : 0.f;
  __syncthreads();
  for (int i = 1; i < blockDim.x; i *= 2) {
    const int index = 2 * i * tid;
    if (index < blockDim.x) s[index] += s[index + i];
    __syncthreads();
  }
  if (tid == 0) y[blockIdx.x] = s[0];
}

// Rung 3, sequential addressing: the stride halves from blockDim/2, each warp reads one contiguous
// row of shared memory: no bank conflicts.
__global__ void ladder_sequential(const float* x, float* y, long long n) {
  __shared__ float s[LADDER_THREADS];
  const int tid = threadIdx.x;
  const long long i0 = (long long)blockIdx.x * blockDim.x + tid;
  s[tid] = i0 < n ? x[i0] : 0.f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) y[blockIdx.x] = s[0];
}

// Rung 4, first add during load: each block covers 2 * blockDim inputs and adds pairs as it loads,
// so no thread idles in the first step and half the blocks are launched.
__global__ void ladder_first_add(const float* x, float* y, long long n) {
  __shared__ float s[LADDER_THREADS];
  const int tid = threadIdx.x;
  const long long i0 = (long long)blockIdx.x * blockDim.x * 2 + tid;
  s[tid] = (i0 < n ? x[i0] : 0.f) + (i0 + blockDim.x < n ? x[i0 + blockDim.x] : 0.f);
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) y[blockIdx.x] = s[0];
}

// Rung 5, unrolled last warp: once 32 threads remain, skip __syncthreads. The article relies on
// implicit warp lockstep through a volatile pointer; since Volta that needs __syncwarp, added here.
__global__ void ladder_unroll_warp(const float* x, float* y, long long n) {
  __shared__ float s[LADDER_THREADS];
  const int tid = threadIdx.x;
  const long long i0 = (long long)blockIdx.x * blockDim.x * 2 + tid;
  s[tid] = (i0 < n ? x[i0] : 0.f) + (i0 + blockDim.x < n ? x[i0 + blockDim.x] : 0.f);
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 32; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid < 32) {
    volatile float* v = s;
    float t = v[tid] + v[tid + 32];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      __syncwarp();
      v[tid] = t;
      __syncwarp();
      t += v[tid + offset];
    }
    if (tid == 0) y[blockIdx.x] = t;
  }
}
