/*
 * pi.c: the pi example (examples/pi) in C. It throws params.samples
 * uniform points into the unit square and counts those strictly inside the
 * quarter disc, with the same generator and the same arithmetic as the Go
 * program, so a task gives the same bytes in both:
 *
 *   {"inside":785412,"samples":1000000}
 *
 * Each sample is one 64-bit draw of SplitMix64 (ip_splitmix) seeded with
 * the task seed: its high and low 32 bits are x and y in
 * units of 2^-32, and the point is inside exactly when x² + y² < 2^64,
 * that is when the 64-bit sum does not carry.
 */
#include "idlepool_task.h"

/* count_inside returns how many of samples points fall inside. */
static int64_t count_inside(uint64_t seed, int64_t samples) {
	ip_splitmix rng = ip_splitmix_new(seed);
	uint64_t outside = 0;
	for (int64_t i = 0; i < samples; i++) {
		uint64_t r = ip_splitmix_u64(&rng);
		uint64_t x = r >> 32, y = r & 0xffffffff;
		uint64_t xx = x * x, sum = xx + y * y;
		outside += sum < xx; /* the carry of the 64-bit add */
	}
	return samples - (int64_t)outside;
}

int main(void) {
	ip_task t;
	if (ip_task_read(&t) != 0) return 1;
	int64_t samples = 0;
	if (ip_param_i64(&t, "samples", &samples) == IP_BAD) return 1;
	if (samples <= 0) return ip_fail("params.samples must be a positive integer, got %lld", (long long)samples);
	ip_result r;
	ip_result_begin(&r);
	ip_result_i64(&r, "inside", count_inside(t.seed, samples));
	ip_result_i64(&r, "samples", samples);
	return ip_result_end(&r);
}
