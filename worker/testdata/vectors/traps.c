// traps.c: a program that traps in the way its stdin names, for the
// determinism profile's trap words (docs/determinism.md, "Failures"): every
// host must fail each task with the same failure, whatever its engine
// calls the trap. Built at test time:
//
//	clang --target=wasm32-wasi -O2 -fno-builtin -nostdlib \
//	    -Wl,--no-entry -Wl,--export=_start -o traps.wasm traps.c
//
// stdin's first byte chooses the trap:
//
//	u  unreachable
//	d  integer divide by zero      r  integer remainder by zero
//	o  integer overflow (INT_MIN / -1)
//	c  invalid conversion to integer (NaN to i32)
//	m  out of bounds memory access
//	t  a call through a table index past the table's end
//	s  a call through the table with the wrong signature
//	x  stack overflow (unbounded recursion)
//
// and any other byte returns normally (no failure).

typedef unsigned int u32;

#define WASI(name) __attribute__((import_module("wasi_snapshot_preview1"), import_name(#name)))

WASI(fd_read) int fd_read(int fd, u32 iovs, u32 n, u32 nread);

#define P(x) ((u32)(unsigned long)(x))

static unsigned char in[16];
static u32 iov[2];
static u32 nread;

volatile int zero = 0;
volatile int minusOne = -1;
volatile int intMin = (int)0x80000000u;
volatile float nan = __builtin_nanf("");
volatile u32 far = 0xfffffff0u;
volatile u32 pastTable = 1000;
volatile int depth;

static int twoArgs(int a, int b) { return a + b; }
int (*volatile asTwo)(int, int) = twoArgs;

// recurse keeps its frames on the engine's stack, not in linear memory
// (a frame there would run off the bottom of memory first).
static int recurse(int n) {
	depth = n;
	return recurse(n + 1) + zero;
}

void _start(void) {
	iov[0] = P(in);
	iov[1] = sizeof in;
	if (fd_read(0, P(iov), 1, P(&nread)) != 0 || nread == 0) return;
	switch (in[0]) {
	case 'u':
		__builtin_trap();
	case 'd':
		depth = 7 / zero;
		return;
	case 'r':
		depth = 7 % zero;
		return;
	case 'o':
		depth = intMin / minusOne;
		return;
	case 'c':
		depth = __builtin_wasm_trunc_s_i32_f32(nan);
		return;
	case 'm':
		depth = *(volatile int *)(unsigned long)far;
		return;
	case 't':
		depth = ((int (*)(int, int))(unsigned long)pastTable)(1, 2);
		return;
	case 's':
		depth = ((int (*)(int))asTwo)(1);
		return;
	case 'x':
		depth = recurse(0);
		return;
	}
}
