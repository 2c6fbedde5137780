// gpupi.cu: the GPU kernel of examples/gpupi, Monte Carlo pi with samples
// from Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC'11).
//
// Plain CUDA C without the CUDA headers, so that Debian's clang turns it
// into PTX with no CUDA toolkit installed (see the Makefile):
//
//   clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_60 -nocudainc \
//     -nocudalib -O3 -S -o gpupi.ptx gpupi.cu
//
// The attributes and builtins below are what the CUDA headers' __global__,
// __shared__, threadIdx and friends expand to in clang.
//
// count_inside must count exactly what countInside in philox.go counts:
// the byte-identical results of the GPU and CPU paths depend on it.

typedef unsigned int u32;
typedef unsigned long long u64;

// GPUPI_HOST_TEST compiles the counting function alone as host C++ (the
// Go test gpupi_cu_test.go checks it against philox.go that way).
#ifdef GPUPI_HOST_TEST
#define DEVICE static inline
#else
#define DEVICE __attribute__((device)) static inline
#define GLOBAL extern "C" __attribute__((global))
#define SHARED __attribute__((shared))
#endif

// The launch geometry gpu.go uses: threads per block (a power of two).
#define BLOCK_THREADS 256

// Philox4x32 constants (SC'11, table 2; Random123's philox.h).
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

// count_strided returns how many of the samples first+j, for j = start,
// start+stride, start+2*stride, ... below n, fall inside the quarter disc.
// Sample i is Philox4x32-10 of counter (lo(i), hi(i), 0, 0) under key
// (lo(seed), hi(seed)); its first two words x, y are inside when
// x*x + y*y, computed in 64 bits, does not carry.
DEVICE u64 count_strided(u64 seed, u64 first, u64 n, u64 start, u64 stride) {
  const u32 k0 = (u32)seed, k1 = (u32)(seed >> 32);
  u64 inside = 0;
  for (u64 j = start; j < n; j += stride) {
    const u64 i = first + j;
    u32 c0 = (u32)i, c1 = (u32)(i >> 32), c2 = 0, c3 = 0;
    u32 key0 = k0, key1 = k1;
#pragma unroll
    for (int r = 0; r < 10; r++) {
      if (r > 0) {
        key0 += PHILOX_W0;
        key1 += PHILOX_W1;
      }
      const u64 p0 = (u64)PHILOX_M0 * c0;
      const u64 p1 = (u64)PHILOX_M1 * c2;
      const u32 n0 = (u32)(p1 >> 32) ^ c1 ^ key0;
      const u32 n2 = (u32)(p0 >> 32) ^ c3 ^ key1;
      c1 = (u32)p1;
      c3 = (u32)p0;
      c0 = n0;
      c2 = n2;
    }
    const u64 x2 = (u64)c0 * c0, y2 = (u64)c1 * c1;
    inside += (x2 + y2 >= x2); // no carry out of 64 bits: x^2 + y^2 < 2^64
  }
  return inside;
}

#ifndef GPUPI_HOST_TEST
// count_inside adds to *count the number of samples first .. first+n-1 of
// the task keyed by seed that fall inside the quarter disc. Each thread
// takes every stride-th sample (stride: the threads of the grid), the
// block sums its threads' counts in shared memory, and one thread per
// block adds the block's count atomically: integer addition, so the total
// does not depend on the order. Launch with blockDim.x == BLOCK_THREADS.
GLOBAL void count_inside(u64 *count, u64 seed, u64 first, u64 n) {
  SHARED u64 partial[BLOCK_THREADS];
  const u32 tid = __nvvm_read_ptx_sreg_tid_x();
  const u64 stride = (u64)__nvvm_read_ptx_sreg_nctaid_x() * __nvvm_read_ptx_sreg_ntid_x();
  const u64 start = (u64)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + tid;
  partial[tid] = count_strided(seed, first, n, start, stride);
  __syncthreads();
  for (u32 half = BLOCK_THREADS / 2; half > 0; half /= 2) {
    if (tid < half) partial[tid] += partial[tid + half];
    __syncthreads();
  }
  if (tid == 0 && partial[0] != 0) __nvvm_atom_add_gen_ll((long long *)count, (long long)partial[0]);
}
#endif
