// Layer norm and RMS norm backward with the dweight / dbias column sums in shared memory rather than registers: a
// row over one CTA or an sm_90 thread-block cluster (norm_bwd_shared), or streamed through a ring of shared-memory
// stages across a cluster (norm_bwd_ring). Each CTA or cluster writes one partial row of column sums; column_sum
// (norm_bwd.cu) adds them. Arithmetic and the op's arguments as norm_bwd (common/norm.cuh). Cluster instances
// (CL > 1) and the ring need compute capability 9.0 (on older targets their cluster instructions trap; the host never
// launches them there).
#include "common/rows.cuh"
#include "common/cluster.cuh"
#include "common/norm.cuh"

// A thread's Q float4 accumulator slots (slot h at acc[s0 + h * blockDim.x]) to and from 4 * Q registers.
template <int Q>
__device__ __forceinline__ void load_sums(float (&a)[4 * Q], const float4* acc, int s0) {
#pragma unroll
  for (int h = 0; h < Q; ++h) {
    const float4 v = acc[s0 + h * blockDim.x];
    a[4 * h] = v.x;
    a[4 * h + 1] = v.y;
    a[4 * h + 2] = v.z;
    a[4 * h + 3] = v.w;
  }
}
template <int Q>
__device__ __forceinline__ void store_sums(float4* acc, int s0, const float (&a)[4 * Q]) {
#pragma unroll
  for (int h = 0; h < Q; ++h) acc[s0 + h * blockDim.x] = make_float4(a[4 * h], a[4 * h + 1], a[4 * h + 2], a[4 * h + 3]);
}

