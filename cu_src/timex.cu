// RWKV "timex": causal depthwise long convolution and its two gradients.
//   out[b,c,t]      = eps + sum_{u<=t} w[c,T-1-t+u] k[b,c,u]     (tap f[c,d] = w[c,T-1-d], d = t-u >= 0)
//   grad_k[b,c,u]   = sum_{t>=u} g[b,c,t] w[c,T-1-t+u]          (the same product on time-reversed g)
//   grad_w[c,T-1-d] = sum_b sum_{t>=d} g[b,c,t] k[b,c,t-d]      (a correlation, reduced over b in-kernel)
// Rows of k / g are addressed with element strides (sb, sc) and unit stride along t; rows of w with ldw
// (so the view w[:, -T:] of a longer filter needs no copy). Outputs are C-contiguous. The ladder rungs
// 2-5 are the kernels of the original article, 实例:手写 CUDA 算子,让 Pytorch 提速 20 倍 (float32, contiguous k,
// the article's limits as preconditions).
#include "common/mma.cuh"

extern __shared__ __align__(16) unsigned char timex_dyn_smem[];  // dynamic shared memory of the ladder

// ---- what a kernel instance is: the template arguments, by name -----------------------------------
// Which Toeplitz product a kernel computes: the forward, or grad_k (the same product on time-reversed g,
// written time-reversed).
enum class Product { forward, grad_k };
// How rows of k / g are read from global memory: element by element, or in packs of 2 or 4 elements (the
// host takes packs only when T, the row strides and the pointers are multiples of the pack).
enum class Loads { scalar, vec2, vec4, vec8 };
// timex_tf32x3f's two diagonal chunks of a warp slice: every MMA tile, or only the tiles not wholly above
// the diagonal (those multiply stored zero taps).
enum class Diagonal { every_tile, skip_zero_tiles };
// timex_tiled's register tile: RB rows b x RT consecutive times t a thread, WB lanes of a warp along b.
template <int RB_, int RT_, int WB_>
struct TiledTile {
  static constexpr int RB = RB_, RT = RT_, WB = WB_;
};
// timex_grad_w's register tile: RD consecutive lags x RU values of u a thread, LD lanes of a warp along lags.
template <int RD_, int RU_, int LD_>
struct LagTile {
  static constexpr int RD = RD_, RU = RU_, LD = LD_;
};

// ---- ladder 1: naive ------------------------------------------------------------------------------
// One thread per output (b,c,t) summing t+1 products straight from global memory (L1 catches the reuse),
// any element type (accumulates in AccOf<E>).
// Launch: 1-D grid-stride loop over B*C*T, any block size; any B, C, T >= 1.
template <typename E>
__global__ void timex_naive(const E* __restrict__ w, long long ldw, const E* __restrict__ k, long long sb,
                            long long sc, E* __restrict__ out, double eps, int B, int C, int T) {
  typedef typename AccOf<E>::type A;
  const long long n = (long long)B * C * T;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const int t = (int)(i % T);
    const long long bc = i / T;
    const int c = (int)(bc % C);
    const long long b = bc / C;
    const E* ww = w + c * ldw + (T - 1 - t);
    const E* kk = k + b * sb + c * sc;
    A s = 0;
    for (int u = 0; u <= t; ++u) s += cast<A>(ww[u]) * cast<A>(kk[u]);
    out[i] = cast<E>(s + (A)eps);
  }
}

// Naive grad_k: one thread per (b,c,u), grad_k = sum_{t>=u} g[b,c,t] w[c,T-1-t+u].
// Launch: 1-D grid-stride loop over B*C*T, any block size; any B, C, T >= 1.
template <typename E>
__global__ void timex_naive_grad_k(const E* __restrict__ w, long long ldw, const E* __restrict__ g, long long sb,
                                   long long sc, E* __restrict__ gk, int B, int C, int T) {
  typedef typename AccOf<E>::type A;
  const long long n = (long long)B * C * T;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const int u = (int)(i % T);
    const long long bc = i / T;
    const int c = (int)(bc % C);
    const long long b = bc / C;
    const E* ww = w + c * ldw + (T - 1 + u);
    const E* gg = g + b * sb + c * sc;
    A s = 0;
    for (int t = u; t < T; ++t) s += cast<A>(gg[t]) * cast<A>(ww[-t]);
    gk[i] = cast<E>(s);
  }
}

// Naive grad_w: one thread per (c,j), d = T-1-j: grad_w[c,j] = sum_b sum_{t>=d} g[b,c,t] k[b,c,t-d]; the sum
// over b happens inside the thread (no (B,C,T) temporary).
// Launch: 1-D grid-stride loop over C*T, any block size; any B, C, T >= 1.
template <typename E>
__global__ void timex_naive_grad_w(const E* __restrict__ k, long long ksb, long long ksc, const E* __restrict__ g,
                                   long long gsb, long long gsc, E* __restrict__ gw, int B, int C, int T) {
  typedef typename AccOf<E>::type A;
  const long long n = (long long)C * T;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const int j = (int)(i % T), d = T - 1 - j;
    const long long c = i / T;
    A s = 0;
    for (long long b = 0; b < B; ++b) {
      const E* kk = k + b * ksb + c * ksc;
      const E* gg = g + b * gsb + c * gsc;
      for (int t = d; t < T; ++t) s += cast<A>(gg[t]) * cast<A>(kk[t - d]);
    }
    gw[i] = cast<E>(s);
  }
}

// ---- ladder 2: shared memory ----------------------------------------------------------------------
// The row's w and k are staged once in shared memory; each thread then reads fast on-chip copies.
// Launch: grid B*C (one block per row), block T threads; T <= 1024; dynamic smem 2*T floats.
__global__ void timex_shared(const float* __restrict__ w, long long ldw, const float* __restrict__ k,
                             float* __restrict__ out, double eps, int B, int C, int T) {
  float* ww = reinterpret_cast<float*>(timex_dyn_smem);
  float* kk = ww + T;
  const long long row = blockIdx.x;
  const int c = (int)(row % C), t = threadIdx.x;
  ww[t] = w[c * ldw + t];
  kk[t] = k[row * T + t];
  __syncthreads();
  const float* wt = ww + (T - 1 - t);
  float s = 0.f;
  for (int u = 0; u <= t; ++u) s += wt[u] * kk[u];
  out[row * T + t] = s + (float)eps;
}

// ---- ladder 3: four outputs per thread (float4) ---------------------------------------------------
// A thread computes t..t+3 as a float4: each k[u] read from shared memory feeds four FMAs.
// Launch: grid B*C, block T/4 threads; T % 4 == 0, T <= 4096; dynamic smem 2*T floats.
__global__ void timex_float4(const float* __restrict__ w, long long ldw, const float* __restrict__ k,
                             float* __restrict__ out, double eps, int B, int C, int T) {
  float* sw = reinterpret_cast<float*>(timex_dyn_smem);
  float* sk = sw + T;
  const long long row = blockIdx.x;
  const int c = (int)(row % C);
  for (int i = threadIdx.x; i < T; i += blockDim.x) {
    sw[i] = w[c * ldw + i];
    sk[i] = k[row * T + i];
  }
  __syncthreads();
  const int t = threadIdx.x * 4;
  const float* ww = sw + T - t - 4;  // ww[u + 3 - j] = w[T-1-(t+j)+u]
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int u = 0; u <= t; ++u) {
    const float x = sk[u];
    s.x += ww[u + 3] * x;
    s.y += ww[u + 2] * x;
    s.z += ww[u + 1] * x;
    s.w += ww[u + 0] * x;
  }
  s.y += ww[t + 3] * sk[t + 1];  // the triangle u = t+1 .. t+j left over by the common loop
  s.z += ww[t + 2] * sk[t + 1];
  s.z += ww[t + 3] * sk[t + 2];
  s.w += ww[t + 1] * sk[t + 1];
  s.w += ww[t + 2] * sk[t + 2];
  s.w += ww[t + 3] * sk[t + 3];
  const float e = (float)eps;
  reinterpret_cast<float4*>(out + row * T)[threadIdx.x] = make_float4(s.x + e, s.y + e, s.z + e, s.w + e);
}

// ---- ladders 4 and 5: batch-grouped (8 rows of one channel per block) -----------------------------
// Outputs t..t+3 of the block's 8 rows: sw holds w[c], sk the 8 k rows (row stride T).
__device__ __forceinline__ void batch8_group(const float* sw, const float* sk, int T, int t, float* out, long long rstride,
                                             float e) {
  constexpr int BF = 8;
  float4 s[BF];
#pragma unroll
  for (int j = 0; j < BF; ++j) s[j] = make_float4(0.f, 0.f, 0.f, 0.f);
  const float* ww = sw + T - t - 4;
  for (int u = 0; u <= t; ++u) {
    const float w3 = ww[u + 3], w2 = ww[u + 2], w1 = ww[u + 1], w0 = ww[u];
#pragma unroll
    for (int j = 0; j < BF; ++j) {
      const float x = sk[j * T + u];
      s[j].x += w3 * x;
      s[j].y += w2 * x;
      s[j].z += w1 * x;
      s[j].w += w0 * x;
    }
  }
#pragma unroll
  for (int j = 0; j < BF; ++j) {
    const float* kk = sk + j * T;
    s[j].y += ww[t + 3] * kk[t + 1];
    s[j].z += ww[t + 2] * kk[t + 1];
    s[j].z += ww[t + 3] * kk[t + 2];
    s[j].w += ww[t + 1] * kk[t + 1];
    s[j].w += ww[t + 2] * kk[t + 2];
    s[j].w += ww[t + 3] * kk[t + 3];
    *reinterpret_cast<float4*>(out + j * rstride + t) = make_float4(s[j].x + e, s[j].y + e, s[j].z + e, s[j].w + e);
  }
}

__device__ __forceinline__ void batch8_stage(const float* w, long long ldw, const float* k, int C, int T, int c,
                                             long long b0, float* sw, float* sk) {
  for (int i = threadIdx.x; i < T; i += blockDim.x) {
    sw[i] = w[c * ldw + i];
#pragma unroll
    for (int j = 0; j < 8; ++j) sk[j * T + i] = k[((b0 + j) * C + c) * (long long)T + i];
  }
  __syncthreads();
}

// Ladder 4, batch-grouped (the article's step 4): w is shared across b, so a block takes 8 rows of one
// channel and every tap read from shared memory feeds 8 rows x 4 outputs = 32 FMAs.
// Launch: grid (C, B/8), block T/4 threads; B % 8 == 0, T % 4 == 0, T <= 1024; dynamic smem 9*T floats.
__global__ void timex_batch8(const float* __restrict__ w, long long ldw, const float* __restrict__ k,
                             float* __restrict__ out, double eps, int B, int C, int T) {
  float* sw = reinterpret_cast<float*>(timex_dyn_smem);
  float* sk = sw + T;
  const int c = blockIdx.x;
  const long long b0 = (long long)blockIdx.y * 8;
  batch8_stage(w, ldw, k, C, T, c, b0, sw, sk);
  batch8_group(sw, sk, T, threadIdx.x * 4, out + (b0 * C + c) * T, (long long)C * T, (float)eps);
}

