// In-place square matmul on Hopper's warpgroup tensor cores (wgmma, sm_90a only): the same schedule as
// square_matmul.cu (persistent tiles in row-block order; every tile of a 128-row block waits until all
// column tiles of the block have read A, then overwrites its rows), with the tile product on wgmma.
// Compiled with -arch=sm_90a (the host loads this file only on compute capability 9.0 devices); on any
// other target the kernel bodies are empty. Name expressions: sqmm_tma<half, sqmm::W::plain, sqmm::Ctas::pair>,
// sqmm_wgmma<bfloat16, sqmm::W::transposed>.
#include "square_matmul.cu"
#include "common/cluster.cuh"

namespace sqmm {
// CTAs a cluster of sqmm_tma: one, or a pair on neighbouring row blocks sharing each W tile by TMA multicast.
enum class Ctas { one = 1, pair = 2 };
}  // namespace sqmm

namespace sqmm90 {
using namespace sqmm;

constexpr int BK = 64, STAGES = 4, TBN = 256;
constexpr int A_STAGE = BM * BK, B_STAGE = BK * TBN;     // elements per stage: 16 KB + 32 KB
constexpr int SMEM = STAGES * (A_STAGE + B_STAGE) * 2 + 1024;  // + slack for 1024-byte alignment

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading / stride byte offsets.
__device__ __forceinline__ unsigned long long desc128(unsigned saddr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((saddr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (1ULL << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// "+f" operand lists of wgmma accumulators: d[i .. i + 63].
#define SQMM_ACC8(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), \
                     "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define SQMM_ACC64(i) SQMM_ACC8(i), SQMM_ACC8((i) + 8), SQMM_ACC8((i) + 16), SQMM_ACC8((i) + 24), \
                      SQMM_ACC8((i) + 32), SQMM_ACC8((i) + 40), SQMM_ACC8((i) + 48), SQMM_ACC8((i) + 56)

// One m64n128k16 wgmma with A and B of PTX type AB ("f16" / "bf16"), float accumulators d[0..63].
#define SQMM_WGMMA128(AB) \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." AB "." AB " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
        "%64, %65, p, 1, 1, 0, %66;\n}\n" \
        : SQMM_ACC64(0) \
        : "l"(da), "l"(db), "n"(TB))

// D(64 x 128, float) += A(64 x 16, K-major descriptor) * B(16 x 128, descriptor; TB = 1: N-major).
template <typename T, int TB> __device__ __forceinline__ void wgmma128(float* d, unsigned long long da,
                                                                       unsigned long long db) {
  if constexpr (Same<T, half>::value)
    SQMM_WGMMA128("f16");
  else
    SQMM_WGMMA128("bf16");
}

// One m64n256k16 wgmma, float accumulators d[0..127]; scale_d = 0 overwrites d (the first k step).
#define SQMM_WGMMA256(AB) \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." AB "." AB " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, " \
        "%128, %129, p, 1, 1, 0, %131;\n}\n" \
        : SQMM_ACC64(0), SQMM_ACC64(64) \
        : "l"(da), "l"(db), "r"(scale_d), "n"(TB))

template <typename T, int TB> __device__ __forceinline__ void wgmma256(float* d, unsigned long long da,
                                                                       unsigned long long db, int scale_d) {
  if constexpr (Same<T, half>::value)
    SQMM_WGMMA256("f16");
  else
    SQMM_WGMMA256("bf16");
}
#endif

// One m64nN accumulator fragment (N = 8 * NJ; + bias) into A: d[4j .. 4j+1] at (row, col + 8j),
// d[4j+2 ..] at row + 8.
template <int NJ, typename T>
__device__ __forceinline__ void store_fragment(const float (&d)[4 * NJ], T* a, const T* bias, int has_bias,
                                               long long m, int n, long long row, int col) {
  typedef typename Pair2<T>::type P2;
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    const int c = col + j * 8;
    if (c >= n) continue;
    const float b0 = has_bias ? cast<float>(bias[c]) : 0.0f, b1 = has_bias ? cast<float>(bias[c + 1]) : 0.0f;
    if (row < m) *reinterpret_cast<P2*>(a + row * n + c) = Pair2<T>::make(d[4 * j] + b0, d[4 * j + 1] + b1);
    if (row + 8 < m) *reinterpret_cast<P2*>(a + (row + 8) * n + c) = Pair2<T>::make(d[4 * j + 2] + b0, d[4 * j + 3] + b1);
  }
}

// Tensor-core (wgmma) kernel for float16 / bfloat16, Hopper only (rows too many for TMA's 32-bit
// coordinates). Launch: persistent 1-D grid of at most one wave (one block per SM, >= tiles_n blocks), 256
// threads = 2 warpgroups, each computing 64 rows x 256 columns of the 128 x 256 tile as two m64n128k16
// products per 16-wide k step; SMEM bytes of dynamic shared memory (4 stages of 128 x 64 A and 64 x 256 W
// tiles, 128-byte swizzled, filled by cp.async two stages ahead); ctrl zeroed, or null when tiles_n == 1;
// mn_swap 0. n % 8 == 0 and a, w 16-byte aligned (the host checks); any m, any such n with ceil(n / 256) <= grid.
template <typename T, W B>
__global__ void __launch_bounds__(THREADS, 1)
sqmm_wgmma(T* a, const T* __restrict__ w, const T* __restrict__ bias, int has_bias, long long m, int n,
           unsigned* ctrl, unsigned tiles_n, unsigned total_tiles, int mn_swap) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool TRANS = B == W::transposed;
  // N-major W tiles: atoms 8 KB apart along n, 8-row k groups 1 KB apart: leading byte offset = the
  // stride along n, stride byte offset = the stride along k, as CUTLASS's canonical layouts say. The H200
  // confirmed it (mn_swap = 0, what the host passes); mn_swap = 1 exchanges the two fields and is wrong.
  const unsigned mn_lbo = mn_swap ? 1024 : 8192, mn_sbo = mn_swap ? 8192 : 1024;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const unsigned raw = smem_addr(smem_raw);
  unsigned char* base = smem_raw + (((raw + 1023) & ~1023u) - raw);
  T* As = reinterpret_cast<T*>(base);             // STAGES x [128 rows][64 k], row = 128 bytes
  T* Bs = As + STAGES * A_STAGE;                  // STAGES x W tile (layout below)
  __shared__ unsigned ticket;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wgp = warp >> 2, wq = warp & 3;
  const int ktiles = (n + BK - 1) / BK;
  // Byte offset of 16-byte chunk c of row r in a [rows][64] tile: chunk XOR (row % 8) (the hardware's
  // 128-byte swizzle on 1024-byte aligned tiles).
  auto kmaj = [](int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); };
  auto load = [&](int s, int k0, long long row0, int n0) {
    unsigned char* as = reinterpret_cast<unsigned char*>(As + s * A_STAGE);
    unsigned char* bs = reinterpret_cast<unsigned char*>(Bs + s * B_STAGE);
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // A: 128 rows x 8 chunks
      const int q = tid + i * THREADS, r = q >> 3, c = q & 7;
      const long long row = row0 + r;
      const int k = k0 + c * 8;
      const bool ok = row < m && k < n;
      cp_async16(smem_addr(as + kmaj(r, c)), ok ? a + row * n + k : a, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // W: 2048 chunks
      const int q = tid + i * THREADS;
      if (TRANS) {  // K-major [256 n][64 k]: W[n0 + r, k0 + 8c ...]
        const int r = q >> 3, c = q & 7, col = n0 + r, k = k0 + c * 8;
        const bool ok = col < n && k < n;
        cp_async16(smem_addr(bs + kmaj(r, c)), ok ? w + (long long)col * n + k : w, ok ? 16 : 0);
      } else {      // N-major: four 64-column atoms of [64 k][64 n] (8 KB each): W[k0 + r, n0 + 8c ...]
        const int r = q >> 5, c = q & 31, k = k0 + r, col = n0 + c * 8;
        const bool ok = k < n && col < n;
        cp_async16(smem_addr(bs + (c >> 3) * 8192 + kmaj(r, c & 7)), ok ? w + (long long)k * n + col : w, ok ? 16 : 0);
      }
    }
  };
  init_ticket(&ticket);
  for (Tile tile; next_tile(ctrl, &ticket, tiles_n, total_tiles, TBN, tile);) {
    const unsigned rb = tile.rb;
    const long long row0 = tile.row0;
    const int n0 = tile.n0;
    float acc0[64], acc1[64];  // columns n0 + [0, 128) and n0 + [128, 256) of this warpgroup's 64 rows
#pragma unroll
    for (int e = 0; e < 64; ++e) acc0[e] = acc1[e] = 0.0f;
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
      if (s < ktiles) load(s, s * BK, row0, n0);
      cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
      cp_async_wait<STAGES - 3>();
      fence_proxy_async_shared();  // this thread's cp.async data, visible to the tensor cores' async proxy
      __syncthreads();       // ... everyone's; and every warp's wgmma of tile kt - 2 has completed
      const int nk = kt + STAGES - 2;
      if (nk < ktiles) load(nk % STAGES, nk * BK, row0, n0);
      cp_async_commit();
      const int s = kt % STAGES;
      const unsigned as = smem_addr(As + s * A_STAGE) + wgp * 64 * 128;
      const unsigned bs = smem_addr(Bs + s * B_STAGE);
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        const unsigned long long da = desc128(as + kk * 32, 16, 1024);
        if (TRANS) {  // W^T half h: rows h * 128 ... of the [256][64] tile
          wgmma128<T, 0>(acc0, da, desc128(bs + kk * 32, 16, 1024));
          wgmma128<T, 0>(acc1, da, desc128(bs + 128 * 128 + kk * 32, 16, 1024));
        } else {      // W half h: atoms 2h, 2h + 1 (LBO: atom stride; SBO: 8-row k group stride)
          wgmma128<T, 1>(acc0, da, desc128(bs + kk * 2048, mn_lbo, mn_sbo));
          wgmma128<T, 1>(acc1, da, desc128(bs + 2 * 8192 + kk * 2048, mn_lbo, mn_sbo));
        }
      }
      wg_commit();
      wg_wait<1>();  // tile kt - 1 done: its stage may be refilled after the next barrier
    }
    wg_wait<0>();
    row_block_barrier(ctrl, rb, tiles_n);

    const long long row = row0 + wgp * 64 + wq * 16 + (lane >> 2);
    store_fragment<16>(acc0, a, bias, has_bias, m, n, row, n0 + (lane & 3) * 2);
    store_fragment<16>(acc1, a, bias, has_bias, m, n, row, n0 + 128 + (lane & 3) * 2);
  }
