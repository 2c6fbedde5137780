// mlp.cu: the GPU kernels of the multilayer perceptron of
// examples/fashion (mlp.go, gpu.go): the two products with the first
// layer's weights, which are nearly all of a grad task's arithmetic (784 x
// hidden multiply-adds per example each way, against hidden x 10 for the
// second layer).
//
//   mlp_hidden   the forward pass's first layer: the pre-activation
//                a[e][j] = b1[j] + sum_i W1[i][j] * (pixel_i / 255)
//   mlp_grad_w1  the first layer's gradient: the int64 sum over the
//                examples of pixel_i * dh[e][j] (dh: the hidden errors in
//                fixed point, computed on the CPU)
//
// Plain CUDA C without the CUDA headers, turned into PTX by Debian's clang
// with no CUDA toolkit (see the Makefile's PTXFLAGS and MLPPTXFLAGS):
//
//   clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_60 -nocudainc \
//     -nocudalib -O3 -ffp-contract=off -S -o mlp.ptx mlp.cu
//
// Bit-exactness with the CPU path (mlp.go), which the Go tests check by
// compiling this file's device functions as host C (MLP_HOST_TEST):
//   - one thread computes one output element, with the same loop as the
//     Go code, in the same (ascending) order: no reduction tree, no
//     atomics on floating-point numbers;
//   - float64 only, and -ffp-contract=off: clang then writes every
//     operation with an explicit rounding mode (add.rn.f64, mul.rn.f64,
//     div.rn.f64), which ptxas may not fuse into a multiply-add; no
//     .ftz or .approx exists for float64 arithmetic. TestMLPPTXBuild
//     checks the PTX for fma, .ftz and .approx;
//   - a zero pixel is skipped, as the Go code skips it (adding W*0 would
//     turn a -0 into +0);
//   - the integer products and sums wrap and detect overflow exactly as
//     Go's int64 and exact.Vec.Add do, in the same order of examples.

typedef unsigned char u8;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#ifdef MLP_HOST_TEST
#define DEVICE static inline
#else
#define DEVICE __attribute__((device)) static inline
#define GLOBAL extern "C" __attribute__((global))
#endif

// hidden_pre returns the pre-activation of hidden unit j of one image px
// (features bytes): b1[j] plus W1[i][j] * (px[i] / 255) for each pixel i
// in ascending order, a zero pixel adding nothing. W1 is row-major,
// features x hidden. It is mlp.hidden in mlp.go, for one unit.
DEVICE double hidden_pre(const double *w1, const double *b1, const u8 *px, u32 features, u32 hidden, u32 j) {
  double a = b1[j];
  for (u32 i = 0; i < features; i++) {
    const u32 v = px[i];
    if (v == 0) continue;
    const double x = (double)v / 255.0;
    const double p = w1[(u64)i * hidden + j] * x;
    a = a + p;
  }
  return a;
}

// grad_w1_add adds pixel i times hidden error j of examples first ..
// first+count-1 (ascending) to *sum, as exact.Vec.Add does: the product
// wraps as Go's int64 multiplication; a sum that would overflow is not
// made, the element keeps its old value and *overflow becomes 1. px holds
// features bytes per example from example 0; dh holds hidden int64 per
// example from example first.
DEVICE void grad_w1_add(i64 *sum, u32 *overflow, const u8 *px, const i64 *dh, u32 features, u32 hidden, u32 i, u32 j,
                        u32 first, u32 count) {
  i64 s = *sum;
  for (u32 e = 0; e < count; e++) {
    const u64 v = px[(u64)(first + e) * features + i];
    const i64 d = dh[(u64)e * hidden + j];
    if (v == 0 || d == 0) continue;
    const i64 q = (i64)(v * (u64)d);      // wraps, as in Go
    const i64 t = (i64)((u64)s + (u64)q); // wraps, as in Go
    if ((q > 0 && t < s) || (q < 0 && t > s)) {
      *overflow = 1;
      continue;
    }
    s = t;
  }
  *sum = s;
}

#ifndef MLP_HOST_TEST
// thread returns the index of this thread in a one-dimensional grid.
DEVICE u64 thread(void) {
  return (u64)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x();
}

// mlp_hidden writes a[e][j] (count x hidden, row-major) = the
// pre-activation of hidden unit j of example first+e, for e < count; px is
// every example's pixels (features bytes each, from example 0). Thread t
// computes element t: e = t / hidden, j = t % hidden. Launch with at least
// count * hidden threads; the others do nothing.
GLOBAL void mlp_hidden(double *a, const double *w1, const double *b1, const u8 *px, u32 features, u32 hidden, u32 first,
                       u32 count) {
  const u64 t = thread();
  if (t >= (u64)count * hidden) return;
  const u32 e = (u32)(t / hidden), j = (u32)(t % hidden);
  a[t] = hidden_pre(w1, b1, px + (u64)(first + e) * features, features, hidden, j);
}

// mlp_grad_w1 adds to g[i][j] (features x hidden, row-major, int64) the
// products pixel_i * dh[e][j] of examples first .. first+count-1, in
// ascending order (dh: count x hidden int64, from example first); *overflow
// becomes 1 if a sum would overflow 64 bits. Thread t owns element t: i = t
// / hidden, j = t % hidden; successive launches over successive examples
// continue each element's sum in order. Launch with at least features *
// hidden threads.
GLOBAL void mlp_grad_w1(i64 *g, u32 *overflow, const u8 *px, const i64 *dh, u32 features, u32 hidden, u32 first,
                        u32 count) {
  const u64 t = thread();
  if (t >= (u64)features * hidden) return;
  grad_w1_add(g + t, overflow, px, dh, features, hidden, (u32)(t / hidden), (u32)(t % hidden), first, count);
}
#endif