// Ladder 5, balanced (the article's unfinished step 5): in rung 4 thread t loops t+1 times, so the warps
// holding late t set the block's pace. Here each thread takes group i and group T/4-1-i: every thread
// loops T-2 times in all.
// Launch: grid (C, B/8), block T/8 threads; B % 8 == 0, T % 8 == 0, T <= 1024; dynamic smem 9*T floats.
__global__ void timex_balanced(const float* __restrict__ w, long long ldw, const float* __restrict__ k,
                               float* __restrict__ out, double eps, int B, int C, int T) {
  float* sw = reinterpret_cast<float*>(timex_dyn_smem);
  float* sk = sw + T;
  const int c = blockIdx.x;
  const long long b0 = (long long)blockIdx.y * 8;
  batch8_stage(w, ldw, k, C, T, c, b0, sw, sk);
  float* o = out + (b0 * C + c) * T;
  batch8_group(sw, sk, T, T - 4 - threadIdx.x * 4, o, (long long)C * T, (float)eps);  // the long one first
  batch8_group(sw, sk, T, threadIdx.x * 4, o, (long long)C * T, (float)eps);
}

// ---- default: register/shared tiling of the Toeplitz product --------------------------------------
// Per channel, out[b, t] = sum_u k[b, u] * F[u, t] with F[u, t] = f[t-u] (0 for u > t): a (B x T) @ (T x T)
// product whose right factor is a triangular Toeplitz matrix. A block owns BM rows b x TN times t of one
// channel; a thread owns RB x RT outputs (RB rows b, RT consecutive t) in registers. The u axis goes by
// chunks of KU: the chunk's k tile (KU x BM) and the TN+KU-1 taps it touches sit in shared memory
// (double-buffered, the next chunk prefetched into registers while this one is used). Taps with d < 0 are
// stored as zeros, so the triangle needs no branches; a warp skips chunks that lie wholly above its t.
// For a thread with t = t0+lt+j and u = u0+q, the tap sits at lt + j + KU-1-q in the chunk's tap window:
// one 16-byte load of taps serves 4 values of u, each k load RB x RT FMAs.
// With REV the same kernel computes grad_k: it reads g at T-1-u and writes at T-1-t (time reversal).
constexpr int TX_THREADS = 128;  // 4 warps

template <typename A, int N>
__device__ __forceinline__ void lds(A* dst, const A* src) {  // N values from 16-byte aligned shared memory
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int m = 0; m < N; m += 4) {
      const Pack<A, 4> p = *reinterpret_cast<const Pack<A, 4>*>(src + m);
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[m + e] = p.v[e];
    }
  } else if constexpr (N % 2 == 0) {
#pragma unroll
    for (int m = 0; m < N; m += 2) {
      const Pack<A, 2> p = *reinterpret_cast<const Pack<A, 2>*>(src + m);
      dst[m] = p.v[0];
      dst[m + 1] = p.v[1];
    }
  } else {
#pragma unroll
    for (int m = 0; m < N; ++m) dst[m] = src[m];
  }
}

// Out is C-contiguous (B, C, T). Loads::vec4: k read 4 values at a time (T, the strides and the pointer
// multiples of 4 elements). Tile::RT % 4 == 0; KU = 32 values of u per chunk.
// Launch: grid (C, T/TN, B/BM) rounded up, block 128, TN = 128 RT/WB, BM = WB RB; any B, C, T >= 1 (grid y, z <= 65535).
template <typename E, typename Tile, Product P, Loads L>
__global__ void __launch_bounds__(TX_THREADS, (L == Loads::vec4 && Tile::RT <= 8) ? 4 : 3)
timex_tiled(const E* __restrict__ w, long long ldw, const E* __restrict__ k, long long sb, long long sc,
            E* __restrict__ out, double eps, int B, int C, int T) {
  typedef typename AccOf<E>::type A;
  constexpr int RB = Tile::RB, RT = Tile::RT, WB = Tile::WB, KU = 32;
  constexpr bool REV = P == Product::grad_k, VEC = L == Loads::vec4;
  static_assert(L != Loads::vec2, "timex_tiled loads k by 4 elements or by one");
  constexpr int WT = 32 / WB;                   // t-lanes per warp
  constexpr int BM = WB * RB;                   // rows b per block
  constexpr int TN = WT * RT * (TX_THREADS / 32);  // times t per block
  constexpr int KS = BM + (BM % 4 == 0 ? 4 : 2);  // padded k-tile row (fewer bank conflicts when staging)
  constexpr int NTAP = TN + KU;                 // >= TN + KU - 1 taps per chunk
  constexpr int V = VEC ? 4 : 1;               // k elements per global load
  constexpr int NK = (KU * BM / V + TX_THREADS - 1) / TX_THREADS;
  constexpr int NTP = (NTAP + TX_THREADS - 1) / TX_THREADS;
  static_assert(RT % 4 == 0 && 32 % WB == 0, "tile shape");
  __shared__ __align__(32) A ks[2][KU * KS];
  __shared__ __align__(32) A tp[2][NTAP];

  const int c = blockIdx.x;
  const int t0 = (gridDim.y - 1 - blockIdx.y) * TN;  // the longest tiles start first
  const long long b0 = (long long)blockIdx.z * BM;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int lane_b = lane % WB, lane_t = lane / WB;
  const int lt = (warp * WT + lane_t) * RT;
  const int warp_tmax = t0 + (warp + 1) * WT * RT - 1;
  const int u_last = t0 + warp * WT * RT < T ? warp_tmax : -1;  // a warp wholly past T computes nothing
  const int nchunks = (min(t0 + TN, T) + KU - 1) / KU;
  const E* krow0 = k + (long long)c * sc;
  const E* wrow = w + (long long)c * ldw;

  A pk[NK * V], pt[NTP];
  auto fetch = [&](int u0) {
#pragma unroll
    for (int s = 0; s < NK; ++s) {
      const int idx = (threadIdx.x + s * TX_THREADS) * V;  // element index in the (BM, KU) tile
      const long long b = b0 + idx / KU;
      const int u = u0 + idx % KU;
      if (idx < KU * BM && b < B && u < T) {
        if constexpr (VEC) {  // u % 4 == 0 and T % 4 == 0: the 4 values are in bounds and aligned
          const Pack<E, 4> p = *reinterpret_cast<const Pack<E, 4>*>(krow0 + b * sb + (REV ? T - 4 - u : u));
#pragma unroll
          for (int e = 0; e < 4; ++e) pk[s * V + e] = cast<A>(p.v[REV ? 3 - e : e]);
        } else {
          pk[s] = cast<A>(krow0[b * sb + (REV ? T - 1 - u : u)]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) pk[s * V + e] = 0;
      }
    }
#pragma unroll
    for (int s = 0; s < NTP; ++s) {
      const int i = threadIdx.x + s * TX_THREADS;
      const int d = t0 - u0 - (KU - 1) + i;
      A v = 0;
      if (i < NTAP && d >= 0 && d < T) v = cast<A>(wrow[T - 1 - d]);
      pt[s] = v;
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int s = 0; s < NK; ++s) {
      const int idx = (threadIdx.x + s * TX_THREADS) * V;
      if (idx < KU * BM) {
#pragma unroll
        for (int e = 0; e < V; ++e) ks[buf][(idx % KU + e) * KS + idx / KU] = pk[s * V + e];
      }
    }
#pragma unroll
    for (int s = 0; s < NTP; ++s) {
      const int i = threadIdx.x + s * TX_THREADS;
      if (i < NTAP) tp[buf][i] = pt[s];
    }
  };

  A acc[RB][RT];
#pragma unroll
  for (int i = 0; i < RB; ++i)
#pragma unroll
    for (int j = 0; j < RT; ++j) acc[i][j] = 0;

  fetch(0);
  stash(0);
  __syncthreads();
  for (int ch = 0; ch < nchunks; ++ch) {
    const int buf = ch & 1, u0 = ch * KU;
    if (ch + 1 < nchunks) fetch(u0 + KU);
    if (u0 <= u_last) {  // warp-uniform: chunks wholly above the warp's t hold only zero taps
      const A* kq = ks[buf] + lane_b * RB;
      const A* tq = tp[buf] + lt + KU - 4;
#pragma unroll 2
      for (int p = 0; p < KU / 4; ++p) {
        A win[RT + 4];  // taps for u = u0+4p+q, t = t0+lt+j at win[j + 3 - q]
        lds<A, RT + 4>(win, tq - 4 * p);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          A kv[RB];
          lds<A, RB>(kv, kq + (4 * p + q) * KS);
#pragma unroll
          for (int i = 0; i < RB; ++i)
#pragma unroll
            for (int j = 0; j < RT; ++j) acc[i][j] = fma(kv[i], win[j + 3 - q], acc[i][j]);
        }
      }
    }
    if (ch + 1 < nchunks) stash(buf ^ 1);
    __syncthreads();
  }

  const A e = (A)eps;
#pragma unroll
  for (int i = 0; i < RB; ++i) {
    const long long b = b0 + lane_b * RB + i;
    if (b >= B) continue;
    E* orow = out + (b * C + c) * (long long)T;
#pragma unroll
    for (int j = 0; j < RT; j += 4) {
      const int t = t0 + lt + j;
      if ((T & 3) == 0 && t < T) {  // 4 outputs as one aligned store (t % 4 == 0, rows start at multiples of 4)
        Pack<E, 4> p;
#pragma unroll
        for (int x = 0; x < 4; ++x) p.v[REV ? 3 - x : x] = cast<E>(acc[i][j + x] + e);
        *reinterpret_cast<Pack<E, 4>*>(orow + (REV ? T - 4 - t : t)) = p;
      } else {
#pragma unroll
        for (int x = 0; x < 4; ++x)
          if (t + x < T) orow[REV ? T - 1 - (t + x) : t + x] = cast<E>(acc[i][j + x] + e);
      }
    }
  }
}

#define TX_PAD(i) ((i) + ((i) >> 4) * 4)  // shared-memory rows of the grad_w kernels: 4 pad values after every 16
constexpr int TX_GROUP = 16;              // channels a group of the grad_w grids (their rows stay in L2)

