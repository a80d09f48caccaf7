/* retarget's stand-in for the device side of <hip/hip_runtime.h>, used when no ROCm is installed:
   clang compiles retarget's HIP kernels (`-x hip -nogpuinc -nogpulib`) against these few
   definitions instead of ROCm's headers and device library. It is not a HIP implementation: it
   holds what retarget's renderer emits and nothing else: the kernel qualifiers, blockIdx and
   threadIdx, __syncthreads, and the math functions (retarget_math.h). With ROCm, hiprtc compiles
   the same source against ROCm's own headers. */
#pragma once

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(threads) __attribute__((amdgpu_flat_work_group_size(1, threads)))
#define RT_FN static __device__ __forceinline__

struct rt_dim3 {
  unsigned int x, y, z;
};

RT_FN rt_dim3 rt_block_idx() {
  return rt_dim3{__builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(),
                 __builtin_amdgcn_workgroup_id_z()};
}

RT_FN rt_dim3 rt_thread_idx() {
  return rt_dim3{__builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(),
                 __builtin_amdgcn_workitem_id_z()};
}

/* `blockIdx.x` reads one id: the unused ones fold away */
#define blockIdx (rt_block_idx())
#define threadIdx (rt_thread_idx())

/* as HIP's: release the workgroup's writes, wait for every wavefront, acquire theirs */
RT_FN void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

#include "retarget_math.h"