// The backward of aligned float / half rows from 257 / 512 elements (host: norm.shared_plan): a row over a cluster
// of CL CTAs (CL = 1: one block; CL = 2, 4 or 8: sm_90 clusters, the row's sums exchanged through distributed
// shared memory instead of global memory), 2 packs of x and dy per thread, and the dweight / dbias column sums
// in shared memory instead of registers (half types: twice norm_bwd's one-pack elements a thread, no spills).
// Per row: one barrier (the cluster's when CL > 1) between the warps' partial sums and their total, which
// every warp adds up itself in CTA-rank order (the same total in every CTA: deterministic).
// Launch: grid = CL * row groups (resident), clusters of CL along x, blockDim.x <= 1024 threads (a multiple of
// 32); CTA rank r of cluster c takes columns [r * chunk, min(n, (r + 1) * chunk)) of rows c, c + groups, ...,
// packs <= 2 per thread (chunk <= 2 * V * blockDim.x; WARPS: 4, n <= 128 * V), aligned rows. Dynamic shared
// memory, in 16-byte slots: Q = V / 4 per pack per thread of dweight sums (float4 [Q * p + h][thread]:
// conflict-free), as many of dbias sums (layer), then the weight's packs and the next row's src and dy staged
// (packs * blockDim.x each).
// Cluster c writes partial row c (column_sum adds them). FORM (common/norm.cuh):
//   STAGED: the next row's src and dy staged in shared memory while this row is processed.
//   FULL_PACKS: every CTA's segment is 2 packs a thread (chunk = 2 * V * blockDim.x = n / CL): no pack count or
//     bounds test at run time.
//   WARP_ROWS (CL = 1, blockDim.x <= 512): each warp its own rows (warp w of CTA c: rows c * warps + w, stepping by
//     gridDim.x * warps), up to 4 packs a lane (n <= 128 * V), its sums by shuffles alone (no barrier a row); the
//     warps' column sums folded in warp order at the end, so a CTA of 8 warps writes one partial row, not 8
//     (32768x1024 f16 in 256-thread CTAs: 264 partial rows instead of 2112 from 64-thread one-row CTAs).
template <typename T, int MODE, int SRC, int CL, unsigned FORM>
__global__ void __launch_bounds__(FORM & WARP_ROWS ? 512 : 1024, 1)
norm_bwd_shared(const T* __restrict__ src, const T* __restrict__ dy, T* dx,
                const T* __restrict__ w, const T* __restrict__ b,
                const float* __restrict__ mean_in,
                const float* __restrict__ rstd_in,
                float* __restrict__ dw_part, float* __restrict__ db_part,
                long long rows, long long n, float inv_n, long long chunk,
                int packs_in, NormMode mode, NormSource source) {
  constexpr bool STAGE = FORM & STAGED, FULL = FORM & FULL_PACKS, WARPS = FORM & WARP_ROWS;
  launch_dependents();  // column_sum's blocks may start (they wait for this grid's end)
  static_assert(sizeof(T) <= 4, "float accumulators");
  typedef float A;
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N, MAXP = WARPS ? 4 : 2, Q = V / 4;  // Q float4 accumulator slots a pack
  const NormOp<MODE, SRC> op(mode, source);
  // dbias sums (their slots too: the host sizes the shared memory by the mode) and the saved mean: layer rows
  constexpr bool DBS = MODE != RMS;
  const bool dbs = DBS && op.layer, uses_mean = op.layer && !op.from_y;
  static_assert(!WARPS || CL == 1, "warp rows: one CTA a row group");
  __shared__ A sums[2][2][32];  // the warps' (c1, c2) of the row, two sets alternating by row
  extern __shared__ int4 dyn_smem[];
  const unsigned rank = CL > 1 ? cluster_rank() : 0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const long long groups = WARPS ? (long long)gridDim.x * warps : gridDim.x / CL;
  const long long group = WARPS ? (long long)blockIdx.x * warps + warp : blockIdx.x / CL;
  const long long begin = rank * chunk;
  const int packs = FULL ? MAXP : packs_in;
  const RowLayout<T> L{(int)min(chunk, n - begin), WARPS ? lane : (int)threadIdx.x, WARPS ? 32 : (int)blockDim.x, packs,
                       true, FULL};
  const int slots = Q * packs * blockDim.x;  // float4 accumulators of one kind
  float4* const accw = reinterpret_cast<float4*>(dyn_smem);
  float4* const accb = accw + slots;
  P* const ws = reinterpret_cast<P*>(accb + (dbs ? slots : 0));  // the weight's packs: no L2 trip a row
  P* const sa = ws + packs * blockDim.x;
  P* const sb = sa + packs * blockDim.x;
  for (int k = threadIdx.x; k < (dbs ? 2 : 1) * slots; k += blockDim.x) accw[k] = make_float4(0.f, 0.f, 0.f, 0.f);
  const T* wb = w ? w + begin : nullptr;
  const T* bb = b ? b + begin : nullptr;
#pragma unroll
  for (int p = 0; p < MAXP; ++p)
    if (p < packs) ws[p * blockDim.x + threadIdx.x] = column_pack<T>(wb, p, L, 1.f);  // this thread's slots only
  long long row = group;
  if (STAGE) stage_first_pair<T, MAXP>(sa, sb, src, dy, row * n + begin, row < rows, L);
  // From x, the row's statistics are loaded one row ahead (a dependent L2 trip before the first pass
  // otherwise); from the output (bias packs, divisions) that register spilled.
  const bool ahead = !op.from_y;
  A rstd_next = ahead && row < rows ? rstd_in[row] : A(0), mean_next = uses_mean && row < rows ? mean_in[row] : A(0);
  int set = 0;
  for (; row < rows; row += groups, set ^= 1) {
    const long long off = row * n + begin;
    P rx[MAXP], rd[MAXP];
    load_row_pair<STAGE, T, MAXP>(rx, rd, sa, sb, src, dy, off, groups * n, row + groups < rows, L);
    const A rstd = ahead ? rstd_next : rstd_in[row], mean = mean_next;
    if (ahead && row + groups < rows) {
      rstd_next = rstd_in[row + groups];
      if (uses_mean) mean_next = mean_in[row + groups];
    }
    A c1 = A(0), c2 = A(0);
#pragma unroll
    for (int p = 0; p < MAXP; ++p)
      if (p < packs)
        bwd_sums_pack<T>(op, rx[p], rd[p], ws[p * blockDim.x + threadIdx.x], column_pack<T>(bb, p, L, 0.f), mean, rstd,
                         c1, c2);
    if (!op.from_y) c2 *= rstd;
    if (op.layer) group_reduce2<A>(c1, c2, 32);
    else c2 = group_reduce<SumOp>(c2, 32);
    if (!WARPS) {  // the CTA's (the cluster's) warps' sums
      if (lane == 0) {
        sums[set][0][warp] = c1;
        sums[set][1][warp] = c2;
      }
      if (CL > 1) cluster_sync_all();  // also a barrier of this CTA
      else __syncthreads();
      c1 = c2 = A(0);
      if (lane < warps) {
#pragma unroll
        for (int r = 0; r < CL; ++r) {  // rank order
          if (op.layer) c1 += CL > 1 ? ld_shared_cluster(&sums[set][0][lane], r) : sums[set][0][lane];
          c2 += CL > 1 ? ld_shared_cluster(&sums[set][1][lane], r) : sums[set][1][lane];
        }
      }
      if (op.layer) group_reduce2<A>(c1, c2, 32);
      else c2 = group_reduce<SumOp>(c2, 32);
    }
    opaque<T, MAXP>(rx);
    opaque<T, MAXP>(rd);
#pragma unroll
    for (int p = 0; p < MAXP; ++p) {
      if (p < packs) {
        const int s0 = Q * p * blockDim.x + threadIdx.x;
        A aw[V], ab[V];
        load_sums<Q>(aw, accw, s0);
        if (dbs) load_sums<Q>(ab, accb, s0);
        P o;
        bwd_write_pack<T, DBS>(op, rx[p], rd[p], ws[p * blockDim.x + threadIdx.x],
                                          column_pack<T, true>(bb, p, L, 0.f), mean, rstd, c1 * inv_n, c2 * inv_n, o, aw,
                                          ab);
        store_pack<T>(dx + off, o, p, L);
        store_sums<Q>(accw, s0, aw);
        if (dbs) store_sums<Q>(accb, s0, ab);
      }
    }
  }
  if (CL > 1) cluster_sync_all();  // the peers' last reads of `sums` are done before this CTA exits
  if (WARPS) {  // partial row blockIdx.x: slot h of pack p, lane l, summed over the warps in order
    __syncthreads();
    for (int k = threadIdx.x; k < (dbs ? 2 : 1) * Q * packs * 32; k += blockDim.x) {
      const int kind = k / (Q * packs * 32), qp = k / 32 % (Q * packs), l = k % 32, p = qp / Q;
      float* out = kind == 0 ? dw_part : db_part;
      const int col = (p * 32 + l) * V + 4 * (qp % Q);
      if (out == nullptr || col >= L.len) continue;
      const float4* acc = (kind == 0 ? accw : accb) + qp * blockDim.x + l;
      float4 s = acc[0];
      for (int v = 1; v < warps; ++v) {
        const float4 a = acc[32 * v];
        s = make_float4(s.x + a.x, s.y + a.y, s.z + a.z, s.w + a.w);
      }
      *reinterpret_cast<float4*>(out + blockIdx.x * n + begin + col) = s;
    }
    return;
  }
  // Partial row `group`, columns [begin, begin + L.len): each thread its own slots (no barrier needed).
  for (int k = 0; k < (dbs ? 2 : 1); ++k) {
    float* out = k == 0 ? dw_part : db_part;
    if (out == nullptr) continue;
    const float4* acc = k == 0 ? accw : accb;
#pragma unroll
    for (int p = 0; p < MAXP; ++p)
      if (p < packs && L.inside(p)) {
        float4* o = reinterpret_cast<float4*>(out + group * n + begin + L.at(p));
#pragma unroll
        for (int h = 0; h < Q; ++h) o[h] = acc[(Q * p + h) * blockDim.x + threadIdx.x];
      }
  }
}