// ---- default grad_w: tiled correlation reduced over b ---------------------------------------------
// grad_f[c, d] = sum_b sum_u k[b,c,u] g[b,c,u+d]. A block owns DN = LD*RD lags d of one channel and loops
// over chunks of 8 rows b x KU = (32/LD)*RU values of u. A thread owns RD consecutive lags and, per row,
// one run of RU consecutive u: RU k values and the RU+RD-1 g values they meet give RU*RD FMAs
// (a sliding window, like the forward's taps). Warps take different rows; at the end the partial sums
// are added across the u-lanes (shuffles) and the 4 warps (shared memory) in a fixed order: deterministic,
// and no (B,C,T) temporary. Shared rows are padded by 4 after every 16 values (conflict-free 16-byte loads).
// Blocks run channel group by channel group (16 channels, all their lag tiles, the small lags first), so
// the k and g rows a group re-reads stay in L2. Loads::vec4: 4-element global loads (T, strides and
// pointers multiples of 4 elements).
// Launch: 1-D grid of C*ceil(T/DN) blocks of 128, DN = LD*RD lags a block; any B, C, T >= 1.
template <typename E, typename Tile, Loads L>
__global__ void __launch_bounds__(TX_THREADS, 3)
timex_grad_w(const E* __restrict__ k, long long ksb, long long ksc, const E* __restrict__ g, long long gsb,
             long long gsc, E* __restrict__ gw, int B, int C, int T) {
  typedef typename AccOf<E>::type A;
  constexpr int RD = Tile::RD, RU = Tile::RU, LD = Tile::LD;
  constexpr bool VEC = L == Loads::vec4;
  static_assert(L != Loads::vec2, "timex_grad_w loads by 4 elements or by one");
  constexpr int WARPS = TX_THREADS / 32;
  constexpr int LU = 32 / LD;
  constexpr int DN = LD * RD;       // lags per block
  constexpr int KU = LU * RU;       // u per chunk row
  constexpr int BPW = 2;            // rows per warp per chunk
  constexpr int BB = WARPS * BPW;   // rows per chunk
  constexpr int GN = KU + DN;       // g values per chunk row (>= KU + DN - 1)
  constexpr int KP = TX_PAD(KU), GP = TX_PAD(GN);
  constexpr int V = VEC ? 4 : 1;    // elements per global load
  constexpr int NKV = (BB * KU / V + TX_THREADS - 1) / TX_THREADS;
  constexpr int NGV = (BB * GN / V + TX_THREADS - 1) / TX_THREADS;
  static_assert(KU % 16 == 0 && GN % 16 == 0 && RU % 4 == 0 && RD % 4 == 0, "tile shape");
  __shared__ __align__(32) A ksm[2][BB * KP];
  __shared__ __align__(32) A gsm[2][BB * GP];
  __shared__ A red[WARPS][DN];

  const int nd = (T + DN - 1) / DN;
  const long long bid = blockIdx.x;
  const long long group = bid / ((long long)TX_GROUP * nd);
  const int gsz = (int)min((long long)TX_GROUP, C - group * TX_GROUP);
  const int r_in = (int)(bid - group * TX_GROUP * nd);
  const int c = (int)(group * TX_GROUP) + r_in % gsz;
  const int d0 = (r_in / gsz) * DN;  // the small lags (the most work) start first
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int lane_d = lane % LD, lane_u = lane / LD;
  const int n_u = (T - d0 + KU - 1) / KU;
  const int nchunks = ((B + BB - 1) / BB) * n_u;
  const E* k0 = k + (long long)c * ksc;
  const E* g0 = g + (long long)c * gsc;

  A pk[NKV * V], pg[NGV * V];
  auto fetch = [&](int ch) {
    const long long bc0 = (long long)(ch / n_u) * BB;
    const int u0 = (ch % n_u) * KU;
#pragma unroll
    for (int s = 0; s < NKV; ++s) {
      const int idx = (threadIdx.x + s * TX_THREADS) * V;  // element index in the (BB, KU) tile
      const long long b = bc0 + idx / KU;
      const int u = u0 + idx % KU;
      if (idx < BB * KU && b < B && u < T) {
        if constexpr (VEC) {
          const Pack<E, 4> p = *reinterpret_cast<const Pack<E, 4>*>(k0 + b * ksb + u);
#pragma unroll
          for (int e = 0; e < 4; ++e) pk[s * V + e] = cast<A>(p.v[e]);
        } else {
          pk[s] = cast<A>(k0[b * ksb + u]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) pk[s * V + e] = 0;
      }
    }
#pragma unroll
    for (int s = 0; s < NGV; ++s) {
      const int idx = (threadIdx.x + s * TX_THREADS) * V;
      const long long b = bc0 + idx / GN;
      const int t = u0 + d0 + idx % GN;
      if (idx < BB * GN && b < B && t < T) {
        if constexpr (VEC) {
          const Pack<E, 4> p = *reinterpret_cast<const Pack<E, 4>*>(g0 + b * gsb + t);
#pragma unroll
          for (int e = 0; e < 4; ++e) pg[s * V + e] = cast<A>(p.v[e]);
        } else {
          pg[s] = cast<A>(g0[b * gsb + t]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) pg[s * V + e] = 0;
      }
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int s = 0; s < NKV; ++s) {
      const int idx = (threadIdx.x + s * TX_THREADS) * V;
      if (idx < BB * KU) {
        A* dst = ksm[buf] + (idx / KU) * KP + TX_PAD(idx % KU);
        if constexpr (VEC) {
          Pack<A, 4> p;
#pragma unroll
          for (int e = 0; e < 4; ++e) p.v[e] = pk[s * V + e];
          *reinterpret_cast<Pack<A, 4>*>(dst) = p;
        } else {
          *dst = pk[s];
        }
      }
    }
#pragma unroll
    for (int s = 0; s < NGV; ++s) {
      const int idx = (threadIdx.x + s * TX_THREADS) * V;
      if (idx < BB * GN) {
        A* dst = gsm[buf] + (idx / GN) * GP + TX_PAD(idx % GN);
        if constexpr (VEC) {
          Pack<A, 4> p;
#pragma unroll
          for (int e = 0; e < 4; ++e) p.v[e] = pg[s * V + e];
          *reinterpret_cast<Pack<A, 4>*>(dst) = p;
        } else {
          *dst = pg[s];
        }
      }
    }
  };

  A acc[RD];
#pragma unroll
  for (int j = 0; j < RD; ++j) acc[j] = 0;
  if (nchunks > 0) {
    fetch(0);
    stash(0);
  }
  __syncthreads();
  for (int ch = 0; ch < nchunks; ++ch) {
    const int buf = ch & 1;
    if (ch + 1 < nchunks) fetch(ch + 1);
    const long long bc0 = (long long)(ch / n_u) * BB;
#pragma unroll
    for (int rr = 0; rr < BPW; ++rr) {
      const int r = warp * BPW + rr;
      if (bc0 + r < B) {  // warp-uniform
        const A* kr = ksm[buf] + r * KP;
        const A* gr = gsm[buf] + r * GP;
        A kv[RU], gv[RU + RD];
#pragma unroll
        for (int m = 0; m < RU; m += 4) lds<A, 4>(kv + m, kr + TX_PAD(lane_u * RU + m));
#pragma unroll
        for (int m = 0; m < RU + RD; m += 4) lds<A, 4>(gv + m, gr + TX_PAD(lane_u * RU + lane_d * RD + m));
#pragma unroll
        for (int i = 0; i < RU; ++i)
#pragma unroll
          for (int j = 0; j < RD; ++j) acc[j] = fma(kv[i], gv[i + j], acc[j]);
      }
    }
    if (ch + 1 < nchunks) stash(buf ^ 1);
    __syncthreads();
  }

#pragma unroll
  for (int j = 0; j < RD; ++j) {
    A v = acc[j];
#pragma unroll
    for (int off = LD; off < 32; off <<= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    acc[j] = v;
  }
  if (lane_u == 0) {
#pragma unroll
    for (int j = 0; j < RD; ++j) red[warp][lane_d * RD + j] = acc[j];
  }
  __syncthreads();
  for (int x = threadIdx.x; x < DN; x += TX_THREADS) {
    const int d = d0 + x;
    if (d < T) {
      A s = red[0][x];
#pragma unroll
      for (int q = 1; q < WARPS; ++q) s += red[q][x];
      gw[(long long)c * T + (T - 1 - d)] = cast<E>(s);
    }
  }
}

// ---- tensor cores: TF32 MMAs (variants "tf32x3*", float32 and the half types; auto where faster) ------
// The tiled product of timex_tiled with mma.sync m16n8k8 TF32 instead of FFMA. Each float32 x is split as
// x = hi + lo, hi = tf32(x), lo = tf32(x - hi); a*b ~ hi_a*hi_b + hi_a*lo_b + lo_a*hi_b (3 MMAs, float32
// accumulation): relative error near 1e-6 instead of TF32's 1e-3. A float16 or bfloat16 value is exact in
// TF32 (10 / 7 mantissa bits, TF32 has 10 and float32's exponent), so its lo is 0: the half-type instances
// (E = half, bfloat16) stage the value alone (no lo arrays) and run 1 MMA a product, exact products with
// float32 accumulation at any T. A block owns 32 rows b x 256 times t of one channel; a warp owns 32 x 64
// (2 x 8 MMA tiles). Per chunk of 32 u, the k tile ([b][u], row 36) and the taps are staged split in shared
// memory. The B fragment of n-tile j at k-step s reads taps f[t - u] that depend on j - s only (Toeplitz), so a
// warp loads the 11 distinct fragments once per chunk.
// (Variant tf32x3_scalar: the first tensor-core rung, kept for the ladder.)
// cvt.rna.tf32.f32's rounding (to nearest, ties away) as integer ops: 2 instructions where ptxas emits ~4
// for the cvt (it adds an Inf/NaN test); bit-identical for finite x, and NaN/Inf inputs still give a NaN/Inf
// product (hi or lo keeps them).
__device__ __forceinline__ unsigned tf32_hi(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }

// Whether an element type needs the hi/lo split (float32) or is exact in TF32 (the half types: one MMA).
template <typename E> struct SplitTf32 { static constexpr bool value = false; };
template <> struct SplitTf32<float> { static constexpr bool value = true; };

__device__ __forceinline__ void mma_tf32(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A warp's 32 x 64 MMA accumulators (2 m-tiles x 8 n-tiles of m16n8) set to zero.
__device__ __forceinline__ void zero_tiles(float (&acc)[2][8][4]) {
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][j][e] = 0.f;
}

// Which (b, time) a Toeplitz block's row holds. BatchRows: row lr is b0 + lr at the block's times.
struct BatchRows {
  long long b0;
  int B;
  __device__ __forceinline__ bool at(int lr, long long& b, int& shift) const {
    b = b0 + lr, shift = 0;
    return b < B;
  }
};
// FoldedRows (timex_tf32x3f's long-T mode): row r = rb + lr of the (time block p, b) list, p-major, holds times
// p*256.. of row b; the block runs at the virtual times of its last block pmax, so row r is `shift` = 256 (pmax - p)
// behind: its k index is u - shift and its output time t - shift.
struct FoldedRows {
  long long rb, rows;  // the block's first row; B * (time blocks)
  int B, pmax;
  __device__ __forceinline__ bool at(int lr, long long& b, int& shift) const {
    const long long r = rb + lr;
    const int p = (int)(r / B);
    b = r - (long long)p * B, shift = 256 * (pmax - p);
    return r < rows;
  }
};

// A warp's 32 rows x 64 t accumulators (2 x 8 m16n8 tiles) + eps into out: rows by `rows`, times t0.. (REV:
// reversed). Half types: the two consecutive times of an accumulator pair as one 4-byte store when T is even.
template <bool REV, typename E, typename Rows>
__device__ __forceinline__ void store_warp_tile(const float (&acc)[2][8][4], E* __restrict__ out, float e,
                                                const Rows& rows, int t0, int grp, int tig, int c, int C, int T) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows grp and grp + 8
      long long b;
      int shift;
      if (!rows.at(16 * mt + grp + 8 * h, b, shift)) continue;
      E* orow = out + (b * C + c) * (long long)T;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int t = t0 - shift + 8 * j + 2 * tig;  // even: t and t + 1
        if (t >= T) continue;
        const float v0 = acc[mt][j][2 * h] + e, v1 = acc[mt][j][2 * h + 1] + e;
        if (!SplitTf32<E>::value && (T & 1) == 0) {  // t + 1 < T, and the pair starts on an even element
          if (REV)
            store2(orow + T - 2 - t, v1, v0);
          else
            store2(orow + t, v0, v1);
        } else {
          orow[REV ? T - 1 - t : t] = cast<E>(v0);
          if (t + 1 < T) orow[REV ? T - 2 - t : t + 1] = cast<E>(v1);
        }
      }
    }
}

