// In-place square matmul: A[m, n] <- A @ W (or A @ W^T), plus an optional bias row (in-place nn.Linear).
//
// The problem: an output tile C[rows, cols] needs the whole rows of A, and writing it over A would
// destroy inputs that the other column tiles of the same rows still need. Rows are independent, so the
// hazard is confined to one row block of BM rows. We keep every output tile in registers until all
// column tiles of its row block have finished reading A (a per-row-block arrival counter in global
// memory), and only then write: no output buffer and no workspace at all (a few bytes of counters).
//
// Schedule: a persistent grid (one wave of resident blocks) takes tiles in row-block-major order from a
// global ticket counter. A block waiting at its row block's barrier holds one ticket; tickets are taken
// in order, so the lowest unfinished row block always has all its tiles taken once the grid holds at
// least as many blocks as a row block has column tiles (tiles_n <= grid, checked by the host): no
// deadlock. Neighbouring tickets share the A strip and the W column panels, which stay in L2.
//
// Ladder: "warp_per_row" (the original article's kernel, from the project make-torch-inplace: one warp
// computes one output row from global memory, no tiling, no reuse; n <= 2048 from its 64-entry register
// buffer; 0.5-0.9 TFLOP/s on an H200) -> tiles: register-tiled FP32 SIMT (128 x 128, the float32 default,
// ~85% of cuBLAS without TF32); mma.sync tensor-core tiles, 128 x 256 ("mma256"), ~250-290 TFLOP/s
// -> TMA + wgmma (square_matmul_sm90.cu, Hopper only, the half-type default there).
//
// Kernels are instanced by name expressions such as sqmm_mma<half, sqmm::W::transposed, sqmm::Loads::vector>.
#include "common/mma.cuh"