// The backward of rows over a cluster of CL CTAs, PK 16-byte packs a thread (n = CL * PK * V * blockDim.x), as a
// stream: the group's rows arrive by bulk copies (TMA) in a ring of S stages of shared memory (no registers or threads
// tied up in the loads), and a row's (c1, c2) meet across the cluster without a barrier. The warps' sums of row i meet
// in warp 0 (mbarrier local[i % K]), which sends the CTA's total to every CTA (slot [i % K][its rank]) by st.async,
// completing as bytes on that CTA's recv[i % K]; the first pass runs LAG rows ahead of that wait. (Remote stores +
// mbarrier.arrive.release.cluster instead: every release waits for the sender's outstanding dx stores, H100
// 1024x32768 bf16 layer 133.8 us against 85.9 with st.async.)
// Order per row i: first pass of row i + LAG (its stage filled) and its sums sent; wait for row i's; slot i % K
// re-armed; second pass of row i (dx written, column sums in registers); the warp's share of stage i % S released
// (empty), and thread 0 refills the stage of row i - 1 with row i - 1 + S once every warp released it. A peer sends
// row i + K only after its wait for row i + K - LAG - 1, whose sums this CTA sends after all its warps passed row i:
// with K = 2 LAG + 2 slot and phase are free by then. Rows counted in 32 bits: stage, slot and parity by a
// multiply-high, not a 64-bit division (the loop is issue-bound: 435 -> 376 SASS instructions).
// Launch: grid = CL * groups (2 <= CL <= 8), every CTA resident, clusters of CL along x; every CTA adds the same
// values in rank order (deterministic); blockDim.x = n / (CL * PK * V), a multiple of 32, <= 1024; dynamic shared
// memory 2 * S * PK * blockDim.x * 16 bytes; aligned rows; sm_90. Cluster c writes partial row c. The host takes
// S = 6 stages and a lag of 2 (three stages with a lag of 1, two CTAs an SM, took ~100 us on the row above).
template <typename T, bool FLOATS> struct RingWeight { typedef typename Vec16<T>::type type; };
template <typename T> struct RingWeight<T, true> { typedef Pack<float, Vec16<T>::N> type; };
template <typename T, int MODE, int SRC, int CL, int PK, int S = 6, int LAG = 2>
__global__ void __launch_bounds__(1024 / PK, 1) norm_bwd_ring(const T* __restrict__ src, const T* __restrict__ dy, T* dx,
                                                         const T* __restrict__ w, const T* __restrict__ b,
                                                         const float* __restrict__ mean_in,
                                                         const float* __restrict__ rstd_in,
                                                         float* __restrict__ dw_part, float* __restrict__ db_part,
                                                         long long rows, long long n, float inv_n, NormMode mode,
                                                         NormSource source) {
  launch_dependents();  // column_sum's blocks may start (they wait for this grid's end)
  static_assert(sizeof(T) <= 4 && CL > 1 && LAG >= 1 && S >= LAG + 2 && PK >= 1,
                "float sums; a cluster; stages for rows i..i + LAG and one loading");
  typedef float A;
  typedef typename Vec16<T>::type P;
  constexpr int V = Vec16<T>::N, K = 2 * LAG + 2;
  const NormOp<MODE, SRC> op(mode, source);
  constexpr bool DBS = MODE != RMS;  // dbias sums (of layer rows)
  const bool uses_mean = op.layer && !op.from_y;
  __shared__ float2 part[K][32], sums[K][CL];  // [row % K][warp]: this CTA's (c1, c2); [row % K][sender's rank]
  // full[S] (a stage's bytes landed), empty[S] (its warps done), local[K] (the warps' sums in part), recv[K] (sums)
  __shared__ alignas(8) unsigned long long bars[2 * S + 2 * K];
  extern __shared__ int4 dyn_smem[];
  // stage s: src's packs at [2 s W + j], dy's at [(2 s + 1) W + j] (W = PK * blockDim.x); thread t's j = p T + t
  const P* const ring = reinterpret_cast<const P*>(dyn_smem);
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, warps = blockDim.x >> 5, W = PK * blockDim.x;
  const unsigned rank = cluster_rank();
  const long long groups = gridDim.x / CL, group = blockIdx.x / CL, begin = (long long)rank * W * V;
  // the group's rows, the same in the cluster's CTAs
  const unsigned count = group < rows ? (unsigned)((rows - 1 - group) / groups + 1) : 0;
  const unsigned seg = W * 16, ring_at = (unsigned)__cvta_generic_to_shared(dyn_smem),
                 full_at = (unsigned)__cvta_generic_to_shared(bars), empty_at = full_at + 8 * S,
                 local_at = empty_at + 8 * S, recv_at = local_at + 8 * K;
  const long long base = group * n + begin, step = groups * n;  // row i's segment at base + i * step
  auto fill = [&](unsigned i, unsigned s) {  // thread 0: row i of the group into stage s = i % S
    const unsigned bar = full_at + 8 * s;
    const long long off = base + (long long)i * step;
    mbar_expect_tx(bar, 2 * seg);
    bulk_load(ring_at + 2 * s * seg, src + off, seg, bar);
    bulk_load(ring_at + (2 * s + 1) * seg, dy + off, seg, bar);
  };
  if (t == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full_at + 8 * s, 1);
      mbar_init(empty_at + 8 * s, warps);
    }
    for (int k = 0; k < K; ++k) {
      mbar_init(local_at + 8 * k, warps);
      mbar_init(recv_at + 8 * k, 1);  // this CTA's expect_tx of the CL pairs
    }
    mbar_init_fence();
    for (int k = 0; k < K; ++k) mbar_expect_tx(recv_at + 8 * k, CL * 8);
    for (unsigned i = 0; i < min((unsigned)S, count); ++i) fill(i, i);
  }
  cluster_sync_all();  // every CTA's barriers initialised and armed before a peer sends to them
  if (count == 0) return;  // the whole cluster alike
  const RowLayout<T> L{(int)(W * V), t, (int)blockDim.x, PK, true, true};
  // With PK > 1 (<= 512 threads, >= 128 registers) the weight as floats: no conversion an element a pass.
  typename RingWeight<T, (PK > 1)>::type wp[PK];
  P bp[PK];