// E = half, bfloat16: one MMA a product, no lo arrays (E last, so float32's instance names stay as they were).
// Launch: grid (C, ceil(T/256), ceil(B/32)), block 128; any B, C, T >= 1 (T/256, B/32 <= 65535).
template <Product P, typename E = float>
__global__ void __launch_bounds__(TX_THREADS, 3)
timex_tf32x3(const E* __restrict__ w, long long ldw, const E* __restrict__ k, long long sb, long long sc,
             E* __restrict__ out, double eps, int B, int C, int T) {
  constexpr bool REV = P == Product::grad_k, SPLIT = SplitTf32<E>::value;
  constexpr int BM = 32, TN = 256, KU = 32, KSU = KU + 4;  // k tile [b][u]: row 36 -> conflict-free A loads
  constexpr int NTAP = TN + KU;
  constexpr int NK = KU * BM / TX_THREADS;  // 8
  constexpr int NTP = (NTAP + TX_THREADS - 1) / TX_THREADS;
  __shared__ unsigned khi[BM * KSU], klo[SPLIT ? BM * KSU : 1];
  __shared__ unsigned thi[NTAP], tlo[SPLIT ? NTAP : 1];

  const int c = blockIdx.x;
  const int t0 = (gridDim.y - 1 - blockIdx.y) * TN;
  const long long b0 = (long long)blockIdx.z * BM;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int grp = lane >> 2, tig = lane & 3;
  const int warp_tmax = t0 + (warp + 1) * 64 - 1;
  const int u_last = t0 + warp * 64 < T ? warp_tmax : -1;  // a warp wholly past T computes nothing
  const int nchunks = (min(t0 + TN, T) + KU - 1) / KU;
  const E* krow0 = k + (long long)c * sc;
  const E* wrow = w + (long long)c * ldw;

  float acc[2][8][4];
  zero_tiles(acc);

  float pk[NK], pt[NTP];
  auto fetch = [&](int u0) {
#pragma unroll
    for (int s = 0; s < NK; ++s) {  // element (bl, q) of the (BM, KU) tile; consecutive threads along u
      const int idx = threadIdx.x + s * TX_THREADS;
      const long long b = b0 + idx / KU;
      const int u = u0 + idx % KU;
      pk[s] = (b < B && u < T) ? cast<float>(krow0[b * sb + (REV ? T - 1 - u : u)]) : 0.f;
    }
#pragma unroll
    for (int s = 0; s < NTP; ++s) {
      const int i = threadIdx.x + s * TX_THREADS;
      const int d = t0 - u0 - (KU - 1) + i;
      pt[s] = (i < NTAP && d >= 0 && d < T) ? cast<float>(wrow[T - 1 - d]) : 0.f;
    }
  };
  if (nchunks > 0) fetch(0);
  for (int ch = 0; ch < nchunks; ++ch) {
    const int u0 = ch * KU;
    __syncthreads();  // the previous chunk's fragments are read
#pragma unroll
    for (int s = 0; s < NK; ++s) {
      const int idx = threadIdx.x + s * TX_THREADS;
      if constexpr (SPLIT) {
        const unsigned hi = tf32_hi(pk[s]);
        khi[(idx / KU) * KSU + idx % KU] = hi;
        klo[(idx / KU) * KSU + idx % KU] = tf32_hi(pk[s] - __uint_as_float(hi));
      } else {
        khi[(idx / KU) * KSU + idx % KU] = __float_as_uint(pk[s]);  // exact in TF32
      }
    }
#pragma unroll
    for (int s = 0; s < NTP; ++s) {
      const int i = threadIdx.x + s * TX_THREADS;
      if (i < NTAP) {
        if constexpr (SPLIT) {
          const unsigned hi = tf32_hi(pt[s]);
          thi[i] = hi;
          tlo[i] = tf32_hi(pt[s] - __uint_as_float(hi));
        } else {
          thi[i] = __float_as_uint(pt[s]);
        }
      }
    }
    __syncthreads();
    if (ch + 1 < nchunks) fetch(u0 + KU);  // in flight while this chunk is multiplied
    if (u0 > u_last) continue;  // warp-uniform: only zero taps left for this warp (or all its t >= T)
    // B fragments: n-tile j at k-step s uses m = j - s + 3 in [0, 11): taps at
    // i = 64*warp + 8*(j - s) + grp - tig + KU - 1 (b0) and i - 4 (b1).
    unsigned bh[11][2], bl[SPLIT ? 11 : 1][2];
#pragma unroll
    for (int m = 0; m < 11; ++m) {
      const int i = warp * 64 + 8 * (m - 3) + grp - tig + KU - 1;
      bh[m][0] = thi[i];
      bh[m][1] = thi[i - 4];
      if constexpr (SPLIT) {
        bl[m][0] = tlo[i];
        bl[m][1] = tlo[i - 4];
      }
    }
#pragma unroll
    for (int s = 0; s < KU / 8; ++s) {
      unsigned ah[2][4], al[SPLIT ? 2 : 1][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int r = (16 * mt + grp) * KSU + 8 * s + tig;
        ah[mt][0] = khi[r];
        ah[mt][1] = khi[r + 8 * KSU];
        ah[mt][2] = khi[r + 4];
        ah[mt][3] = khi[r + 8 * KSU + 4];
        if constexpr (SPLIT) {
          al[mt][0] = klo[r];
          al[mt][1] = klo[r + 8 * KSU];
          al[mt][2] = klo[r + 4];
          al[mt][3] = klo[r + 8 * KSU + 4];
        }
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int m = j - s + 3;
          if constexpr (SPLIT) {
            mma_tf32(acc[mt][j], al[mt], bh[m][0], bh[m][1]);
            mma_tf32(acc[mt][j], ah[mt], bl[m][0], bl[m][1]);
          }
          mma_tf32(acc[mt][j], ah[mt], bh[m][0], bh[m][1]);
        }
    }
  }

  store_warp_tile<REV>(acc, out, (float)eps, BatchRows{b0, B}, t0 + warp * 64, grp, tig, c, C, T);
}

// ---- the Toeplitz kernel with fragment-order staging (the tf32x3 default) --------------------------
// timex_tf32x3's product and tile (32 b x 256 t per block, 32 x 64 per warp, 3-MMA split), with shared memory
// laid out as the fragments are read (the idea of timex_grad_w_frag):
// - k tile: Ahi/Alo[s][mt][lane][4] hold lane's A fragment of m-tile mt at k-step s: one 16-byte load each.
//   Thread x stages elements x + 128 q, so a warp's stores are 32 consecutive words (conflict-free) and its
//   global loads 4 rows x 8 consecutive u (whole 32-byte sectors).
// - taps: P[i] = (hi f[i], hi f[i-4], lo f[i], lo f[i-4]) of the chunk's window: one 16-byte load is both
//   halves of a B fragment (b0 at i, b1 at i-4), split once at staging.
// Half types (E = half, bfloat16): the values converted to float (exact in TF32) are the fragments: no Alo, taps
// P[i] = (f[i], f[i-4]) (8 bytes), one MMA a tile; 12800 bytes of shared memory instead of 25600.
// Two shared buffers, so one barrier per chunk (the next chunk is stored after this one's MMAs).
// Warp w takes the 64-t slice w, as timex_tf32x3 (roles rotated with the channel, to spread the heavy late-t
// slices over the SM sub-partitions, measured 1-4% slower: H200, 845ec6b and 9c6ece6).
// Diagonal::skip_zero_tiles (the default; every_tile is variant tf32x3_full): the slice's two diagonal chunks
// (u0 = ts and ts + 32 for the slice's first time ts) skip the MMA tiles that lie wholly above the diagonal
// (every tap f[t - u] with t < u
// is a stored zero): in the chunk at ts + 32D, n-tile j at k-step s has a t >= u only when j >= 4D + s, so
// 26 + 10 of the 2 x 32 (s, j) tiles run instead of 64 (6.7% of the MMAs at T = 768) and the B fragments
// below m = 4D + 3 are not loaded. Each of the three chunk kinds is its own unrolled copy (compile-time
// bounds; no per-tile branch). Skipping exact zeros: same sums, except that an Inf/NaN in a later k no longer
// reaches earlier outputs through 0 * Inf.

// One 32-u chunk of timex_tf32x3f's MMAs for one warp. D = -1: the whole chunk; D = 0 / 1: the slice's
// diagonal chunk at ts + 32 D, n-tiles j < 4D + s skipped and B fragments below m = 4D + 3 not loaded.
// tp: the chunk's tap pairs from this warp's first fragment (m = 0); a_hi / a_lo: the k tile's fragments
// (SPLIT false: a_lo unused, one MMA a tile).
template <bool SPLIT> struct TapPair { typedef uint4 type; };  // (hi f[i], hi f[i-4], lo f[i], lo f[i-4])
template <> struct TapPair<false> { typedef uint2 type; };     // (f[i], f[i-4]), exact in TF32
// MT0 = 1: m-tile 0 skipped (the folded kernel's chunks that lie wholly before its rows' first times).
template <int D, bool SPLIT, int MT0 = 0>
__device__ __forceinline__ void tf32x3f_chunk(float (&acc)[2][8][4], const typename TapPair<SPLIT>::type* tp,
                                              const unsigned* a_hi, const unsigned* a_lo, int lane) {
  typedef typename TapPair<SPLIT>::type TP;
  constexpr int M0 = D < 0 ? 0 : 4 * D + 3;
  // B fragments: n-tile j at k-step s uses m = j - s + 3 in [0, 11): taps at i (b0) and i - 4 (b1)
  TP bf[11];
#pragma unroll
  for (int m = M0; m < 11; ++m) bf[m] = tp[8 * m];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint4 ah[2], al[SPLIT ? 2 : 1];
#pragma unroll
    for (int mt = MT0; mt < 2; ++mt) {
      ah[mt] = reinterpret_cast<const uint4*>(a_hi)[(s * 2 + mt) * 32 + lane];
      if constexpr (SPLIT) al[mt] = reinterpret_cast<const uint4*>(a_lo)[(s * 2 + mt) * 32 + lane];
    }
#pragma unroll
    for (int mt = MT0; mt < 2; ++mt)
#pragma unroll
      for (int j = D < 0 ? 0 : 4 * D + s; j < 8; ++j) {
        const TP b = bf[j - s + 3];
        if constexpr (SPLIT) {
          mma_tf32(acc[mt][j], reinterpret_cast<const unsigned*>(&al[mt]), b.x, b.y);
          mma_tf32(acc[mt][j], reinterpret_cast<const unsigned*>(&ah[mt]), b.z, b.w);
        }
        mma_tf32(acc[mt][j], reinterpret_cast<const unsigned*>(&ah[mt]), b.x, b.y);
      }
  }
}