#endif
}


// ---- TMA + warp-specialised wgmma (the Hopper default) -------------------------------------------

// A CUtensorMap (TMA descriptor, built by the host with cuTensorMapEncodeTiled), passed by value.
struct alignas(64) TmaMap { unsigned long long words[16]; };

constexpr int TMA_THREADS = 384;                   // warpgroup 0: producer + store warp; 1 and 2: consumers
constexpr int C_TILE = BM * TBN * 2;               // a 128 x 256 half tile staged for the TMA store
// Pipeline depth and dynamic shared memory of sqmm_tma: the staged output tile (64 KB) costs one of four
// 48 KB stages.
constexpr int TMA_STAGES = 3;
constexpr int TMA_SMEM = TMA_STAGES * (A_STAGE + B_STAGE) * 2 + C_TILE + 1024;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Box (c0 = column, c1 = row) of a 2-D tensor into shared memory; completes as bytes on `bar`.
__device__ __forceinline__ void tma_load(unsigned dst, const TmaMap& map, int c0, int c1, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
// The same box into the shared memory of every CTA of the cluster named in `mask` (same offsets), each
// copy completing as bytes on that CTA's barrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_multicast(unsigned dst, const TmaMap& map, int c0, int c1, unsigned bar,
                                                   unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;\n"
      ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}