namespace sqmm {

constexpr int BM = 128, BN = 128, THREADS = 256;

// The B operand: a @ W as given, or a @ W^T (linear_'s weight; also an F-contiguous w read as its transpose).
enum class W { plain, transposed };
// How tiles are read: 16-byte vectors (n a multiple of a 16-byte pack, a and w 16-byte aligned) or element
// by element (any n, any alignment).
enum class Loads { vector, scalar };


// ---- the row-block protocol (ctrl[0]: next ticket; ctrl[1 + rb]: arrivals of row block rb) ----------

// Before the first take_ticket(): the start of the static schedule that a null ctrl selects.
__device__ __forceinline__ void init_ticket(unsigned* slot) {
  if (threadIdx.x == 0) *slot = blockIdx.x - gridDim.x;
}

// The next tile ticket, the same for all threads of the block: from the counter ctrl[0], or with ctrl null
// (one column tile a row block: no block waits for another) statically, block b taking b, b + grid, ...
__device__ __forceinline__ unsigned take_ticket(unsigned* ctrl, unsigned* slot) {
  if (threadIdx.x == 0) *slot = ctrl ? atomicAdd(ctrl, 1u) : *slot + gridDim.x;
  __syncthreads();
  const unsigned t = *slot;
  __syncthreads();  // everyone has read the slot before thread 0 may write the next ticket
  return t;
}

struct Tile {
  unsigned rb;      // row block
  long long row0;   // its first row
  int n0;           // the tile's first column
};

// The block's next tile (columns tbn wide) from the ticket counter; false when none are left.
__device__ __forceinline__ bool next_tile(unsigned* ctrl, unsigned* slot, unsigned tiles_n, unsigned total_tiles,
                                          int tbn, Tile& tile) {
  const unsigned t = take_ticket(ctrl, slot);
  if (t >= total_tiles) return false;
  tile.rb = t / tiles_n;
  tile.row0 = (long long)tile.rb * BM;
  tile.n0 = (int)(t % tiles_n) * tbn;
  return true;
}

// One thread announces that its block has finished every read of A for its tile, then waits until all
// `expected` tiles of the row block have done the same.
__device__ __forceinline__ void row_block_arrive_wait(unsigned* arrivals, unsigned expected) {
  __threadfence();
  atomicAdd(arrivals, 1u);
  while (*reinterpret_cast<volatile unsigned*>(arrivals) < expected) __nanosleep(64);
  __threadfence();
}

// The whole block's row-block barrier: after it, the block may overwrite the rows of row block rb (ctrl null:
// the block's own tile is the row block's only one).
__device__ __forceinline__ void row_block_barrier(unsigned* ctrl, unsigned rb, unsigned expected) {
  __syncthreads();
  if (ctrl != nullptr && threadIdx.x == 0) row_block_arrive_wait(ctrl + 1 + rb, expected);
  __syncthreads();
}

// ---- PTX wrappers (sm_80+) ----------------------------------------------------------------------

// 16 bytes global -> shared, bypassing L1; src_bytes = 0 writes zeros (out-of-range chunks).
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
template <typename T> struct Pair2;
template <> struct Pair2<half> { typedef __half2 type; static __device__ __forceinline__ __half2 make(float x, float y) { return __floats2half2_rn(x, y); } };
template <> struct Pair2<bfloat16> { typedef __nv_bfloat162 type; static __device__ __forceinline__ __nv_bfloat162 make(float x, float y) { return __floats2bfloat162_rn(x, y); } };

// ---- tensor-core tile (float16 / bfloat16) ------------------------------------------------------

constexpr int MMA_BK = 32, MMA_STAGES = 4;
// Dynamic shared memory of a tile BM x TBN: 96 KB for the 256 columns of sqmm_mma.
template <int TBN> struct MmaSmem { static constexpr int bytes = MMA_STAGES * (BM * MMA_BK + MMA_BK * TBN) * 2; };

// [128][32] tiles (A, and W^T as [n][k]): 64-byte rows of four 16-byte chunks, the chunk index XORed with
// (row / 2) % 4 so that ldmatrix's eight rows hit eight different bank groups.
__device__ __forceinline__ int off_k32(int r, int c) { return r * 32 + ((c ^ ((r >> 1) & 3)) << 3); }
// [32][TBN] tiles (W as [k][n]): rows of TBN / 8 chunks, chunk XOR (row % 8).
template <int TBN> __device__ __forceinline__ int off_n(int r, int c) { return r * TBN + ((c ^ (r & 7)) << 3); }

// 8 elements of a row from p (len of them valid, the rest zero) into shared memory by plain loads: the
// path for rows that are not 16-byte aligned (n not a multiple of 8, or an offset base pointer).
template <typename T> __device__ __forceinline__ void load8_scalar(T* dst, const T* p, int len) {
  Pack<T, 8> v;
#pragma unroll
  for (int e = 0; e < 8; ++e) v.v[e] = e < len ? p[e] : cast<T>(0.0f);
  *reinterpret_cast<Pack<T, 8>*>(dst) = v;
}

// One pipeline stage: A[row0 : +128, k0 : +32] and the matching W panel (32 x TBN) into shared memory.
template <typename T, bool TRANS, bool ALIGNED, int TBN>
__device__ __forceinline__ void mma_load_stage(T* As, T* Bs, const T* a, const T* w, long long m, int n,
                                               long long row0, int n0, int k0) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // A: 128 rows x 4 chunks = 512 chunks
    const int q = tid + i * THREADS, r = q >> 2, c = q & 3;
    const long long row = row0 + r;
    const int k = k0 + c * 8;
    const bool ok = row < m && k < n;
    const T* src = ok ? a + row * n + k : a;
    if (ALIGNED) cp_async16(smem_addr(As + off_k32(r, c)), src, ok ? 16 : 0);
    else load8_scalar(As + off_k32(r, c), src, ok ? min(8, n - k) : 0);
  }
#pragma unroll
  for (int i = 0; i < TBN / 64; ++i) {  // W panel: 4 * TBN chunks
    const int q = tid + i * THREADS;
    if (TRANS) {  // W[n0 + r, k0 + 8c ...]: rows of W are the output columns
      const int r = q >> 2, c = q & 3, col = n0 + r, k = k0 + c * 8;
      const bool ok = col < n && k < n;
      const T* src = ok ? w + (long long)col * n + k : w;
      if (ALIGNED) cp_async16(smem_addr(Bs + off_k32(r, c)), src, ok ? 16 : 0);
      else load8_scalar(Bs + off_k32(r, c), src, ok ? min(8, n - k) : 0);
    } else {      // W[k0 + r, n0 + 8c ...]
      const int r = q / (TBN / 8), c = q % (TBN / 8), k = k0 + r, col = n0 + c * 8;
      const bool ok = k < n && col < n;
      const T* src = ok ? w + (long long)k * n + col : w;
      if (ALIGNED) cp_async16(smem_addr(Bs + off_n<TBN>(r, c)), src, ok ? 16 : 0);
      else load8_scalar(Bs + off_n<TBN>(r, c), src, ok ? min(8, n - col) : 0);
    }
  }
}