#pragma unroll
  for (int p = 0; p < PK; ++p) {
    const P wv = column_pack<T>(w ? w + begin : nullptr, p, L, 1.f);
    if constexpr (PK > 1) {
#pragma unroll
      for (int e = 0; e < V; ++e) wp[p].v[e] = elem<A>(wv, e);
    } else {
      wp[p] = wv;
    }
    bp[p] = column_pack<T>(b ? b + begin : nullptr, p, L, 0.f);
  }
  A aw[PK * V], ab[DBS ? PK * V : 1];
#pragma unroll
  for (int e = 0; e < PK * V; ++e) aw[e] = A(0);
#pragma unroll
  for (int e = 0; e < (DBS ? PK * V : 1); ++e) ab[e] = A(0);
  // (mean, rstd) of the group's row j, whose index is stat_row (stepped with j)
  long long stat_row = group;
  auto stats = [&](unsigned j) {
    const float2 v = j < count ? make_float2(uses_mean ? mean_in[stat_row] : 0.f, rstd_in[stat_row])
                               : make_float2(0.f, 0.f);
    stat_row += groups;
    return v;
  };
  auto first_pass = [&](unsigned j, float2 st) {  // row j's CTA sums sent to every CTA of the cluster
    const unsigned fs = j % S, fk = j % K;
    mbar_wait(full_at + 8 * fs, (j / S) & 1);
    A c1 = A(0), c2 = A(0);
#pragma unroll
    for (int p = 0; p < PK; ++p) {
      const P xv = ring[2 * fs * W + p * blockDim.x + t], dv = ring[(2 * fs + 1) * W + p * blockDim.x + t];
      bwd_sums_pack<T>(op, xv, dv, wp[p], bp[p], st.x, st.y, c1, c2);
    }
    if (!op.from_y) c2 *= st.y;
    if (op.layer) group_reduce2<A>(c1, c2, 32);
    else c2 = group_reduce<SumOp>(c2, 32);
    if (lane == 0) {
      part[fk][warp] = make_float2(c1, c2);
      mbar_arrive(local_at + 8 * fk);
    }
    if (warp == 0) {  // the CTA's total, in warp order, to every CTA (this one included)
      mbar_wait(local_at + 8 * fk, (j / K) & 1);
      const float2 v = lane < warps ? part[fk][lane] : make_float2(0.f, 0.f);
      c1 = v.x;
      c2 = v.y;
      group_reduce2<A>(c1, c2, 32);
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < CL; ++r) st_async_cluster(&sums[fk][rank], r, make_float2(c1, c2), recv_at + 8 * fk);
    }
  };
  float2 st[LAG + 2];  // (mean, rstd) of rows i .. i + LAG + 1: rotated in registers
