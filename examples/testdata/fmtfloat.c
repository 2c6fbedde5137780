/*
 * fmtfloat.c: a test program for idlepool_task.h's float formatting
 * (examples/guests_test.go). It writes params.n doubles drawn from
 * params.seed, formatted by ip_format_f64, as one JSON array; the test
 * draws the same doubles in Go and compares with encoding/json's bytes.
 */
#include "idlepool_task.h"

static uint64_t splitmix64(uint64_t *x) {
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* draw is the test's double number i: random bits, powers of two (where
 * the interval that reads back is lopsided), neighbours of 1e-6 and 1e21
 * (where the notation changes) and short binary fractions. */
static double draw(uint64_t *x, int64_t i) {
	uint64_t b = splitmix64(x), bits;
	double v;
	switch (i % 4) {
	case 0: bits = b; break;
	case 1: bits = b & ~((1ULL << 52) - 1); break;
	case 2:
		v = i % 8 == 2 ? 1e-6 : 1e21;
		memcpy(&bits, &v, 8);
		bits += (b % 41) - 20;
		break;
	default:
		return (double)(b % (1 << 20)) / 1024.0 * (b >> 63 ? -1 : 1);
	}
	if ((bits >> 52 & 0x7ff) == 0x7ff) bits &= ~(1ULL << 62);
	memcpy(&v, &bits, 8);
	return v;
}

int main(void) {
	ip_task t;
	if (ip_task_read(&t) != 0) return 1;
	int64_t n = 0;
	if (ip_param_i64(&t, "n", &n) == IP_BAD) return 1;
	uint64_t x = t.seed;
	putchar('[');
	for (int64_t i = 0; i < n; i++) {
		char tmp[40];
		if (ip_format_f64(draw(&x, i), tmp) != 0) return ip_fail("not finite");
		if (i > 0) putchar(',');
		fputs(tmp, stdout);
	}
	puts("]");
	return 0;
}
