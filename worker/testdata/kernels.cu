// Kernels for the test of the real CUDA driver (TestRealCUDADriver),
// compiled to PTX by the test with Debian's clang (NVPTX back end), no
// CUDA toolkit needed:
//
//	clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_60 -nocudainc -nocudalib -O2 -S -o kernels.ptx kernels.cu
#define __global__ __attribute__((global))

// add_u32: p[i] += k for every thread i < n.
extern "C" __global__ void add_u32(unsigned int *p, unsigned int n, unsigned int k) {
  unsigned int i = __nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x();
  if (i < n) p[i] += k;
}

// echo_params writes what it was passed, as 64-bit slots, to out.
extern "C" __global__ void echo_params(unsigned long long *out, unsigned int a, unsigned long long b, float c, double d, unsigned long long *e) {
  union { float f; unsigned int u; } cf;
  union { double f; unsigned long long u; } df;
  cf.f = c;
  df.f = d;
  out[0] = (unsigned long long)out;
  out[1] = a;
  out[2] = b;
  out[3] = cf.u;
  out[4] = df.u;
  out[5] = (unsigned long long)e;
}

// fault writes to address 0.
extern "C" __global__ void fault(void) { *(volatile int *)0 = 1; }