#pragma unroll
  for (int j = 0; j < LAG + 2; ++j) st[j] = stats(j);
#pragma unroll
  for (int j = 0; j < LAG; ++j)
    if (j < count) first_pass(j, st[j]);
  for (unsigned i = 0; i < count; ++i) {  // 32-bit: stage and slot by a multiply-high, not a 64-bit division
    if (i + LAG < count) first_pass(i + LAG, st[LAG]);
    const float2 cur = st[0];
#pragma unroll
    for (int j = 0; j < LAG + 1; ++j) st[j] = st[j + 1];
    st[LAG + 1] = stats(i + LAG + 2);
    const unsigned ss = i % S, sk = i % K;
    mbar_wait(recv_at + 8 * sk, (i / K) & 1);
    A c1 = A(0), c2 = A(0);
#pragma unroll
    for (int r = 0; r < CL; ++r) {  // rank order
      const float2 v = sums[sk][r];
      c1 += v.x;
      c2 += v.y;
    }
    // Slot sk's next phase (row i + K) armed: its pairs come only after every thread here passed this wait (a peer
    // sends row i + K after its wait for a row this CTA sends once all its warps are past row i)
    if (t == 0) mbar_expect_tx(recv_at + 8 * sk, CL * 8);
    T* const dxr = dx + base + (long long)i * step + t * V;  // this thread's first pack of row i
#pragma unroll
    for (int p = 0; p < PK; ++p) {
      const P xv = ring[2 * ss * W + p * blockDim.x + t], dv = ring[(2 * ss + 1) * W + p * blockDim.x + t];
      P o;
      bwd_write_pack<T, DBS>(op, xv, dv, wp[p], bp[p], cur.x, cur.y, c1 * inv_n, c2 * inv_n, o, aw + p * V,
                                        ab + (DBS ? p * V : 0));
      // __stwb: one 16-byte store (in the cluster instances NVVM split a plain pack store into 2- and 4-byte ones)
      __stwb(reinterpret_cast<int4*>(dxr + p * blockDim.x * V), *reinterpret_cast<const int4*>(&o));
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_at + 8 * ss);  // this warp is done with stage ss
    if (t == 0 && i >= 1 && i - 1 + S < count) {  // the previous row's stage, once every warp released it
      mbar_wait(empty_at + 8 * ((i - 1) % S), ((i - 1) / S) & 1);
      fill(i - 1 + S, (i - 1) % S);
    }
  }
  cluster_sync_all();  // no CTA exits while a peer may still address its shared memory; the ring's stages are free
  // The partial rows through the idle ring (W V floats a kind <= 2 S seg bytes) and out by bulk stores: whole lines
  // (H100: plain float4 stores at a 32-byte lane stride cost 3x their bytes in L2 write sectors).
  float4* const stage = reinterpret_cast<float4*>(dyn_smem);
  const bool dbs = DBS && op.layer;
  for (int kind = 0; kind < (dbs ? 2 : 1); ++kind) {
    const A* a = kind == 0 ? aw : ab;
#pragma unroll
    for (int p = 0; p < PK; ++p)
#pragma unroll
      for (int h = 0; h < V / 4; ++h)
        stage[(kind * W + p * blockDim.x + t) * (V / 4) + h] =
            make_float4(a[p * V + 4 * h], a[p * V + 4 * h + 1], a[p * V + 4 * h + 2], a[p * V + 4 * h + 3]);
  }
  fence_proxy_async_shared();
  __syncthreads();
  if (t < (dbs ? 2 : 1)) {  // thread k stores kind k
    float* out = t == 0 ? dw_part : db_part;
    if (out != nullptr) {
      bulk_store(out + group * n + begin, ring_at + t * W * V * 4, W * V * 4);
      bulk_store_wait();
    }
  }
}
