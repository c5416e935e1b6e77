// Thread-block clusters (sm_90): the CTA's rank, a cluster-wide barrier, and loads from a peer CTA's
// shared memory. On older targets these trap: the host launches clusters only on compute capability 9.0+.
// Also programmatic dependent launch (sm_90; no-ops before it, and when the launch did not ask for it).
#pragma once

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
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ unsigned cluster_rank() {
#if __CUDA_ARCH__ >= 900
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
#else
  __trap();
  return 0;
#endif
}
// The float at `p` (this CTA's shared memory) in the shared memory of cluster CTA `cta`.
__device__ __forceinline__ float ld_shared_cluster(const float* p, unsigned cta) {
#if __CUDA_ARCH__ >= 900
  float v;
  asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %1, %2;\nld.shared::cluster.f32 %0, [ra];\n}\n"
               : "=f"(v) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(cta) : "memory");
  return v;
#else
  __trap();
  return *p;
#endif
}