// Arrive on the barrier at `bar`'s offset in the shared memory of cluster CTA `cta` (this one included).
__device__ __forceinline__ void mbar_arrive_cta(unsigned bar, unsigned cta) {
  asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n"
               ::"r"(bar), "r"(cta) : "memory");
}
// A stage's empty barrier at `bar` (this CTA's offset): CL > 1 arrives on it in every CTA of the cluster (this
// CTA's consumers are done with their copy of the stage, which the peers' multicasts also fill).
template <int CL> __device__ __forceinline__ void release(unsigned bar) {
  if constexpr (CL > 1) {
#pragma unroll
    for (int c = 0; c < CL; ++c) mbar_arrive_cta(bar, c);
  } else {
    mbar_arrive(bar);
  }
}
// The tile ring (sqmm_tma's tile ids, written by cluster rank 0): CL > 1 reads ids that rank 0 stored into
// this CTA remotely, and rank 0 rewrites a slot after remote readers released it, so the waits acquire and
// the arrivals release at cluster scope; CL = 1 stays within the CTA.
template <int CL> __device__ __forceinline__ bool ring_test(unsigned bar, unsigned parity) {
  unsigned done;
  if constexpr (CL > 1)
    asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  else
    asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done;
}
template <int CL> __device__ __forceinline__ void ring_wait(unsigned bar, unsigned parity) {
  if constexpr (CL > 1) {
    unsigned done;
    do {
      asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                   "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
  } else {
    mbar_wait(bar, parity);
  }
}
// Arrive on the barrier at `bar`'s offset in cluster CTA `cta` (CL = 1: this CTA's). FENCED: the caller has
// just fenced at cluster scope or wider, so the arrival itself may be relaxed (each release arrival costs a
// MEMBAR of its own).
template <int CL, bool FENCED = false> __device__ __forceinline__ void ring_arrive(unsigned bar, unsigned cta) {
  if constexpr (CL > 1 && FENCED)
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(cta) : "memory");
  else if constexpr (CL > 1)
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(cta) : "memory");
  else
    mbar_arrive(bar);
}
// `v` into the word at `p`'s offset in the shared memory of cluster CTA `cta` (this one included).
__device__ __forceinline__ void st_shared_cta(unsigned p, unsigned cta, unsigned v) {
  asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nst.shared::cluster.u32 [ra], %2;\n}\n"
               ::"r"(p), "r"(cta), "r"(v) : "memory");
}
// A tile id of the ring, read after its full barrier's wait (volatile: written by another thread or CTA).
__device__ __forceinline__ unsigned ring_id(const unsigned* p) { return *reinterpret_cast<const volatile unsigned*>(p); }
// Until row block `arrivals` has `expected` announcements (every read of A done), then its rows may be written.
__device__ __forceinline__ void row_block_wait(const unsigned* arrivals, unsigned expected) {
  while (*reinterpret_cast<const volatile unsigned*>(arrivals) < expected) __nanosleep(64);
  __threadfence();
}
// Box from shared memory to (c0, c1) of the tensor; parts outside it are not written.
__device__ __forceinline__ void tma_store(const TmaMap& map, int c0, int c1, unsigned src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
               ::"l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(src) : "memory");
}
__device__ __forceinline__ void warpgroup_sync(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory"); }

// One m64n256 accumulator fragment (+ bias) as T pairs into the staged output tile: four [128 rows][64]
// boxes, 128-byte swizzled like the loads (conflict-free: the 8 rows of a warp's store hit 8 chunks).
template <typename T>
__device__ __forceinline__ void stage_fragment(const float (&d)[128], unsigned cs, const T* bias, int has_bias,
                                               int n, int r, int col) {
  typedef typename Pair2<T>::type P2;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int c = col + j * 8;
    const float b0 = has_bias && c < n ? cast<float>(bias[c]) : 0.0f;
    const float b1 = has_bias && c < n ? cast<float>(bias[c + 1]) : 0.0f;
    const unsigned box = cs + (j >> 3) * (BM * 128) + (col & 7) * 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rr = r + 8 * h;
      const P2 v = Pair2<T>::make(d[4 * j + 2 * h] + b0, d[4 * j + 2 * h + 1] + b1);
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(box + rr * 128 + (((j & 7) ^ (rr & 7)) << 4)),
                   "r"(*reinterpret_cast<const unsigned*>(&v)) : "memory");
    }
  }
}
#endif