constexpr int MMA_TBN = 256;  // sqmm_mma's tile columns

// Tiled tensor-core kernel for float16 / bfloat16 (mma.sync m16n8k16, fragments by ldmatrix, float32
// accumulators), 128 x 256 tiles. Launch: persistent 1-D grid of at most one wave (one block per SM,
// >= tiles_n blocks), 256 threads (8 warps as 2 x 4, each a 64 x 64 piece of the tile), MmaSmem<256>::bytes
// (96 KB) of dynamic shared memory; ctrl zeroed (1 + row blocks entries), or null when tiles_n == 1. Any m
// (64-bit rows), any n with ceil(n / 256) <= grid. Loads::vector: n % 8 == 0 and a, w 16-byte aligned (cp.async path).
template <typename T, W B, Loads L>
__global__ void __launch_bounds__(THREADS, 1)
sqmm_mma(T* a, const T* __restrict__ w, const T* __restrict__ bias, int has_bias, long long m, int n,
         unsigned* ctrl, unsigned tiles_n, unsigned total_tiles) {
  constexpr bool TRANS = B == W::transposed, ALIGNED = L == Loads::vector;
  constexpr int TBN = MMA_TBN;
  constexpr int NT = TBN / 32;  // n8 tiles per warp
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* As = reinterpret_cast<T*>(smem_raw);
  T* Bs = As + MMA_STAGES * BM * MMA_BK;
  __shared__ unsigned ticket;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;
  const int ktiles = (n + MMA_BK - 1) / MMA_BK;
  init_ticket(&ticket);
  for (;;) {  // next_tile() open-coded: through it NVRTC schedules this kernel differently (unmeasured)
    const unsigned t = take_ticket(ctrl, &ticket);
    if (t >= total_tiles) return;
    const unsigned rb = t / tiles_n;
    const long long row0 = (long long)rb * BM;
    const int n0 = (int)(t % tiles_n) * TBN;

    float acc[4][NT][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < MMA_STAGES - 1; ++s) {
      if (s < ktiles)
        mma_load_stage<T, TRANS, ALIGNED, TBN>(As + s * BM * MMA_BK, Bs + s * MMA_BK * TBN, a, w, m, n, row0, n0, s * MMA_BK);
      cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
      cp_async_wait<MMA_STAGES - 2>();
      __syncthreads();  // stage kt landed for everyone; stage kt - 1 is free for the prefetch below
      const int nk = kt + MMA_STAGES - 1;
      if (nk < ktiles) {
        const int s = nk % MMA_STAGES;
        mma_load_stage<T, TRANS, ALIGNED, TBN>(As + s * BM * MMA_BK, Bs + s * MMA_BK * TBN, a, w, m, n, row0, n0, nk * MMA_BK);
      }
      cp_async_commit();
      const T* as = As + (kt % MMA_STAGES) * BM * MMA_BK;
      const T* bs = Bs + (kt % MMA_STAGES) * MMA_BK * TBN;
#pragma unroll
      for (int kk = 0; kk < MMA_BK / 16; ++kk) {
        unsigned af[4][4], bf[NT][2];
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
          ldmatrix_x4(af[mt], smem_addr(as + off_k32(wm * 64 + mt * 16 + (lane & 15), kk * 2 + (lane >> 4))));
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          const int q = lane >> 3;
          unsigned r[4];
          if (TRANS) {
            ldmatrix_x4(r, smem_addr(bs + off_k32(wn * (TBN / 4) + np * 16 + (q >> 1) * 8 + (lane & 7), kk * 2 + (q & 1))));
          } else {
            ldmatrix_x4_trans(r, smem_addr(bs + off_n<TBN>(kk * 16 + (q & 1) * 8 + (lane & 7), (wn * (TBN / 4) + np * 16) / 8 + (q >> 1))));
          }
          bf[np * 2][0] = r[0];
          bf[np * 2][1] = r[1];
          bf[np * 2 + 1][0] = r[2];
          bf[np * 2 + 1][1] = r[3];
        }
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma16816<T>(acc[mt][nt], af[mt], bf[nt]);
      }
    }
    cp_async_wait<0>();
    row_block_barrier(ctrl, rb, tiles_n);  // also: every warp is done with the stages

    typedef typename Pair2<T>::type P2;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = n0 + wn * (TBN / 4) + nt * 8 + (lane & 3) * 2;
      float b0 = 0.0f, b1 = 0.0f;
      if (has_bias) {
        if (col < n) b0 = cast<float>(bias[col]);
        if (col + 1 < n) b1 = cast<float>(bias[col + 1]);
      }
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const long long row = row0 + wm * 64 + mt * 16 + (lane >> 2) + h * 8;
          if (row >= m) continue;
          T* dst = a + row * n + col;
          const float v0 = acc[mt][nt][2 * h] + b0, v1 = acc[mt][nt][2 * h + 1] + b1;
          if (ALIGNED) {
            if (col < n) *reinterpret_cast<P2*>(dst) = Pair2<T>::make(v0, v1);
          } else {
            if (col < n) dst[0] = cast<T>(v0);
            if (col + 1 < n) dst[1] = cast<T>(v1);
          }
        }
    }
  }
}