// E last (default float): float32's instance names are those of the float32-only kernel.
// FOLD (float32 beyond ops/timex.py TUNING.tf32x3_max_t): the rows are FoldedRows, the (time block, b) pairs
// p-major, so a small batch still fills the 32-row tile; every chunk a row reads before its own first time (u < 0)
// is a zero, and m-tile 0's MMAs are skipped while all its rows read zeros. The MMA sums of FOLD_CHUNKS chunks are
// added with FADDs to totals in dynamic shared memory (32 KB): the tensor cores' float32 sums lose precision with
// the accumulation length (relative error 5e-6 at T = 1024, 4e-5 at 8192, linear in T: H200, 17b27bd), the
// flushed sums stay at T = 256's (1.8e-6 at T = 2048-16384).
// Launch: grid (C, ceil(T/256), ceil(B/32)), block 128; FOLD: grid (C, 1, ceil(B ceil(T/256) / 32)), 32768 bytes
// of dynamic shared memory; any B, C, T >= 1 (grid y, z <= 65535).
constexpr int FOLD_CHUNKS = 8;  // 256 u
template <Product P, Diagonal DIAG, typename E = float, bool FOLD = false>
__global__ void __launch_bounds__(TX_THREADS, 3)
timex_tf32x3f(const E* __restrict__ w, long long ldw, const E* __restrict__ k, long long sb, long long sc,
              E* __restrict__ out, double eps, int B, int C, int T) {
  constexpr bool REV = P == Product::grad_k, TRI = DIAG == Diagonal::skip_zero_tiles;
  constexpr bool SPLIT = SplitTf32<E>::value;
  typedef typename TapPair<SPLIT>::type TP;
  constexpr int BM = 32, TN = 256, KU = 32, NTAP = TN + KU;
  constexpr int NK = KU * BM / TX_THREADS;  // 8 k values per thread per chunk
  constexpr int NTP = (NTAP + TX_THREADS - 1) / TX_THREADS;  // 3 tap entries per thread
  __shared__ __align__(16) unsigned ahi[2][KU * BM], alo[2][SPLIT ? KU * BM : 4];
  __shared__ __align__(16) TP tp[2][NTAP];
  extern __shared__ float4 fold_total[];  // FOLD: [16][TX_THREADS], a thread's 64 sums

  const int c = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int grp = lane >> 2, tig = lane & 3;
  const int role = warp;  // this warp's 64-t slice
  // the block's rows and (virtual) first time: the heaviest blocks (latest times) first
  long long b0 = 0;
  FoldedRows fold{0, 0, B, 0};
  int t0, fold_mt0_from = 0;
  if constexpr (FOLD) {
    const int nblk = (T + TN - 1) / TN;
    fold.rows = (long long)B * nblk;
    fold.rb = (long long)(gridDim.z - 1 - blockIdx.z) * BM;
    fold.pmax = (int)min((long long)nblk - 1, (fold.rb + BM - 1) / B);
    t0 = fold.pmax * TN;
    // m-tile 0 (rows rb..rb+15, of earlier blocks) reads only zeros before this u
    fold_mt0_from = TN * (fold.pmax - (int)min((long long)nblk - 1, (fold.rb + 15) / B));
  } else {
    b0 = (long long)blockIdx.z * BM;
    t0 = (gridDim.y - 1 - blockIdx.y) * TN;
  }
  const int ts = t0 + role * 64;  // the slice's first time
  // a slice wholly past T computes nothing (FOLD: its rows of earlier blocks lie before T)
  const int u_last = FOLD || ts < T ? ts + 63 : -1;
  const int nchunks = ((FOLD ? t0 + TN : min(t0 + TN, T)) + KU - 1) / KU;
  const E* wrow = w + (long long)c * ldw;

  // staged element q of this thread: fragment word x + 128 q = ((s*2 + mt)*32 + l)*4 + e with l = x/4, e = x%4,
  // mt = q%2, s = q/2: row 16 mt + l/4 + 8 (e&1), u = 8 s + l%4 + 4 (e>>1)
  const int sx = threadIdx.x, sl = sx >> 2, se = sx & 3;
  const int lr = (sl >> 2) + 8 * (se & 1);  // local row of mt = 0 (mt = 1: +16)
  const int uq = (sl & 3) + 4 * (se >> 1);  // u offset of s = 0 (s: +8 s)
  long long br0, br1;
  int sh0, sh1;
  bool ok0, ok1;
  if constexpr (FOLD) {
    ok0 = fold.at(lr, br0, sh0), ok1 = fold.at(lr + 16, br1, sh1);
  } else {
    br0 = b0 + lr, br1 = br0 + 16, sh0 = sh1 = 0, ok0 = br0 < B, ok1 = br1 < B;
  }
  const E* kr0 = k + (long long)c * sc + (ok0 ? br0 : 0) * sb;
  const E* kr1 = k + (long long)c * sc + (ok1 ? br1 : 0) * sb;

  float acc[2][8][4];
  zero_tiles(acc);
  // FOLD: acc into the thread's totals (first: stored), acc zeroed
  auto flush = [&](bool first) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float* a = acc[i >> 3][i & 7];
      float4& s = fold_total[i * TX_THREADS + threadIdx.x];
      s = first ? make_float4(a[0], a[1], a[2], a[3])
                : make_float4(s.x + a[0], s.y + a[1], s.z + a[2], s.w + a[3]);
    }
    zero_tiles(acc);
  };

  float pk[NK], pt[NTP][2];
  auto tap = [&](int d) { return (d >= 0 && d < T) ? cast<float>(wrow[T - 1 - d]) : 0.f; };
  auto fetch = [&](int u0) {
#pragma unroll
    for (int q = 0; q < NK; ++q) {
      const int u = u0 + 8 * (q >> 1) + uq - (q & 1 ? sh1 : sh0);
      const int ui = REV ? T - 1 - u : u;
      pk[q] = ((q & 1 ? ok1 : ok0) && u < T && (!FOLD || u >= 0)) ? cast<float>((q & 1 ? kr1 : kr0)[ui]) : 0.f;
    }
#pragma unroll
    for (int q = 0; q < NTP; ++q) {
      const int d = t0 - u0 - (KU - 1) + threadIdx.x + q * TX_THREADS;
      pt[q][0] = tap(d);
      pt[q][1] = tap(d - 4);
    }
  };
  auto stage = [&](int buf) {
#pragma unroll
    for (int q = 0; q < NK; ++q) {
      if constexpr (SPLIT) {
        const unsigned hi = tf32_hi(pk[q]);
        ahi[buf][sx + q * TX_THREADS] = hi;
        alo[buf][sx + q * TX_THREADS] = tf32_hi(pk[q] - __uint_as_float(hi));
      } else {
        ahi[buf][sx + q * TX_THREADS] = __float_as_uint(pk[q]);
      }
    }
#pragma unroll
    for (int q = 0; q < NTP; ++q) {
      const int i = threadIdx.x + q * TX_THREADS;
      if (NTAP % TX_THREADS == 0 || i < NTAP) {
        if constexpr (SPLIT) {
          const unsigned h0 = tf32_hi(pt[q][0]), h1 = tf32_hi(pt[q][1]);
          tp[buf][i] = make_uint4(h0, h1, tf32_hi(pt[q][0] - __uint_as_float(h0)),
                                  tf32_hi(pt[q][1] - __uint_as_float(h1)));
        } else {
          tp[buf][i] = make_uint2(__float_as_uint(pt[q][0]), __float_as_uint(pt[q][1]));
        }
      }
    }
  };
  if (nchunks > 0) {
    fetch(0);
    stage(0);
  }
  __syncthreads();
  for (int ch = 0; ch < nchunks; ++ch) {
    const int u0 = ch * KU, buf = ch & 1;
    if (ch + 1 < nchunks) fetch(u0 + KU);  // in flight while this chunk is multiplied
    if (u0 <= u_last) {  // warp-uniform: else only zero taps left for this slice (or all its t >= T)
      const TP* tpw = tp[buf] + role * 64 - 24 + grp - tig + KU - 1;  // fragment m at tpw[8 m]
      if (FOLD && u0 < fold_mt0_from)
        tf32x3f_chunk<-1, SPLIT, 1>(acc, tpw, ahi[buf], alo[buf], lane);
      else if (!TRI || u0 < ts)
        tf32x3f_chunk<-1, SPLIT>(acc, tpw, ahi[buf], alo[buf], lane);
      else if (u0 == ts)
        tf32x3f_chunk<0, SPLIT>(acc, tpw, ahi[buf], alo[buf], lane);
      else
        tf32x3f_chunk<1, SPLIT>(acc, tpw, ahi[buf], alo[buf], lane);
    }
    if (ch + 1 < nchunks) stage(buf ^ 1);  // the other buffer: its last readers passed the previous barrier
    if (FOLD && (ch + 1) % FOLD_CHUNKS == 0) flush(ch + 1 == FOLD_CHUNKS);
    __syncthreads();
  }
  if constexpr (FOLD) {
    if (nchunks >= FOLD_CHUNKS) {  // the totals, plus the last partial group in acc
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float4 s = fold_total[i * TX_THREADS + threadIdx.x];
        float* a = acc[i >> 3][i & 7];
        a[0] += s.x, a[1] += s.y, a[2] += s.z, a[3] += s.w;
      }
    }
    store_warp_tile<REV>(acc, out, (float)eps, fold, ts, grp, tig, c, C, T);
  } else {
    store_warp_tile<REV>(acc, out, (float)eps, BatchRows{b0, B}, ts, grp, tig, c, C, T);
  }
}


