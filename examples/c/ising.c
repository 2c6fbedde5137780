/*
 * ising.c: the Ising example (examples/ising) in C: single-spin-flip
 * Metropolis on a periodic L×L lattice (J = 1, k_B = 1, no field), the
 * same algorithm, generator and order of floating-point operations as the
 * Go program, so a task gives the same bytes in both:
 *
 *   {"T":2.25,"rep":0,"energy":-1.45,"abs_m":0.63,"chi":14.1}
 *
 * Task params: T (temperature, > 0), L (lattice side, >= 2), burnin and
 * sweeps (sweeps discarded, then measured), rep (echoed back). Build with
 * -ffp-contract=off (examples/build-guest.sh does): a fused multiply-add
 * would round chi differently from Go.
 */
#include "idlepool_task.h"

/* PCG_STREAM is the second PCG seed word; the first is the task seed. */
#define PCG_STREAM 0x2545f4914f6cdd1dULL
/* MAX_SIDE bounds L; sweeps·L⁴ must also fit an int64 (the sum of M²). */
#define MAX_SIDE 4096

/* go_exp is Go's math.Exp as Go computes it without assembly (its
 * pure-Go exp, which GOARCH=wasm runs: FreeBSD's e_exp.c), so that the
 * acceptance thresholds are the same bits as the Go program's. */
static double go_exp(double x) {
	const double Ln2Hi = 6.93147180369123816490e-01, Ln2Lo = 1.90821492927058770002e-10,
		     Log2e = 1.44269504088896338700e+00, Overflow = 7.09782712893383973096e+02,
		     Underflow = -7.45133219101941108420e+02, NearZero = 1.0 / (1 << 28);
	const double P1 = 1.66666666666666657415e-01, P2 = -2.77777777770155933842e-03,
		     P3 = 6.61375632143793436117e-05, P4 = -1.65339022054652515390e-06,
		     P5 = 4.13813679705723846039e-08;
	if (isnan(x)) return x;
	if (x > Overflow) return INFINITY;
	if (x < Underflow) return 0;
	if (-NearZero < x && x < NearZero) return 1 + x;
	int k = 0;
	if (x < 0) k = (int)(Log2e * x - 0.5);
	else if (x > 0) k = (int)(Log2e * x + 0.5);
	double hi = x - (double)k * Ln2Hi;
	double lo = (double)k * Ln2Lo;
	double r = hi - lo;
	double t = r * r;
	double c = r - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))));
	double y = 1 - ((lo - (r * c) / (2 - c)) - hi);
	return ldexp(y, k);
}

/* lattice is the state of one Metropolis run. */
typedef struct {
	int side;
	int32_t *spins;   /* ±1, row-major */
	uint32_t thr[3];  /* thr[dE/4] is exp(-dE/T) scaled to 2^32, dE = 4, 8 */
	ip_pcg rng;
	uint64_t draw;    /* holds 32 unused random bits when half is set */
	int half;
	int64_t energy;   /* E = -Σ s_i s_j over the 2N bonds */
	int64_t mag;      /* M = Σ s_i */
} lattice;

/* sweep attempts one flip per site, in lattice order; each 64-bit draw
 * serves two decisions, low half first. The generator's state is copied
 * into a local: WebAssembly keeps a local that no pointer reaches out of
 * its linear memory, where every access is bounds-checked (measured:
 * Ising's WebAssembly/native ratio from 1.9 to 1.7). */