// ---- FP32 SIMT tile ------------------------------------------------------------------------------

constexpr int F_BK = 8, F_PAD = 4;  // shared tiles are [BK][128 + 4]: the transposing stores spread over banks

// Four consecutive elements of a row (len valid) as a float4: one 16-byte load when ALIGNED.
template <bool ALIGNED> __device__ __forceinline__ float4 load4(const float* p, int len) {
  if (ALIGNED) return len > 0 ? *reinterpret_cast<const float4*>(p) : make_float4(0.f, 0.f, 0.f, 0.f);
  float4 v;
  v.x = len > 0 ? p[0] : 0.f;
  v.y = len > 1 ? p[1] : 0.f;
  v.z = len > 2 ? p[2] : 0.f;
  v.w = len > 3 ? p[3] : 0.f;
  return v;
}

// Register-tiled FP32 kernel (exact FP32 FMA, no TF32). Launch: persistent 1-D grid of at most one wave
// (>= tiles_n blocks), 256 threads as 16 x 16, each computing 8 x 8 outputs of the 128 x 128 tile (two
// 4-row and two 4-column groups 64 apart); 17 KB static shared memory; ctrl zeroed, or null when tiles_n == 1.
// Any m, any n with ceil(n / 128) <= grid. Loads::vector: n % 4 == 0 and a, w 16-byte aligned (float4 loads and stores).
template <W B, Loads L>
__global__ void __launch_bounds__(THREADS, 2)
sqmm_simt(float* a, const float* __restrict__ w, const float* __restrict__ bias, int has_bias, long long m, int n,
          unsigned* ctrl, unsigned tiles_n, unsigned total_tiles) {
  constexpr bool TRANS = B == W::transposed, ALIGNED = L == Loads::vector;
  __shared__ __align__(16) float As[2][F_BK][BM + F_PAD];
  __shared__ __align__(16) float Bs[2][F_BK][BN + F_PAD];
  __shared__ unsigned ticket;
  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  const int ktiles = (n + F_BK - 1) / F_BK;
  // Loader roles: A (and W^T) tiles are 128 rows x 8 k: thread -> row tid / 2, k (tid % 2) * 4.
  // W tiles are 8 k x 128 cols: thread -> k tid / 32, cols (tid % 32) * 4.
  const int lr = tid >> 1, lk = (tid & 1) * 4, wk = tid >> 5, wc = (tid & 31) * 4;
  init_ticket(&ticket);
  for (Tile tile; next_tile(ctrl, &ticket, tiles_n, total_tiles, BN, tile);) {
    const unsigned rb = tile.rb;
    const long long row0 = tile.row0;
    const int n0 = tile.n0;
    const long long arow = row0 + lr;
    const float* pa = a + (arow < m ? arow : 0) * n;
    const int alive = arow < m ? n : 0;  // columns of this loader row that exist
    float4 ra, rw;
    auto fetch = [&](int k0) {
      ra = load4<ALIGNED>(pa + k0 + lk, min(4, alive - (k0 + lk)));
      if (TRANS) {
        const int col = n0 + lr;
        rw = load4<ALIGNED>(w + (long long)(col < n ? col : 0) * n + k0 + lk, col < n ? min(4, n - (k0 + lk)) : 0);
      } else {
        const int k = k0 + wk;
        rw = load4<ALIGNED>(w + (long long)(k < n ? k : 0) * n + n0 + wc, k < n ? min(4, n - (n0 + wc)) : 0);
      }
    };
    auto stash = [&](int s) {
      As[s][lk + 0][lr] = ra.x;
      As[s][lk + 1][lr] = ra.y;
      As[s][lk + 2][lr] = ra.z;
      As[s][lk + 3][lr] = ra.w;
      if (TRANS) {
        Bs[s][lk + 0][lr] = rw.x;
        Bs[s][lk + 1][lr] = rw.y;
        Bs[s][lk + 2][lr] = rw.z;
        Bs[s][lk + 3][lr] = rw.w;
      } else {
        *reinterpret_cast<float4*>(&Bs[s][wk][wc]) = rw;
      }
    };

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    fetch(0);
    stash(0);
    __syncthreads();
    for (int kt = 0; kt < ktiles; ++kt) {
      const int s = kt & 1;
      const bool more = kt + 1 < ktiles;
      if (more) fetch((kt + 1) * F_BK);  // global loads in flight during the FMAs below
#pragma unroll
      for (int k = 0; k < F_BK; ++k) {
        const float4 a0 = *reinterpret_cast<const float4*>(&As[s][k][ty * 4]);
        const float4 a1 = *reinterpret_cast<const float4*>(&As[s][k][64 + ty * 4]);
        const float4 b0 = *reinterpret_cast<const float4*>(&Bs[s][k][tx * 4]);
        const float4 b1 = *reinterpret_cast<const float4*>(&Bs[s][k][64 + tx * 4]);
        const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      if (more) stash(s ^ 1);  // the other buffer was last read before the previous barrier
      __syncthreads();
    }
    row_block_barrier(ctrl, rb, tiles_n);

#pragma unroll
    for (int jh = 0; jh < 2; ++jh) {
      const int col = n0 + jh * 64 + tx * 4;
      float bv[4] = {0.f, 0.f, 0.f, 0.f};
      if (has_bias) {
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = col + j < n ? bias[col + j] : 0.f;
      }
#pragma unroll
      for (int ih = 0; ih < 2; ++ih)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const long long row = row0 + ih * 64 + ty * 4 + i;
          if (row >= m) continue;
          float* dst = a + row * n + col;
          const float* v = acc[ih * 4 + i] + jh * 4;
          if (ALIGNED) {
            if (col < n) *reinterpret_cast<float4*>(dst) = make_float4(v[0] + bv[0], v[1] + bv[1], v[2] + bv[2], v[3] + bv[3]);
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
              if (col + j < n) dst[j] = v[j] + bv[j];
          }
        }
    }
  }
}

}  // namespace sqmm