// ---- tensor cores on 16-bit operands: mma m16n8k16 (variant "mma16"; auto for float16 / bfloat16) -------
// timex_tf32x3f's Toeplitz product for E = half, bfloat16 with mma.sync m16n8k16 on E operands (float32
// accumulation; a product of two E values is exact): half the MMAs of the one-pass TF32 kernel and operands
// staged as 16-bit values (half its shared memory and staging stores). A block owns 32 rows b x 256 times t of
// one channel, warp w the 64-t slice w (2 x 8 m16n8 tiles); chunks of 64 u.
// - k tile: [b][u] rows of 64 + 8 elements (144 bytes, so the 8 rows an ldmatrix phase reads fall on distinct
//   bank quads); A fragments by ldmatrix.x4. Thread x stages the 16-byte pieces x and x + 128 (row x/8 + 16q,
//   u 8(x%8)): a warp reads 4 rows x 128 contiguous bytes. grad_k reads g time-reversed, a piece being the
//   16 bytes at T-8-u with its 8 elements reversed. Loads::vec8: one 16-byte load a piece (T, the strides and
//   the pointer multiples of 8 elements), else 8 scalar loads.
// - taps: lane (grp, tig)'s B fragment of n-tile j at k-step s is b0 = (f[d], f[d-1]), b1 = (f[d-8], f[d-9])
//   with d = ts - u0 + 8(j - 2s) + grp - 2tig (ts: the slice's first time), so it depends on j - 2s only:
//   the window Q[i] = (b0, b1) for d = t0 - u0 - QOFF + i holds the chunk's 310 fragments, one 8-byte load each,
//   and a warp loads its 14 distinct ones once a chunk (those of k-step s as s reaches them). The next chunk's
//   window is this one moved down by 64, so the pairs live in a ring of 512 (each stored twice, at d & 511 and
//   512 above, so a window is contiguous): a chunk stages only its 64 new pairs, one per thread.
// - the slice's diagonal chunk (u0 = ts) runs only the tiles j >= 2s (the others lie wholly above the
//   diagonal: stored zero taps) and needs fragments j - 2s >= 0; chunks past the slice are skipped. As in
//   tf32x3f, an Inf/NaN in a later k no longer reaches earlier outputs through 0 * Inf.
// Two buffers, one barrier a chunk; the next chunk's global loads are in flight during this one's MMAs.
// Outputs: 16-byte stores through shared memory when T % 8 == 0, else the fragments' own stores.
// Two 16-bit values as one word: x in the low half (the lower MMA k index), y in the high.
__device__ __forceinline__ unsigned pack_b16(unsigned x, unsigned y) { return x | (y << 16); }
// A 16-byte piece of 8 16-bit elements in reverse order.
__device__ __forceinline__ uint4 reverse8(uint4 v) {
  return make_uint4(__byte_perm(v.w, 0, 0x1032), __byte_perm(v.z, 0, 0x1032), __byte_perm(v.y, 0, 0x1032),
                    __byte_perm(v.x, 0, 0x1032));
}

constexpr int MMA16_KS = 64 + 8;  // timex_mma16's k tile row, in elements (64 u + 8 padding)

// One 64-u chunk of timex_mma16's MMAs for one warp. DIAG: the slice's diagonal chunk (tiles j >= 2s only).
// tql: this lane's tap pair of j - 2s = 0 (that of m = j - 2s at tql[8m], m in [-6, 8)); arow: this lane's
// ldmatrix row address of m-tile 0, k-step 0.
template <bool DIAG, typename E>
__device__ __forceinline__ void mma16_chunk(float (&acc)[2][8][4], const uint2* tql, const unsigned short* arow) {
  uint2 bf[14];  // bf[m + 6]
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    // the fragments k-step s adds: m in [-2s, 8 - 2s), of which m >= 0 in the diagonal chunk
    if (s == 0) {
#pragma unroll
      for (int m = 0; m < 8; ++m) bf[m + 6] = tql[8 * m];
    } else if (!DIAG) {
      bf[6 - 2 * s] = tql[-16 * s];
      bf[7 - 2 * s] = tql[8 - 16 * s];
    }
    unsigned a[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) ldmatrix_x4(a[mt], smem_addr(arow + 16 * MMA16_KS * mt + 16 * s));
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int j = DIAG ? 2 * s : 0; j < 8; ++j) {
        const unsigned b[2] = {bf[j - 2 * s + 6].x, bf[j - 2 * s + 6].y};
        mma16816<E>(acc[mt][j], a[mt], b);
      }
  }
}

// E = half, bfloat16; Loads::vec8 or scalar (k / g reads, see above). 4 blocks an SM with 16-byte loads (128
// registers, no spills on sm_90), 3 with scalar loads (their packing needs ~145).
// Launch: grid (C, ceil(T/256), ceil(B/32)), block 128; any B, C, T >= 1 (T/256, B/32 <= 65535); 17408 B shared.
template <Product P, typename E, Loads L>
__global__ void __launch_bounds__(TX_THREADS, L == Loads::vec8 ? 4 : 3)
timex_mma16(const E* __restrict__ w, long long ldw, const E* __restrict__ k, long long sb, long long sc,
            E* __restrict__ out, double eps, int B, int C, int T) {
  constexpr bool REV = P == Product::grad_k, VEC = L == Loads::vec8;
  static_assert(L == Loads::vec8 || L == Loads::scalar, "timex_mma16 loads by 8 elements or by one");
  constexpr int BM = 32, TN = 256, KU = 64, KS = MMA16_KS;
  constexpr int QOFF = KU - 10;  // Q[i] holds d = t0 - u0 - QOFF + i: i = 0 is the least d of a lane's b0
  constexpr int NQ = TN + KU - 10;  // the largest i read: 64*3 + 8*7 + 7 + QOFF = 309
  constexpr int NFILL = (NQ - KU + TX_THREADS - 1) / TX_THREADS;  // 2 pairs a thread to finish the first window
  constexpr int NP = BM * KU / 8 / TX_THREADS;             // 2 pieces of 8 k values a thread
  constexpr int RING = 512;  // tap-pair ring: pair d at (d & 511) and (d & 511) + 512
  static_assert(NQ + KU <= RING && TX_THREADS == 2 * KU, "the ring holds a window and the next chunk's pairs");
  __shared__ __align__(16) unsigned short ka[2][BM * KS];
  __shared__ __align__(16) uint2 tq[2 * RING];

  const int c = blockIdx.x;
  const int t0 = (gridDim.y - 1 - blockIdx.y) * TN;
  const long long b0 = (long long)blockIdx.z * BM;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int grp = lane >> 2, tig = lane & 3;
  const int ts = t0 + warp * 64;  // this warp's slice: times ts .. ts + 63
  const int nchunks = (min(t0 + TN, T) + KU - 1) / KU;
  const unsigned short* wrow = reinterpret_cast<const unsigned short*>(w + (long long)c * ldw);

  // staged pieces x + 128 q: row pr + 16 q, u offset pu
  const int pr = threadIdx.x >> 3, pu = 8 * (threadIdx.x & 7);
  const unsigned short* kr[NP];
  bool okr[NP];
#pragma unroll
  for (int q = 0; q < NP; ++q) {
    const long long b = b0 + pr + 16 * q;
    okr[q] = b < B;
    kr[q] = reinterpret_cast<const unsigned short*>(k + (long long)c * sc + (okr[q] ? b : 0) * sb);
  }

  float acc[2][8][4];
  zero_tiles(acc);

  uint4 pk[NP];
  uint2 pt;  // the tap pair this thread adds to the ring for the next chunk
  auto tap = [&](int d) -> unsigned { return (unsigned)d < (unsigned)T ? wrow[T - 1 - d] : 0u; };
  auto tap_pair = [&](int d) { return make_uint2(pack_b16(tap(d), tap(d - 1)), pack_b16(tap(d - 8), tap(d - 9))); };
  // the window of chunk u0 starts at pair d = t0 - u0 - QOFF; the next chunk's adds the 64 below it: thread x
  // stores pair x % 64 of them, in copy x / 64
  const int ring_d = (threadIdx.x & (KU - 1)) - QOFF, ring_copy = (threadIdx.x / KU) * RING;
  auto fetch = [&](int u0) {
#pragma unroll
    for (int q = 0; q < NP; ++q) {
      const int u = u0 + pu;
      if constexpr (VEC) {  // u % 8 == 0 and T % 8 == 0: the piece is wholly inside or past T
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (okr[q] && u < T) {
          if (REV)
            v = reverse8(*reinterpret_cast<const uint4*>(kr[q] + (T - 8 - u)));
          else
            v = *reinterpret_cast<const uint4*>(kr[q] + u);
        }
        pk[q] = v;
      } else {
        unsigned h[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) h[e] = (okr[q] && u + e < T) ? kr[q][REV ? T - 1 - u - e : u + e] : 0u;
        pk[q] = make_uint4(pack_b16(h[0], h[1]), pack_b16(h[2], h[3]), pack_b16(h[4], h[5]), pack_b16(h[6], h[7]));
      }
    }
    pt = tap_pair(t0 - u0 + ring_d);
  };
  // k tile of chunk u0 into buffer buf, its new tap pairs into the ring (slots that no window being read holds:
  // the pair 512 above each is past the current window's top)
  auto stage = [&](int buf, int u0) {
#pragma unroll
    for (int q = 0; q < NP; ++q) *reinterpret_cast<uint4*>(&ka[buf][(pr + 16 * q) * KS + pu]) = pk[q];
    tq[((t0 - u0 + ring_d) & (RING - 1)) + ring_copy] = pt;
  };
  // this lane's ldmatrix row: matrix l/8 = (rows +8 for odd, cols +8 for l >= 16), row l%8
  const int arow = ((lane & 7) + 8 * ((lane >> 3) & 1)) * KS + 8 * (lane >> 4);
  const int tqo = warp * 64 + grp - 2 * tig + QOFF;

  if (nchunks > 0) {
    fetch(0);
    stage(0, 0);
#pragma unroll
    for (int q = 0; q < NFILL; ++q) {  // the rest of the first window: pairs 64 .. NQ-1 (both copies)
      const int i = KU + threadIdx.x + q * TX_THREADS;
      if (i < NQ) {
        const int d = t0 - QOFF + i;
        const uint2 v = tap_pair(d);
        tq[d & (RING - 1)] = v;
        tq[(d & (RING - 1)) + RING] = v;
      }
    }
  }
  __syncthreads();
  for (int ch = 0; ch < nchunks; ++ch) {
    const int u0 = ch * KU, buf = ch & 1;
    if (ch + 1 < nchunks) fetch(u0 + KU);  // in flight while this chunk is multiplied
    if (ts < T && u0 <= ts) {  // warp-uniform: later chunks hold only zero taps for this slice
      const uint2* tql = tq + ((t0 - u0 - QOFF) & (RING - 1)) + tqo;  // window pair i at tq[start + i]
      if (u0 < ts)
        mma16_chunk<false, E>(acc, tql, ka[buf] + arow);
      else
        mma16_chunk<true, E>(acc, tql, ka[buf] + arow);
    }
    if (ch + 1 < nchunks) stage(buf ^ 1, u0 + KU);  // the other k buffer: its last readers passed the last barrier
    __syncthreads();
  }

  if ((T & 7) == 0) {
    // 16-byte stores (8 lanes a row's 128 bytes, where the fragments' 4-byte stores fill half sectors): each m-tile
    // of the warp (16 rows x 64 t) through its quarter of the k buffers (no longer read: the loop's last barrier),
    // rounded to E there; grad_k writes each 8-time piece reversed at T-8-t.
    E* tile = reinterpret_cast<E*>(&ka[0][0]) + warp * 16 * KS;  // 4 warps x 16 rows x KS = both buffers
    const float e = (float)eps;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        store2(tile + grp * KS + 8 * j + 2 * tig, acc[mt][j][0] + e, acc[mt][j][1] + e);
        store2(tile + (grp + 8) * KS + 8 * j + 2 * tig, acc[mt][j][2] + e, acc[mt][j][3] + e);
      }
      __syncwarp();
#pragma unroll
      for (int it = 0; it < 4; ++it) {
        const int r = 4 * it + (lane >> 3), t = ts + 8 * (lane & 7);
        const long long b = b0 + 16 * mt + r;
        const uint4 v = *reinterpret_cast<const uint4*>(tile + r * KS + 8 * (lane & 7));
        if (b < B && t < T) {  // T % 8 == 0: the piece is wholly inside
          E* orow = out + (b * C + c) * (long long)T;
          if (REV)
            *reinterpret_cast<uint4*>(orow + (T - 8 - t)) = reverse8(v);
          else
            *reinterpret_cast<uint4*>(orow + t) = v;
        }
      }
      __syncwarp();  // the tile is rewritten by the next m-tile
    }
  } else {
    store_warp_tile<REV>(acc, out, (float)eps, BatchRows{b0, B}, ts, grp, tig, c, C, T);
  }
}

