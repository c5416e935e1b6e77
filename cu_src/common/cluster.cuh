// Thread-block clusters (sm_90): the CTA's rank, a cluster-wide barrier, loads from and asynchronous stores to a peer
// CTA's shared memory; mbarriers and 1-D bulk copies (TMA) into shared memory. On older targets these trap: the
// host launches them only on compute capability 9.0+. Also programmatic dependent launch (sm_90; no-ops before
// it, and when the launch did not ask for it).
#pragma once

#if __CUDA_ARCH__ >= 900
#define SM90(...) __VA_ARGS__
#else
#define SM90(...) __trap()
#endif

// The next kernel of the stream, launched after_previous (tma.py's launch), may start its blocks now.
__device__ __forceinline__ void launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Waits until the previous kernel of the stream has ended and its writes are visible.
__device__ __forceinline__ void wait_prerequisites() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_sync_all() {
  SM90(asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory"));
}
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r = 0;
  SM90(asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r)));
  return r;
}
// The float at `p` (this CTA's shared memory) in the shared memory of cluster CTA `cta`.
__device__ __forceinline__ float ld_shared_cluster(const float* p, unsigned cta) {
  float v = 0.f;
  SM90(asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %1, %2;\nld.shared::cluster.f32 %0, [ra];\n}\n"
                    : "=f"(v) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(cta) : "memory"));
  return v;
}

// mbarriers at shared-memory addresses (__cvta_generic_to_shared). mbar_wait: until the phase of `parity` completed.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  SM90(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory"));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  SM90(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory"));
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  SM90(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory"));
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  SM90(unsigned done; do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done));
}
// Initialised mbarriers made visible to the async proxy (the bulk copies completing on them) and the cluster.
__device__ __forceinline__ void mbar_init_fence() {
  SM90(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory to this CTA's shared memory at
// `dst`, completing as bytes on the mbarrier at `bar` (which expects them: mbar_expect_tx).
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  SM90(asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                    ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory"));
}
// Two floats stored at `p`'s offset in the shared memory of cluster CTA `cta` asynchronously, completing as 8 bytes
// on the mbarrier at `bar`'s offset there (which expects them): no release fence (an mbarrier.arrive.release.cluster
// after a plain remote store waits for this thread's outstanding global stores: ncu's membar stalls).
__device__ __forceinline__ void st_async_cluster(const float2* p, unsigned cta, float2 v, unsigned bar) {
  SM90(asm volatile("{\n.reg .b32 ra, rb;\nmapa.shared::cluster.u32 ra, %0, %1;\nmapa.shared::cluster.u32 rb, %4, %1;\n"
                    "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [ra], {%2, %3}, [rb];\n}\n"
                    ::"r"((unsigned)__cvta_generic_to_shared(p)), "r"(cta), "f"(v.x), "f"(v.y), "r"(bar) : "memory"));
}
// Generic-proxy writes of this thread to shared memory made visible to the async proxy (bulk copies, wgmma).
__device__ __forceinline__ void fence_proxy_async_shared() {
  SM90(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"));
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from this CTA's shared memory at `src` to global
// memory, whole lines (plain 16-byte stores at a 32-byte lane stride write half sectors); bulk_store_wait: until
// this thread's bulk stores are done (shared memory free, global writes performed).
__device__ __forceinline__ void bulk_store(void* dst, unsigned src, unsigned bytes) {
  SM90(asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                    "cp.async.bulk.commit_group;\n" ::"l"(dst), "r"(src), "r"(bytes) : "memory"));
}
__device__ __forceinline__ void bulk_store_wait() {
  SM90(asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"));
}