using sqmm::sqmm_mma;
using sqmm::sqmm_simt;

// ---- ladder: the original article's kernel -------------------------------------------------------

// The original article's kernel (make-torch-inplace), kept as the bottom rung: one warp per row, each
// lane computes up to 64 output columns straight from global memory (no tiling, no reuse of W between
// rows), keeps them in a 64-entry register buffer and writes them after the whole row has been read.
// Launch: 1-D grid of ceil(m / 4) blocks of 128 threads (4 rows per block). n <= 2048 (the host refuses
// more: the buffer would overflow, which the article's kernel did silently). No bias.
template <typename T, sqmm::W B>
__global__ void sqmm_warp_per_row(T* a, const T* __restrict__ w, long long m, int n) {
  constexpr bool TRANS = B == sqmm::W::transposed;
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);
  const int per = (n + 31) / 32;
  const int last = n / per;
  int mine = per;
  if (lane == last) mine = n - per * last;
  else if (lane > last) mine = 0;
  T* x = a + row * n;
  float buf[64];
  if (row < m) {
    for (int i = 0; i < mine; ++i) {
      const int col = lane * per + i;
      float s = 0.0f;
      for (int j = 0; j < n; ++j) s += cast<float>(x[j]) * cast<float>(TRANS ? w[(long long)col * n + j] : w[(long long)j * n + col]);
      buf[i] = s;
    }
  }
  __syncthreads();
  if (row < m)
    for (int i = 0; i < mine; ++i) x[lane * per + i] = cast<T>(buf[i]);
}