static void sweep(lattice *lat) {
	const int L = lat->side;
	int32_t *spins = lat->spins;
	const uint32_t thr1 = lat->thr[1], thr2 = lat->thr[2];
	ip_pcg rng = lat->rng;
	uint64_t draw = lat->draw;
	int half = lat->half;
	int64_t energy = lat->energy, mag = lat->mag;
	for (int r = 0; r < L; r++) {
		int32_t *row = spins + r * L;
		const int32_t *up = spins + ((r + L - 1) % L) * L;
		const int32_t *down = spins + ((r + 1) % L) * L;
		for (int c = 0; c < L; c++) {
			int left = c == 0 ? L - 1 : c - 1, right = c == L - 1 ? 0 : c + 1;
			int32_t s = row[c];
			int32_t dE = 2 * s * (row[left] + row[right] + up[c] + down[c]);
			if (dE > 0) {
				uint32_t u;
				if (half) {
					u = (uint32_t)(draw >> 32), half = 0;
				} else {
					draw = ip_pcg_u64(&rng);
					u = (uint32_t)draw, half = 1;
				}
				if (u >= (dE == 4 ? thr1 : thr2)) continue;
			}
			row[c] = -s;
			energy += dE;
			mag -= 2 * s;
		}
	}
	lat->rng = rng, lat->draw = draw, lat->half = half;
	lat->energy = energy, lat->mag = mag;
}

int main(void) {
	ip_task t;
	if (ip_task_read(&t) != 0) return 1;
	double T = 0;
	int64_t L = 0, burnin = 0, sweeps = 0, rep = 0;
	if (ip_param_f64(&t, "T", &T) == IP_BAD || ip_param_i64(&t, "L", &L) == IP_BAD ||
	    ip_param_i64(&t, "burnin", &burnin) == IP_BAD || ip_param_i64(&t, "sweeps", &sweeps) == IP_BAD ||
	    ip_param_i64(&t, "rep", &rep) == IP_BAD)
		return 1;
	char tmp[40];
	ip_format_f64(T, tmp);
	if (!(T > 0) || T > 1e6) return ip_fail("params.T must be a temperature in (0, 1e6], got %s", tmp);
	if (L < 2 || L > MAX_SIDE) return ip_fail("params.L must be in [2, %d], got %lld", MAX_SIDE, (long long)L);
	if (sweeps < 1) return ip_fail("params.sweeps must be at least 1, got %lld", (long long)sweeps);
	if (burnin < 0) return ip_fail("params.burnin must not be negative, got %lld", (long long)burnin);
	if (sweeps > INT64_MAX / (L * L * L * L))
		return ip_fail("params.sweeps = %lld on a %lld×%lld lattice would overflow the sum of M²", (long long)sweeps, (long long)L, (long long)L);

	/* All spins up: the ordered start settles quickly below Tc. */
	int64_t n = L * L;
	lattice lat = {.side = (int)L, .rng = ip_pcg_new(t.seed, PCG_STREAM), .energy = -2 * n, .mag = n};
	lat.spins = malloc((size_t)n * sizeof *lat.spins);
	if (!lat.spins) return ip_fail("out of memory for a %lld×%lld lattice", (long long)L, (long long)L);
	for (int64_t i = 0; i < n; i++) lat.spins[i] = 1;
	for (int k = 1; k <= 2; k++) lat.thr[k] = (uint32_t)(go_exp(-4 * (double)k / T) * 4294967296.0);

	for (int64_t i = 0; i < burnin; i++) sweep(&lat);
	int64_t sumE = 0, sumAbsM = 0, sumM2 = 0;
	for (int64_t i = 0; i < sweeps; i++) {
		sweep(&lat);
		sumE += lat.energy;
		sumAbsM += lat.mag < 0 ? -lat.mag : lat.mag;
		sumM2 += lat.mag * lat.mag;
	}
	double fn = (double)n, fs = (double)sweeps;
	double absM = (double)sumAbsM / fs / fn;
	double m2 = (double)sumM2 / fs / (fn * fn);
	ip_result r;
	ip_result_begin(&r);
	ip_result_f64(&r, "T", T);
	ip_result_i64(&r, "rep", rep);
	ip_result_f64(&r, "energy", (double)sumE / fs / fn);
	ip_result_f64(&r, "abs_m", absM);
	ip_result_f64(&r, "chi", fn * (m2 - absM * absM) / T);
	return ip_result_end(&r);
}