// ---- grad_w on the tensor cores: diagonal bands (variant "tf32x3", all but float64; auto where faster) -
constexpr int TXB = 64;  // band tile of the tensor-core grad_w

// The band GEMMs' block (timex_grad_w_frag, timex_grad_w_mma16): channel c and first band band0 of this block
// (channels in groups of TX_GROUP, each group's long bands first), and nt, the bands of T.
template <int NB>
__device__ __forceinline__ void timex_band_block(int C, int T, int& c, int& band0, int& nt) {
  nt = (T + TXB - 1) / TXB;
  const int npair = (nt + NB - 1) / NB;
  const long long bid = blockIdx.x;
  const long long group = bid / ((long long)TX_GROUP * npair);
  const int gsz = (int)min((long long)TX_GROUP, C - group * TX_GROUP);
  const int r_in = (int)(bid - group * TX_GROUP * npair);
  c = (int)(group * TX_GROUP) + r_in % gsz;
  band0 = (r_in / gsz) * NB;
}

// Their epilogue, once the block's NB 64 x 64 band tiles are in sm (pitch SE): thread x < 2 TXB - 1 sums diagonal
// x - (TXB - 1) of each tile, in a fixed order, into ws.
template <int NB, int SE>
__device__ __forceinline__ void timex_band_diagonals(const float* sm, float* __restrict__ ws, int c, int band0, int nt) {
  __syncthreads();
  const int e = (int)threadIdx.x - (TXB - 1);
  if (e < TXB) {
    float s[NB];
#pragma unroll
    for (int bb = 0; bb < NB; ++bb) s[bb] = 0.f;
    for (int i = max(0, -e); i < min(TXB, TXB - e); ++i)
#pragma unroll
      for (int bb = 0; bb < NB; ++bb) s[bb] += sm[bb * TXB * SE + i * SE + i + e];
#pragma unroll
    for (int bb = 0; bb < NB; ++bb)
      if (band0 + bb < nt) ws[((long long)c * nt + band0 + bb) * (2 * TXB) + threadIdx.x] = s[bb];
  }
}

// grad_f[c,d] = sum_b sum_t' k[b,t'] g[b,t'+d]. Cut t' = p0+i and t = p0+delta+j with p0, delta multiples of
// 64 and i, j in [0,64): the band sum ACC[i,j] = sum_{b,p0} k[b,p0+i] g[b,p0+delta+j] is a plain 64 x 64
// GEMM over K = (b, p0), and each pair (t', t >= t') falls in exactly one band, on the diagonal
// j - i = d - delta. A block computes bands of one channel with timex_tf32x3's MMAs (3 or 1 a tile) and sums
// its accumulators along the 127 diagonals into ws[c][band][63 + j - i] (fixed order); timex_grad_w_bands
// then adds the two bands that hold each lag. Deterministic, no float atomics, workspace ~2*C*T floats.
// Rows past B*np and times past T are zeros. Blocks run channel group by channel group (16 channels, all
// bands, the long bands first), so the rows a group re-reads stay in L2.
// Shared memory is laid out in the order the MMA fragments are read, so every fragment is one 16-byte load
// straight into the registers the HMMA takes (gathering fragments from two loads each cost ~6 register moves
// per HMMA: grad_w 0.471 -> 0.332 ms at B=32 C=768 T=768, H200). K rows go in
// pairs (kp): MMA k index tig <-> row 2kp, tig+4 <-> row 2kp+1. A (k values, i): MMA row grp of m-tile m
// <-> i = 16m + 2grp, row grp+8 <-> i+1, stored [kp][i/2][h][i%2] (h = row parity): a0..a3 in one uint4.
// B (g values, j): n-tile pair q, column grp <-> j = 16q + 2grp + e (e = tile of the pair), stored
// [kp][j/2][j%2][h]: b0, b1 of both tiles in one uint4. Rows of 136 (+8 floats): conflict-free.
// NB bands per block (delta = 64*band0 .. 64*(band0+NB-1)): the k fragments feed NB x as many MMAs and the
// staging of k is shared; the K rows are those of band0 (the later band's extra row block is zeros).
// Warp (wm, wn) owns i in [32wm, 32wm+32) x j in [32NB wn, 32NB (wn+1)). A thread stages rows 2(tid/16) and
// 2(tid/16)+1 of each 16-row chunk (one (b, p) counter pair each, no divisions in the loop).
// Loads::vec2: 2-element global loads (T, strides and pointers even).
// E = half, bfloat16 (last, so float32's names stay): values converted to float are exact in TF32: no lo
// operands (staging half the size; the epilogue tile still sets the shared memory), one MMA a tile.
// Launch: 1-D grid of C*ceil(ceil(T/64)/NB) blocks of 128; any B, C, T >= 1 (C, B * ceil(T/64) < 2^31).
template <int NB, Loads L, typename E = float>
__global__ void __launch_bounds__(TX_THREADS, NB == 1 ? 4 : 3)
timex_grad_w_frag(const E* __restrict__ k, long long ksb, long long ksc, const E* __restrict__ g,
                  long long gsb, long long gsc, float* __restrict__ ws, int B, int C, int T) {
  constexpr bool VEC = L == Loads::vec2, SPLIT = SplitTf32<E>::value;
  constexpr int PARTS = SPLIT ? 2 : 1;            // staged operands: hi and lo, or the exact value
  static_assert(L != Loads::vec4, "timex_grad_w_frag loads by 2 elements or by one");
  constexpr int KC = 16, KP = KC / 2;             // K rows per chunk, row pairs
  constexpr int SA = TXB * 2 + 8, SB = TXB * NB * 2 + 8;  // floats per row pair (2 rows + pad)
  constexpr int NA = TXB / 2 / 16, NG = TXB * NB / 2 / 16;  // 2-column groups per thread per row
  constexpr int SE = TXB + 1;                     // epilogue tile row
  constexpr int STAGE = PARTS * KP * (SA + SB), EPI = NB * TXB * SE;
  __shared__ __align__(16) float sm[STAGE > EPI ? STAGE : EPI];
  float* const ahi = sm;
  float* const alo = ahi + KP * SA;  // SPLIT only, as blo
  float* const bhi = ahi + PARTS * KP * SA;
  float* const blo = bhi + KP * SB;

  int c, band0, nt;
  timex_band_block<NB>(C, T, c, band0, nt);
  const int np = nt - band0;                       // tiles p with p*64 + delta0 < T
  const int nchunks = (B * np + KC - 1) / KC;
  const E* k0 = k + (long long)c * ksc;
  const E* g0 = g + (long long)c * gsc + band0 * TXB;
  const int glim = T - band0 * TXB;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int grp = lane >> 2, tig = lane & 3;
  const int wm = warp >> 1, wn = warp & 1;
  const int kp = threadIdx.x >> 4, col = threadIdx.x & 15;  // this thread's staging: row pair, column group

  float acc[2][4 * NB][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < 4 * NB; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;

  int rb[2], rp[2];  // (b, p) of the thread's two rows in the current chunk
#pragma unroll
  for (int h = 0; h < 2; ++h) rb[h] = (2 * kp + h) / np, rp[h] = (2 * kp + h) % np;
  float pa[2][NA][2], pg[2][NG][2];  // [row][group][2 columns]
  auto load2 = [&](float* dst, const E* row, int t, int lim) {  // row[t], row[t+1], zeros at >= lim
    if constexpr (VEC) {
      float2 v = make_float2(0.f, 0.f);
      if constexpr (SPLIT) {
        if (t < lim) v = *reinterpret_cast<const float2*>(row + t);
      } else {
        if (t < lim) v = unpack2<E>(*reinterpret_cast<const unsigned*>(row + t));
      }
      dst[0] = v.x, dst[1] = v.y;
    } else {
      dst[0] = t < lim ? cast<float>(row[t]) : 0.f;
      dst[1] = t + 1 < lim ? cast<float>(row[t + 1]) : 0.f;
    }
  };
  auto fetch = [&]() {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const bool ok = rb[h] < B;
      const E* kr = k0 + (long long)rb[h] * ksb + rp[h] * TXB;
      const E* gr = g0 + (long long)rb[h] * gsb + rp[h] * TXB;
      const int klim = ok ? T - rp[h] * TXB : 0, glim_r = ok ? glim - rp[h] * TXB : 0;
#pragma unroll
      for (int s = 0; s < NA; ++s) load2(pa[h][s], kr, 2 * (col + 16 * s), klim);
#pragma unroll
      for (int s = 0; s < NG; ++s) load2(pg[h][s], gr, 2 * (col + 16 * s), glim_r);
      rp[h] += KC;  // the next chunk's row
      while (rp[h] >= np) rp[h] -= np, ++rb[h];
    }
  };
  auto split = [](float x, unsigned& lo) {
    const unsigned hi = tf32_hi(x);
    lo = tf32_hi(x - __uint_as_float(hi));
    return hi;
  };

  if (nchunks > 0) fetch();
  for (int ch = 0; ch < nchunks; ++ch) {
    __syncthreads();  // the previous chunk's fragments are read
#pragma unroll
    for (int s = 0; s < NA; ++s) {  // A: (i even, h0), (i odd, h0), (i even, h1), (i odd, h1)
      const int o = kp * SA + 4 * (col + 16 * s);
      if constexpr (SPLIT) {
        uint4 hv, lv;
        hv.x = split(pa[0][s][0], lv.x), hv.y = split(pa[0][s][1], lv.y);
        hv.z = split(pa[1][s][0], lv.z), hv.w = split(pa[1][s][1], lv.w);
        *reinterpret_cast<uint4*>(ahi + o) = hv;
        *reinterpret_cast<uint4*>(alo + o) = lv;
      } else {
        *reinterpret_cast<float4*>(ahi + o) = make_float4(pa[0][s][0], pa[0][s][1], pa[1][s][0], pa[1][s][1]);
      }
    }
#pragma unroll
    for (int s = 0; s < NG; ++s) {  // B: (j even, h0), (j even, h1), (j odd, h0), (j odd, h1)
      const int o = kp * SB + 4 * (col + 16 * s);
      if constexpr (SPLIT) {
        uint4 hv, lv;
        hv.x = split(pg[0][s][0], lv.x), hv.y = split(pg[1][s][0], lv.y);
        hv.z = split(pg[0][s][1], lv.z), hv.w = split(pg[1][s][1], lv.w);
        *reinterpret_cast<uint4*>(bhi + o) = hv;
        *reinterpret_cast<uint4*>(blo + o) = lv;
      } else {
        *reinterpret_cast<float4*>(bhi + o) = make_float4(pg[0][s][0], pg[1][s][0], pg[0][s][1], pg[1][s][1]);
      }
    }
    __syncthreads();
    if (ch + 1 < nchunks) fetch();  // in flight while this chunk is multiplied
#pragma unroll
    for (int st = 0; st < KC / 8; ++st) {
      const int q = 4 * st + tig;  // row pair of this k-step's fragments
      uint4 ah[2], al[SPLIT ? 2 : 1], bh[2 * NB], bl[SPLIT ? 2 * NB : 1];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int o = q * SA + 4 * (8 * (2 * wm + mt) + grp);
        ah[mt] = *reinterpret_cast<const uint4*>(ahi + o);
        if constexpr (SPLIT) al[mt] = *reinterpret_cast<const uint4*>(alo + o);
      }
#pragma unroll
      for (int p = 0; p < 2 * NB; ++p) {
        const int o = q * SB + 4 * (16 * NB * wn + 8 * p + grp);
        bh[p] = *reinterpret_cast<const uint4*>(bhi + o);
        if constexpr (SPLIT) bl[p] = *reinterpret_cast<const uint4*>(blo + o);
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int n = 0; n < 4 * NB; ++n) {  // n-tile n = pair n/2, tile n%2: b0, b1 = (x, y) or (z, w)
          const unsigned* a_h = &ah[mt].x;
          const unsigned* b_h = &bh[n / 2].x + 2 * (n % 2);
          if constexpr (SPLIT) {
            const unsigned* a_l = &al[mt].x;
            const unsigned* b_l = &bl[n / 2].x + 2 * (n % 2);
            mma_tf32(acc[mt][n], a_l, b_h[0], b_h[1]);
            mma_tf32(acc[mt][n], a_h, b_l[0], b_l[1]);
          }
          mma_tf32(acc[mt][n], a_h, b_h[0], b_h[1]);
        }
    }
  }

  // Diagonal sums per band: accumulators to shared memory ([band][i][j - 64 band]), then thread x sums
  // diagonal j - i = x - 63 of every band, i ascending (fixed order).
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int n = 0; n < 4 * NB; ++n)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int i = 16 * (2 * wm + mt) + 2 * grp + (x >> 1);
        const int j = 32 * NB * wn + 16 * (n / 2) + 4 * tig + 2 * (x & 1) + n % 2;
        sm[(j / TXB) * TXB * SE + i * SE + j % TXB] = acc[mt][n][x];
      }
  timex_band_diagonals<NB, SE>(sm, ws, c, band0, nt);
}