// Warp-specialised wgmma kernel for float16 / bfloat16, Hopper only. Launch: 1-D grid of
// CL x min(resident clusters, tiles) blocks (>= tiles_n clusters, the host checks), clusters of CL = (int)C
// blocks along x (Ctas::pair: the launch's cluster attribute), 384 threads, TMA_SMEM bytes of dynamic
// shared memory; ctrl zeroed, 1 + CL * ceil(row blocks / CL) counters. A tile is CL row blocks x 256 columns
// (CTA rank r of the cluster takes row block CL * (t / tiles_n) + r), taken in order from the ticket counter
// ctrl[0] by rank 0's producer and handed to the cluster's threads through a ring of two tile ids. A slot is
// refilled only after its tile has been stored, so a cluster holds at most two tickets, and one whose store
// waits has announced the reads of both (the announcer never waits for the store warp, and a tile's
// consumers finish its k loop before waiting to stage it). Hence no deadlock while at least
// ceil(tiles_n / 2) clusters are resident (the host asks for tiles_n): were all of them waiting, each would
// hold two tickets of the lowest unfinished row block (tickets go in order), together >= tiles_n: all its
// tiles, all announced. One thread of warpgroup 0 loads TMA_STAGES stages ahead with TMA (A [128][64] and
// W as [256 n][64 k] or four [64 k][64 n] atoms, 128-byte swizzle, out-of-range zeros); warpgroups 1 and 2
// each multiply 64 rows x 256 columns (m64n256k16), release each stage through an mbarrier, mark the tile's
// reads done on a CTA-local mbarrier, write the tile (+ bias) into shared memory and go on to the next
// tile; one idle thread of warpgroup 0 (the announcer, warp 2) then announces the row block's reads in
// global memory (one arrival a CTA tile: tiles_n a row block), off the consumers' path between tiles; one
// thread of warp 1 (the store warp) waits for the row block and writes the tile to A with TMA stores, so
// neither the wait nor the stores stall the tensor cores.
//  - Ctas::pair: the two CTAs of a cluster share the W tile of every k step: each loads its
//    half with a TMA multicast into both CTAs' shared memory (half the L2 -> SM bytes of W). A stage is
//    refilled only when the consumers of both CTAs have released it (empty barriers count 2 x 2 arrivals,
//    local and remote), and a CTA's producer leaves only after the last releases reached it. Rank 0 writes
//    each tile id into both CTAs' rings; its slots are released by the readers of both CTAs.
// map_a: A (m rows x n), box 64 x 128; map_w: W, box 64 x (256 / CL) (TRANS) or 64 x 64. n % 8 == 0,
// m + 128 * CL < 2^31.
template <typename T, W B, Ctas C>
__global__ void __launch_bounds__(TMA_THREADS, 1)
sqmm_tma(const __grid_constant__ TmaMap map_a, const __grid_constant__ TmaMap map_w, T* a,
         const T* __restrict__ bias, int has_bias, long long m, int n, unsigned* ctrl, unsigned tiles_n,
         unsigned total_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool TRANS = B == W::transposed;
  constexpr int CL = (int)C;
  constexpr int S = TMA_STAGES;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ __align__(8) unsigned long long full_bar[S], empty_bar[S], c_full, c_empty, tile_full[2], tile_empty[2],
      reads_done[2];
  __shared__ unsigned tile_id[2];  // the tile ring: the ids of this CTA's next tiles; total_tiles or more ends it
  const unsigned raw = smem_addr(smem_raw);
  const unsigned As = (raw + 1023) & ~1023u;            // S x [128 rows][64 k]
  const unsigned Bs = As + S * A_STAGE * 2;             // S x W tile
  const unsigned Cs = Bs + S * B_STAGE * 2;             // the staged output tile, 4 x [128][64]
  const int tid = threadIdx.x, wg = tid >> 7;
  const int ktiles = (n + BK - 1) / BK;
  const unsigned rank = CL > 1 ? cluster_rank() : 0;
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(smem_addr(&full_bar[s]), 1);        // the producer's expect_tx; the bytes complete it
      mbar_init(smem_addr(&empty_bar[s]), 2 * CL);  // one arrival per consumer warpgroup of the cluster
    }
    mbar_init(smem_addr(&c_full), 2);           // both consumer warpgroups staged their halves
    mbar_init(smem_addr(&c_empty), 1);          // the store warp's TMA stores have read the tile
    for (int j = 0; j < 2; ++j) {
      mbar_init(smem_addr(&tile_full[j]), 1);   // rank 0's producer wrote the id
      // (rank 0's) every reader of the cluster is done with the slot: the store warp has stored the tile (its
      // consumers read the id before staging it: c_full), the announcer has announced it; CL > 1: the same in
      // rank 1, whose producer reads the id too
      mbar_init(smem_addr(&tile_empty[j]), CL > 1 ? 5 : 2);
      mbar_init(smem_addr(&reads_done[j]), 2);  // both consumer warpgroups finished the slot's tile's k loop
    }
    mbar_init_fence();
  }
  if constexpr (CL > 1)
    cluster_sync_all();  // the peer's barriers exist before anything multicasts or arrives there
  else
    __syncthreads();

  // Tile i of this CTA sits in ring slot i % 2, filled in phase i / 2 of that slot's barriers.
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (tid == 0) {  // producer
      // it: k steps issued so far, over all tiles (stage it % S, pass it / S); i: tiles. Rank 0 also: `taken`
      // tickets taken so far, the last one `next`, `held` while it is not yet in the ring.
      unsigned it = 0, i = 0, taken = 0, next = 0;
      bool held = false;
      auto publish = [&](unsigned slot) {  // rank 0: ticket `next` into ring slot `slot` of every CTA
        if constexpr (CL > 1) {
#pragma unroll
          for (int c = 0; c < CL; ++c) st_shared_cta(smem_addr(&tile_id[slot]), c, next);
          asm volatile("fence.acq_rel.cluster;\n" ::: "memory");  // both ids before either arrival
#pragma unroll
          for (int c = 0; c < CL; ++c) ring_arrive<CL, true>(smem_addr(&tile_full[slot]), c);
        } else {
          tile_id[slot] = next;
          mbar_arrive(smem_addr(&tile_full[slot]));
        }
        held = false;
      };
      for (;; ++i) {
        const unsigned slot = i & 1;
        unsigned t;
        if (rank == 0) {
          if (taken == i) {  // not taken during the previous tile: once the slot's last tile has been stored
            ring_wait<CL>(smem_addr(&tile_empty[slot]), ((i >> 1) & 1) ^ 1);
            next = atomicAdd(ctrl, 1u);
            ++taken;
            publish(slot);
          }
          t = next;
        } else {
          ring_wait<CL>(smem_addr(&tile_full[slot]), (i >> 1) & 1);
          t = ring_id(&tile_id[slot]);
        }
        if (t >= total_tiles) break;
        if (rank != 0) ring_arrive<CL>(smem_addr(&tile_empty[slot]), 0);
        const int row0 = (int)((t / tiles_n) * CL + rank) * BM, n0 = (int)(t % tiles_n) * TBN;
        for (int kt = 0; kt < ktiles; ++kt, ++it) {
          const unsigned s = it % S, full = smem_addr(&full_bar[s]);
          mbar_wait(smem_addr(&empty_bar[s]), ((it / S) & 1) ^ 1);
          mbar_expect_tx(full, (A_STAGE + B_STAGE) * 2);  // CL > 1: half of W comes from the peer
          tma_load(As + s * A_STAGE * 2, map_a, kt * BK, row0, full);
          const unsigned bs = Bs + s * B_STAGE * 2;
          if (CL > 1) {
            if (TRANS) {  // rows n0 + 128 r ... of the [256 n][64 k] tile
              tma_load_multicast(bs + rank * (TBN / 2) * 128, map_w, kt * BK, n0 + (TBN / 2) * rank, full, 3);
            } else {      // atoms 2r, 2r + 1
#pragma unroll
              for (int j = 0; j < 2; ++j) {
                const int q = 2 * rank + j;
                tma_load_multicast(bs + q * 8192, map_w, n0 + 64 * q, kt * BK, full, 3);
              }
            }
          } else if (TRANS) {
            tma_load(bs, map_w, kt * BK, n0, full);
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) tma_load(bs + j * 8192, map_w, n0 + 64 * j, kt * BK, full);
          }
          if (rank == 0) {  // the next tile's ticket as soon as its slot is free (tile i - 1 stored), put in
            if (held) {     // the ring a step later: the atomic's latency overlaps that step's stage wait
              publish(slot ^ 1);
            } else if (taken == i + 1 && ring_test<CL>(smem_addr(&tile_empty[slot ^ 1]), (((i + 1) >> 1) & 1) ^ 1)) {
              next = atomicAdd(ctrl, 1u);
              ++taken;
              held = true;
            }
          }
        }
        if (held) publish(slot ^ 1);
      }
      if (CL > 1) {
        // No CTA leaves while its peer may still arrive on or write into its shared memory. Rank 1's last
        // accesses to rank 0 are its producer's, store warp's and announcer's releases of the last tile's slot
        // (the end id's slot was released before rank 0 wrote it) and its consumers' stage releases: rank 0
        // waits for both below (the slot's phase completes only with all five arrivals). Rank 0's last
        // access to rank 1 is the end id and its arrival, which every thread of rank 1 waits for before
        // leaving; its consumers' stage releases there, rank 1 waits for below like rank 0.
        if (rank == 0) ring_wait<CL>(smem_addr(&tile_empty[(i + 1) & 1]), (((i + 1) >> 1) & 1) ^ 1);
        for (int s = 0; s < S; ++s, ++it) mbar_wait(smem_addr(&empty_bar[it % S]), ((it / S) & 1) ^ 1);
      }
    } else if (tid == 32) {  // store warp
      for (unsigned i = 0;; ++i) {
        const unsigned slot = i & 1;
        ring_wait<CL>(smem_addr(&tile_full[slot]), (i >> 1) & 1);
        const unsigned t = ring_id(&tile_id[slot]);
        if (t >= total_tiles) break;
        mbar_wait(smem_addr(&c_full), i & 1);
        const unsigned rb = (t / tiles_n) * CL + rank;
        row_block_wait(ctrl + 1 + rb, tiles_n);  // every column tile's announcer
        const int row0 = (int)rb * BM, n0 = (int)(t % tiles_n) * TBN;
#pragma unroll
        for (int j = 0; j < 4; ++j) tma_store(map_a, n0 + 64 * j, row0, Cs + j * (BM * 128));
        asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
        mbar_arrive(smem_addr(&c_empty));
        // Only now: the cluster's next ticket waits for this store, so a cluster holds at most two tiles.
        ring_arrive<CL>(smem_addr(&tile_empty[slot]), 0);
      }
      asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");  // the writes done before the block exits
    } else if (tid == 64) {  // announcer
      // reads_done[slot] per slot, waited with the slot's phase: the consumers reach tile i + 2 (same slot) only
      // after its tile_full, which needs tile i's tile_empty, which needs this thread's arrival for tile i; so
      // they never complete two phases of one barrier before this thread has waited for the first.
      for (unsigned i = 0;; ++i) {
        const unsigned slot = i & 1;
        ring_wait<CL>(smem_addr(&tile_full[slot]), (i >> 1) & 1);
        const unsigned t = ring_id(&tile_id[slot]);
        if (t >= total_tiles) break;
        mbar_wait(smem_addr(&reads_done[slot]), (i >> 1) & 1);
        // Every read of A for this tile is done (its TMA loads completed on full_bar before the consumers'
        // wgmma read them, and they arrived after wg_wait<0>): announce it to the stores of other CTAs.
        __threadfence();
        atomicAdd(ctrl + 1 + (t / tiles_n) * CL + rank, 1u);
        ring_arrive<CL, true>(smem_addr(&tile_empty[slot]), 0);  // the fence above releases the id's read
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int cw = wg - 1, lane = tid & 31, wq = (tid >> 5) & 3;
  const bool signals = (tid & 127) == 0;  // one thread per warpgroup releases stages and marks reads done
  unsigned it = 0;
  for (unsigned i = 0;; ++i) {
    const unsigned slot = i & 1;
    ring_wait<CL>(smem_addr(&tile_full[slot]), (i >> 1) & 1);
    const unsigned t = ring_id(&tile_id[slot]);
    if (t >= total_tiles) break;
    const int n0 = (int)(t % tiles_n) * TBN;
    float acc[128];
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const unsigned s = it % S;
      mbar_wait(smem_addr(&full_bar[s]), (it / S) & 1);
      const unsigned as = As + s * A_STAGE * 2 + cw * 64 * 128, bs = Bs + s * B_STAGE * 2;
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        const unsigned long long da = desc128(as + kk * 32, 16, 1024);
        // W^T: K-major [256][64] like A; W: N-major atoms 8 KB apart (LBO), 8-row k groups 1 KB (SBO)
        const unsigned long long db = TRANS ? desc128(bs + kk * 32, 16, 1024) : desc128(bs + kk * 2048, 8192, 1024);
        wgmma256<T, TRANS ? 0 : 1>(acc, da, db, kt > 0 || kk > 0);
      }
      wg_commit();
      wg_wait<1>();  // step kt - 1 has finished reading its stage
      if (kt > 0 && signals) release<CL>(smem_addr(&empty_bar[(it - 1) % S]));
    }
    wg_wait<0>();
    if (signals) {
      release<CL>(smem_addr(&empty_bar[(it - 1) % S]));
      // Every read of A for this tile is done: the announcer publishes it, so a cluster whose store waits
      // has announced both tiles. No ring arrival here: every thread's read of the id precedes the store
      // warp's arrival on tile_empty (warpgroup_sync, c_full below).
      mbar_arrive(smem_addr(&reads_done[slot]));
    }
    const int r = cw * 64 + wq * 16 + (lane >> 2), col = (lane & 3) * 2;
    mbar_wait(smem_addr(&c_empty), (i & 1) ^ 1);  // the previous tile has left shared memory
    stage_fragment(acc, Cs, bias + n0, has_bias, n - n0, r, col);
    fence_proxy_async_shared();                          // the TMA store reads what these stores wrote
    warpgroup_sync(cw + 1);
    if (signals) mbar_arrive(smem_addr(&c_full));
  }
#endif
}

}  // namespace sqmm90

using sqmm90::sqmm_wgmma;
using sqmm90::sqmm_tma;
