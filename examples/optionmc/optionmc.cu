// optionmc.cu: the GPU kernel of examples/optionmc, Monte Carlo price of a
// European call under Black-Scholes dynamics, in float32.
//
// Plain CUDA C without the CUDA headers or libdevice (see the Makefile), so
// the math uses the PTX approximate instructions through clang's NVVM
// builtins: lg2.approx, ex2.approx, sin.approx, cos.approx (relative or
// absolute errors of about 2^-22, PTX ISA "Floating Point Instructions"),
// and sqrt.rn. The CPU path (optionmc.go) computes the same paths in
// float64; replicas from the two agree within the manifest's
// [verify.tolerance], not bit for bit.

typedef unsigned int u32;
typedef unsigned long long u64;

// OPTIONMC_HOST_TEST compiles the per-thread function alone as host C++
// with <math.h>'s float functions (optionmc_cu_test.go).
#ifdef OPTIONMC_HOST_TEST
#define DEVICE static inline
#define LOG2F(x) log2f(x)
#define EXP2F(x) exp2f(x)
#define SQRTF(x) sqrtf(x)
#define COSF(x) cosf(x)
#define SINF(x) sinf(x)
#else
#define DEVICE __attribute__((device)) static inline
#define GLOBAL extern "C" __attribute__((global))
#define SHARED __attribute__((shared))
#define LOG2F(x) __nvvm_lg2_approx_f(x)
#define EXP2F(x) __nvvm_ex2_approx_f(x)
#define SQRTF(x) __nvvm_sqrt_rn_f(x)
#define COSF(x) __nvvm_cos_approx_f(x)
#define SINF(x) __nvvm_sin_approx_f(x)
#endif

// The launch geometry gpu.go uses: threads per block (a power of two).
#define BLOCK_THREADS 256

// Philox4x32 constants (Salmon et al., SC'11, table 2; Random123).
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

#define LN2_F 0.693147180559945309f
#define LOG2E_F 1.44269504088896341f
#define PI_F 3.14159265358979324f

// sum_payoffs returns the sum of the call payoffs of the path pairs
// first+j, for j = start, start+stride, ... below n. Pair i draws
// Philox4x32-10 of counter (lo(i), hi(i), 0, 0) under key (lo(seed),
// hi(seed)); the top 24 bits of its first two words give uniforms
// u = (w>>8 + 1/2)·2^-24 in (0, 1), exact in float32 and float64 alike;
// Box-Muller gives z1 = r·cos θ, z2 = r·sin θ with r = sqrt(-2 ln u1),
// θ = 2π·u2 − π; each z prices one path: S_T = s0·exp(drift + vol·z),
// payoff max(S_T − k, 0).
DEVICE float sum_payoffs(u64 seed, u64 first, u64 n, u64 start, u64 stride, float s0, float k, float drift, float vol) {
  const u32 k0 = (u32)seed, k1 = (u32)(seed >> 32);
  float sum = 0.0f;
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
    const float u1 = ((float)(c0 >> 8) + 0.5f) * 5.9604644775390625e-8f; // 2^-24
    const float u2 = ((float)(c1 >> 8) + 0.5f) * 5.9604644775390625e-8f;
    const float r = SQRTF(-2.0f * LN2_F * LOG2F(u1));
    const float theta = 2.0f * PI_F * u2 - PI_F;
    const float z1 = r * COSF(theta), z2 = r * SINF(theta);
    const float st1 = s0 * EXP2F((drift + vol * z1) * LOG2E_F);
    const float st2 = s0 * EXP2F((drift + vol * z2) * LOG2E_F);
    sum += (st1 > k ? st1 - k : 0.0f) + (st2 > k ? st2 - k : 0.0f);
  }
  return sum;
}

#ifndef OPTIONMC_HOST_TEST
// price_paths adds to *sum the payoffs of the path pairs first ..
// first+n-1 (2n paths). Each thread sums its pairs in float32; the block
// adds its threads' sums in float64 in shared memory and one thread adds
// the block's sum atomically (float64 atomic add, sm_60 and later).
// Launch with blockDim.x == BLOCK_THREADS.
GLOBAL void price_paths(double *sum, u64 seed, u64 first, u64 n, float s0, float k, float drift, float vol) {
  SHARED double partial[BLOCK_THREADS];
  const u32 tid = __nvvm_read_ptx_sreg_tid_x();
  const u64 stride = (u64)__nvvm_read_ptx_sreg_nctaid_x() * __nvvm_read_ptx_sreg_ntid_x();
  const u64 start = (u64)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + tid;
  partial[tid] = (double)sum_payoffs(seed, first, n, start, stride, s0, k, drift, vol);
  __syncthreads();
  for (u32 half = BLOCK_THREADS / 2; half > 0; half /= 2) {
    if (tid < half) partial[tid] += partial[tid + half];
    __syncthreads();
  }
  if (tid == 0) __nvvm_atom_add_gen_d(sum, partial[0]);
}
#endif