// ---- grad_w on 16-bit tensor-core operands (variant "mma16"; auto for float16 / bfloat16) ----------------
// timex_grad_w_frag's band GEMMs (two bands a block, its workspace, grid order and diagonal sums, then
// timex_grad_w_bands) with mma.sync m16n8k16 on E operands. Shared memory holds the K rows as they lie in global
// memory, 16-bit: A [kk][i] (64 + 8 elements a row) and B [kk][j] (128 + 8; both pitches put an ldmatrix phase's 8
// rows on distinct bank quads). Both MMA operands pair two consecutive K rows at one column (a0 = k of rows 2tig,
// 2tig+1 at i = grp; b0 likewise at j = grp), which ldmatrix.trans delivers from that layout: one .x4.trans is
// an A fragment (16 i x 16 kk) or the B fragments of two n-tiles. 32 K rows a chunk; thread x stages row x/4 (one
// (b, p) counter pair): k at 16(x%4) .. +15 and g at 32(x%4) .. +31 of the row. Loads::vec8: 16-byte loads (T,
// the strides and the pointers multiples of 8 elements), else scalar. Warp (wm, wn) owns i in [32wm, +32) x j in
// [64wn, +64) (2 x 8 m16n8 tiles). Two buffers, one barrier a chunk.
// Launch: 1-D grid of C*ceil(ceil(T/64)/2) blocks of 128; any B, C, T >= 1 (C, B * ceil(T/64) < 2^31).
template <typename E, Loads L>
__global__ void __launch_bounds__(TX_THREADS, 3)
timex_grad_w_mma16(const E* __restrict__ k, long long ksb, long long ksc, const E* __restrict__ g, long long gsb,
                   long long gsc, float* __restrict__ ws, int B, int C, int T) {
  constexpr bool VEC = L == Loads::vec8;
  static_assert(L == Loads::vec8 || L == Loads::scalar, "timex_grad_w_mma16 loads by 8 elements or by one");
  constexpr int NB = 2, KC = 32;                    // bands a block, K rows a chunk
  constexpr int SA = TXB + 8, SB = NB * TXB + 8;    // elements a staged row of k, of g
  constexpr int SE = TXB + 1;                       // epilogue tile row (floats)
  constexpr int STAGE = 2 * KC * (SA + SB) * 2, EPI = NB * TXB * SE * 4;  // bytes
  __shared__ __align__(16) unsigned char smem[STAGE > EPI ? STAGE : EPI];
  unsigned short* const sa = reinterpret_cast<unsigned short*>(smem);  // [2][KC][SA]
  unsigned short* const sg = sa + 2 * KC * SA;                         // [2][KC][SB]
  float* const sm = reinterpret_cast<float*>(smem);

  int c, band0, nt;
  timex_band_block<NB>(C, T, c, band0, nt);
  const int np = nt - band0;                       // tiles p with p*64 + delta0 < T
  const int nchunks = (B * np + KC - 1) / KC;
  const unsigned short* k0 = reinterpret_cast<const unsigned short*>(k) + (long long)c * ksc;
  const unsigned short* g0 = reinterpret_cast<const unsigned short*>(g) + (long long)c * gsc + band0 * TXB;
  const int glim = T - band0 * TXB;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int grp = lane >> 2, tig = lane & 3;
  const int wm = warp >> 1, wn = warp & 1;
  const int sr = threadIdx.x >> 2, sq = threadIdx.x & 3;  // this thread's staged row, quarter of it

  float acc[2][8][4];
  zero_tiles(acc);

  int rb = sr / np, rp = sr % np;  // (b, p) of the thread's row in the current chunk
  uint4 pa[2], pg[4];
  auto load8 = [&](const unsigned short* row, int t, int lim) -> uint4 {  // row[t .. t+7], zeros at >= lim
    if constexpr (VEC) {
      return t < lim ? *reinterpret_cast<const uint4*>(row + t) : make_uint4(0u, 0u, 0u, 0u);
    } else {
      unsigned h[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) h[e] = t + e < lim ? row[t + e] : 0u;
      return make_uint4(pack_b16(h[0], h[1]), pack_b16(h[2], h[3]), pack_b16(h[4], h[5]), pack_b16(h[6], h[7]));
    }
  };
  auto fetch = [&]() {
    const bool ok = rb < B;
    const long long b = ok ? rb : 0;
    const unsigned short* kr = k0 + b * ksb + rp * TXB;
    const unsigned short* gr = g0 + b * gsb + rp * TXB;
    const int klim = ok ? T - rp * TXB : 0, gl = ok ? glim - rp * TXB : 0;
#pragma unroll
    for (int s = 0; s < 2; ++s) pa[s] = load8(kr, 16 * sq + 8 * s, klim);
#pragma unroll
    for (int s = 0; s < 4; ++s) pg[s] = load8(gr, 32 * sq + 8 * s, gl);
    rp += KC;  // the next chunk's row
    if (rp >= np) rb += rp / np, rp %= np;
  };
  auto stage = [&](int buf) {
#pragma unroll
    for (int s = 0; s < 2; ++s) *reinterpret_cast<uint4*>(sa + (buf * KC + sr) * SA + 16 * sq + 8 * s) = pa[s];
#pragma unroll
    for (int s = 0; s < 4; ++s) *reinterpret_cast<uint4*>(sg + (buf * KC + sr) * SB + 32 * sq + 8 * s) = pg[s];
  };
  // this lane's ldmatrix rows: A matrix l/8 = (kk +8 for l >= 16, i +8 for odd l/8); B (kk +8 odd, j +8 l >= 16)
  const int arow = ((lane & 7) + 8 * (lane >> 4)) * SA + 32 * wm + 8 * ((lane >> 3) & 1);
  const int brow = ((lane & 7) + 8 * ((lane >> 3) & 1)) * SB + 64 * wn + 8 * (lane >> 4);

  if (nchunks > 0) {
    fetch();
    stage(0);
  }
  __syncthreads();
  for (int ch = 0; ch < nchunks; ++ch) {
    const int buf = ch & 1;
    if (ch + 1 < nchunks) fetch();  // in flight while this chunk is multiplied
    const unsigned short* A = sa + buf * KC * SA + arow;
    const unsigned short* Bm = sg + buf * KC * SB + brow;
#pragma unroll
    for (int st = 0; st < KC / 16; ++st) {
      unsigned a[2][4], b[4][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) ldmatrix_x4_trans(a[mt], smem_addr(A + 16 * st * SA + 16 * mt));
#pragma unroll
      for (int p = 0; p < 4; ++p) ldmatrix_x4_trans(b[p], smem_addr(Bm + 16 * st * SB + 16 * p));
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int n = 0; n < 8; ++n)  // n-tile n: b0, b1 = registers 2(n%2), 2(n%2)+1 of pair n/2
          mma16816<E>(acc[mt][n], a[mt], &b[n / 2][2 * (n % 2)]);
    }
    if (ch + 1 < nchunks) stage(buf ^ 1);  // the other buffer: its last readers passed the previous barrier
    __syncthreads();
  }

  // Diagonal sums per band, as timex_grad_w_frag: accumulators to shared memory ([band][i][j - 64 band]), then
  // thread x sums diagonal j - i = x - 63 of every band, i ascending (fixed order).
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int i = 32 * wm + 16 * mt + grp + 8 * (x >> 1);
        const int j = 8 * n + 2 * tig + (x & 1);  // in band wn
        sm[wn * TXB * SE + i * SE + j] = acc[mt][n][x];
      }
  timex_band_diagonals<NB, SE>(sm, ws, c, band0, nt);
}

// grad_w[c, T-1-d] for d = 64L + r: diagonal r of band L plus diagonal r - 64 of band L+1 (when r > 0), from
// ws as timex_grad_w_frag and timex_grad_w_mma16 write it (float32), rounded once to E.
// Launch: 1-D grid-stride loop over C*T, any block size; any C, T >= 1.
template <typename E>
__global__ void timex_grad_w_bands(const float* __restrict__ ws, E* __restrict__ gw, int C, int T) {
  const int nt = (T + TXB - 1) / TXB;
  const long long n = (long long)C * T;
  for (long long x = blockIdx.x * (long long)blockDim.x + threadIdx.x; x < n; x += (long long)gridDim.x * blockDim.x) {
    const long long c = x / T;
    const int d = T - 1 - (int)(x - c * T), L = d / TXB, r = d % TXB;
    const float* wc = ws + c * nt * (2 * TXB);
    float s = wc[L * (2 * TXB) + TXB - 1 + r];
    if (r > 0 && L + 1 < nt) s += wc[(L + 1) * (2 * TXB) + r - 1];
    gw[x] = cast<E>(s);
  }
}
