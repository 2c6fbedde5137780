/*
 * idlepool_task.h: the idlepool task ABI for job programs written in C.
 *
 * A job program is a WASI preview 1 command. It reads one JSON object, the
 * task, from stdin, writes exactly one JSON object, the result, to stdout
 * and exits 0. On bad input it writes one line "error: ..." to stderr and
 * exits 1 (65, IP_EXIT_DATA, when the task's input data is at fault). The
 * task looks like
 *
 *   {"index":7,"inputs":{},"job":"<64 hex>","params":{"samples":1000000},
 *    "seed":13587311887558109768,"seed_decimal":"...","seed_hex":"..."}
 *
 * This header is the C side of what examples/internal/task is for Go:
 *
 *   ip_task t;
 *   if (ip_task_read(&t) != 0) return 1;        // stdin, the whole task
 *   int64_t n;
 *   if (ip_param_i64(&t, "samples", &n) != 0) ...  // 0 ok, IP_MISSING, IP_BAD
 *   ... compute with t.seed ...
 *   ip_result r;
 *   ip_result_begin(&r);
 *   ip_result_i64(&r, "inside", inside);
 *   ip_result_f64(&r, "energy", e);             // formatted as Go's encoding/json
 *   return ip_result_end(&r);                   // writes it, returns the exit status
 *
 * Numbers are written exactly as Go's encoding/json writes them (the
 * shortest decimal that reads back to the same double, in the same
 * notation), so a program that computes the same doubles as a Go program
 * writes the same bytes. It also holds Go's math/rand/v2 PCG generator
 * (ip_pcg), so C programs can draw the same numbers as Go programs.
 *
 * Single header, no state outside the structs, standard C11 plus
 * unsigned __int128 (clang and gcc): builds natively and for wasm32-wasi
 * (clang --target=wasm32-wasi, Debian's wasi-libc). examples/build-guest.sh
 * has the flags.
 */
#ifndef IDLEPOOL_TASK_H
#define IDLEPOOL_TASK_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* IP_EXIT_DATA is the exit status that says the task's input data is wrong,
 * not the program: EX_DATAERR of BSD's sysexits.h. */
#define IP_EXIT_DATA 65
/* IP_MAX_TASK bounds the task JSON read from stdin, in bytes (the worker's
 * own bound on a task's stdin is smaller). */
#define IP_MAX_TASK (1 << 20)
/* IP_MISSING and IP_BAD are what ip_param_* return for an absent parameter
 * (out untouched) and one of the wrong type (an error is on stderr). */
#define IP_MISSING 1
#define IP_BAD (-1)

/* ip_task is one task as read by ip_task_read. */
typedef struct {
	char *json;        /* the whole task, NUL-terminated; owned */
	size_t len;        /* bytes of json */
	uint64_t seed;     /* the task's own random seed */
	int64_t index;     /* the task's 0-based index in its job */
	const char *params;/* the params object's first byte, or NULL */
	size_t params_len; /* its length in bytes */
} ip_task;

/* ip_fail writes "error: <message>\n" to stderr and returns 1, the exit
 * status of a failed task. */
static inline int ip_fail(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	fputs("error: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 1;
}

/* The JSON scanner: p points into a NUL-terminated buffer; each function
 * returns the position after what it read, or NULL when the text is not
 * JSON. */
static inline const char *ip__ws(const char *p) {
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
	return p;
}

static inline const char *ip__string(const char *p) {
	if (*p != '"') return NULL;
	for (p++; *p != '"'; p++) {
		if ((unsigned char)*p < 0x20) return NULL;
		if (*p == '\\') {
			p++;
			if (*p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f') || (p[i] >= 'A' && p[i] <= 'F'))) return NULL;
				p += 4;
			} else if (!strchr("\"\\/bfnrt", *p) || *p == 0) {
				return NULL;
			}
		}
	}
	return p + 1;
}

static inline const char *ip__number(const char *p) {
	if (*p == '-') p++;
	if (*p == '0') p++;
	else if (*p >= '1' && *p <= '9') while (*p >= '0' && *p <= '9') p++;
	else return NULL;
	if (*p == '.') {
		p++;
		if (!(*p >= '0' && *p <= '9')) return NULL;
		while (*p >= '0' && *p <= '9') p++;
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-') p++;
		if (!(*p >= '0' && *p <= '9')) return NULL;
		while (*p >= '0' && *p <= '9') p++;
	}
	return p;
}

static inline const char *ip__value(const char *p, int depth) {
	if (depth > 64) return NULL;
	p = ip__ws(p);
	switch (*p) {
	case '"': return ip__string(p);
	case '{': case '[': {
		char close = *p == '{' ? '}' : ']';
		int object = *p == '{';
		p = ip__ws(p + 1);
		if (*p == close) return p + 1;
		for (;;) {
			if (object) {
				p = ip__string(ip__ws(p));
				if (!p) return NULL;
				p = ip__ws(p);
				if (*p++ != ':') return NULL;
			}
			p = ip__value(p, depth + 1);
			if (!p) return NULL;
			p = ip__ws(p);
			if (*p == close) return p + 1;
			if (*p++ != ',') return NULL;
		}
	}
	case 't': return strncmp(p, "true", 4) == 0 ? p + 4 : NULL;
	case 'f': return strncmp(p, "false", 5) == 0 ? p + 5 : NULL;
	case 'n': return strncmp(p, "null", 4) == 0 ? p + 4 : NULL;
	default: return ip__number(p);
	}
}

/* ip__member finds the last member named key (no escapes in it) of the
 * object at obj (a valid object, as ip__value checked) and returns its
 * value's first byte, or NULL. Go's encoding/json also keeps the last. */
static inline const char *ip__member(const char *obj, const char *key) {
	const char *found = NULL;
	size_t klen = strlen(key);
	const char *p = ip__ws(ip__ws(obj) + 1);
	if (*p == '}') return NULL;
	for (;;) {
		const char *k = ip__ws(p);
		const char *end = ip__string(k);
		p = ip__ws(ip__ws(end) + 1); /* after ':' */
		if ((size_t)(end - k - 2) == klen && memcmp(k + 1, key, klen) == 0) found = p;
		p = ip__ws(ip__value(p, 0));
		if (*p == '}') return found;
		p++;
	}
}

/* ip__u64 reads a JSON number that is a whole number in [0, 2^64) exactly;
 * it returns 0, or IP_BAD for anything else. */
static inline int ip__u64(const char *p, uint64_t *out) {
	const char *end = ip__number(p);
	if (!end || *p == '-' || end - p > 20) return IP_BAD;
	uint64_t v = 0;
	for (const char *q = p; q < end; q++) {
		if (*q < '0' || *q > '9') return IP_BAD;
		uint64_t d = (uint64_t)(*q - '0');
		if (v > (UINT64_MAX - d) / 10) return IP_BAD;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

/* ip_task_read reads the whole task from stdin into t. It returns 0, or 1
 * after writing why to stderr: stdin is not one JSON object, or its seed is
 * not a whole number in [0, 2^64). Release t with ip_task_free (or let the
 * program exit). */
static inline int ip_task_read(ip_task *t) {
	memset(t, 0, sizeof *t);
	size_t cap = 4096;
	char *buf = malloc(cap);
	if (!buf) return ip_fail("decode task: out of memory");
	size_t n = 0, got;
	while ((got = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
		n += got;
		if (n == cap - 1) {
			if (cap >= IP_MAX_TASK) { free(buf); return ip_fail("decode task: more than %d bytes", IP_MAX_TASK); }
			char *bigger = realloc(buf, cap * 2);
			if (!bigger) { free(buf); return ip_fail("decode task: out of memory"); }
			buf = bigger, cap *= 2;
		}
	}
	buf[n] = 0;
	if (strlen(buf) != n) { free(buf); return ip_fail("decode task: NUL byte in the task"); }
	t->json = buf, t->len = n;
	const char *obj = ip__ws(buf);
	const char *end = *obj == '{' ? ip__value(obj, 0) : NULL;
	if (!end) { free(buf); t->json = NULL; return ip_fail("decode task: stdin is not one JSON object"); }
	if (*ip__ws(end) != 0) { free(buf); t->json = NULL; return ip_fail("decode task: trailing data after the task object"); }
	const char *v = ip__member(obj, "seed");
	if (v && strncmp(v, "null", 4) != 0 && ip__u64(v, &t->seed) != 0) {
		free(buf); t->json = NULL;
		return ip_fail("decode task: seed is not a whole number in [0, 2^64)");
	}
	v = ip__member(obj, "index");
	uint64_t index = 0;
	if (v && strncmp(v, "null", 4) != 0 && (ip__u64(v, &index) != 0 || index > INT64_MAX)) {
		free(buf); t->json = NULL;
		return ip_fail("decode task: index is not a whole number");
	}
	t->index = (int64_t)index;
	v = ip__member(obj, "params");
	if (v && *v == '{') {
		t->params = v;
		t->params_len = (size_t)(ip__value(v, 0) - v);
	} else if (v && strncmp(v, "null", 4) != 0) {
		free(buf); t->json = NULL;
		return ip_fail("decode task: params is not an object");
	}
	return 0;
}

/* ip_task_free releases what ip_task_read allocated. */
static inline void ip_task_free(ip_task *t) {
	free(t->json);
	memset(t, 0, sizeof *t);
}

/* ip_param_i64 reads params.key as a whole number. It returns 0 and sets
 * *out; IP_MISSING when the task has no such parameter (or it is null),
 * leaving *out; IP_BAD after writing to stderr when the parameter is not a
 * whole number within int64. */
static inline int ip_param_i64(const ip_task *t, const char *key, int64_t *out) {
	const char *v = t->params ? ip__member(t->params, key) : NULL;
	if (!v || strncmp(v, "null", 4) == 0) return IP_MISSING;
	int neg = *v == '-';
	uint64_t u;
	if (ip__u64(v + neg, &u) != 0 || u > (uint64_t)INT64_MAX + (uint64_t)neg) {
		ip_fail("decode params: params.%s is not a whole number within int64", key);
		return IP_BAD;
	}
	*out = neg ? (int64_t)(0 - u) : (int64_t)u;
	return 0;
}

/* ip_param_f64 reads params.key as a double, rounded correctly as Go's
 * strconv.ParseFloat rounds it. Returns as ip_param_i64. */
static inline int ip_param_f64(const ip_task *t, const char *key, double *out) {
	const char *v = t->params ? ip__member(t->params, key) : NULL;
	if (!v || strncmp(v, "null", 4) == 0) return IP_MISSING;
	const char *end = ip__number(v);
	char tmp[512];
	if (!end || (size_t)(end - v) >= sizeof tmp) {
		ip_fail("decode params: params.%s is not a number", key);
		return IP_BAD;
	}
	memcpy(tmp, v, (size_t)(end - v));
	tmp[end - v] = 0;
	double d = strtod(tmp, NULL);
	if (isinf(d)) {
		ip_fail("decode params: params.%s is out of the range of a double", key);
		return IP_BAD;
	}
	*out = d;
	return 0;
}

/* ip_result collects one result object. */
typedef struct {
	char buf[8192];
	size_t n;
	int err; /* set when a value could not be written */
} ip_result;

static inline void ip__put(ip_result *r, const char *s) {
	size_t l = strlen(s);
	if (r->n + l >= sizeof r->buf) { r->err = 1; return; }
	memcpy(r->buf + r->n, s, l);
	r->n += l;
	r->buf[r->n] = 0;
}

static inline void ip__key(ip_result *r, const char *key) {
	ip__put(r, r->n > 1 ? ",\"" : "\"");
	ip__put(r, key); /* keys are the program's own: plain ASCII, no escapes */
	ip__put(r, "\":");
}

/* ip_result_begin starts an empty result object. */
static inline void ip_result_begin(ip_result *r) {
	r->n = 0, r->err = 0;
	ip__put(r, "{");
}

/* ip_result_i64 adds the member key: v. */
static inline void ip_result_i64(ip_result *r, const char *key, int64_t v) {
	char tmp[32];
	snprintf(tmp, sizeof tmp, "%lld", (long long)v);
	ip__key(r, key);
	ip__put(r, tmp);
}

/* ip__roundtrips reports whether the decimal digits[0..n) times 10^exp10
 * (digits read as d.ddd) reads back as v. */
static inline int ip__roundtrips(double v, const char *digits, int n, int exp10) {
	char tmp[48];
	snprintf(tmp, sizeof tmp, "%c.%.*se%d", digits[0], n - 1, digits + 1, exp10);
	return strtod(tmp, NULL) == v;
}

/* ip_format_f64 writes v (finite) into out (at least 32 bytes) as Go's
 * encoding/json does: strconv.FormatFloat(v, 'f', -1, 64), or 'e' with
 * the exponent's leading zero dropped when |v| < 1e-6 or |v| >= 1e21. The
 * digits are the shortest that read back as v and, among those, the
 * closest to v (Go's rule). It returns 0, or -1 for NaN and infinities,
 * which JSON cannot hold. */
static inline int ip_format_f64(double v, char *out) {
	if (!isfinite(v)) return -1;
	char *o = out;
	if (signbit(v)) *o++ = '-', v = -v;
	if (v == 0) { strcpy(o, "0"); return 0; }
	char digits[24];
	int n = 0, exp10 = 0;
	for (int prec = 1; prec <= 17; prec++) {
		char tmp[48];
		snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
		n = 0;
		for (char *p = tmp; *p != 'e'; p++)
			if (*p != '.') digits[n++] = *p;
		exp10 = atoi(strchr(tmp, 'e') + 1);
		if (ip__roundtrips(v, digits, n, exp10)) break;
		/* Beside a power of two the interval that reads back as v is
		 * wider above v than below: the nearest n-digit decimal may miss
		 * it where the next one up is inside. */
		char up[24];
		int e = exp10, i = n - 1;
		memcpy(up, digits, (size_t)n);
		while (i >= 0 && up[i] == '9') up[i--] = '0';
		if (i >= 0) up[i]++;
		else { up[0] = '1'; e++; }
		if (ip__roundtrips(v, up, n, e)) { memcpy(digits, up, (size_t)n); exp10 = e; break; }
	}
	while (n > 1 && digits[n - 1] == '0') n--;
	if (v < 1e-6 || v >= 1e21) {
		*o++ = digits[0];
		if (n > 1) {
			*o++ = '.';
			memcpy(o, digits + 1, (size_t)n - 1);
			o += n - 1;
		}
		/* Go writes at least two exponent digits and encoding/json
		 * drops the 0 of e-07: e-7, e-10, e+21. */
		sprintf(o, "e%c%d", exp10 < 0 ? '-' : '+', abs(exp10));
		return 0;
	}
	if (exp10 < 0) {
		*o++ = '0', *o++ = '.';
		for (int i = 0; i < -exp10 - 1; i++) *o++ = '0';
		memcpy(o, digits, (size_t)n);
		o += n;
	} else {
		for (int i = 0; i <= exp10; i++) *o++ = i < n ? digits[i] : '0';
		if (n > exp10 + 1) {
			*o++ = '.';
			memcpy(o, digits + exp10 + 1, (size_t)(n - exp10 - 1));
			o += n - exp10 - 1;
		}
	}
	*o = 0;
	return 0;
}

/* ip_result_f64 adds the member key: v, formatted by ip_format_f64. A NaN
 * or infinity makes ip_result_end fail, as it makes Go's encoding/json
 * fail. */
static inline void ip_result_f64(ip_result *r, const char *key, double v) {
	char tmp[40];
	if (ip_format_f64(v, tmp) != 0) {
		ip_fail("encode result: %s is %g, which JSON cannot hold", key, v);
		r->err = 1;
		return;
	}
	ip__key(r, key);
	ip__put(r, tmp);
}

/* ip_result_end closes the object and writes it and a newline to stdout.
 * It returns the exit status for main: 0, or 1 when a value could not be
 * written (stderr says which) or stdout failed. */
static inline int ip_result_end(ip_result *r) {
	ip__put(r, "}\n");
	if (r->err) return ip_fail("encode result: a value could not be written");
	if (fwrite(r->buf, 1, r->n, stdout) != r->n || fflush(stdout) != 0)
		return ip_fail("write result: stdout failed");
	return 0;
}

/* ip_splitmix is SplitMix64 (Steele, Lea and Flood, "Fast splittable
 * pseudorandom number generators", OOPSLA 2014), the examples' package
 * examples/internal/splitmix: ip_splitmix_u64 draws the same numbers as
 * its Source.Uint64 for the same seed. It needs only 64-bit multiplies,
 * which WebAssembly has, so it runs there about as fast as natively. */
typedef struct {
	uint64_t state;
} ip_splitmix;

/* ip_splitmix_new is splitmix.New(seed). */
static inline ip_splitmix ip_splitmix_new(uint64_t seed) {
	ip_splitmix s = {seed};
	return s;
}

/* ip_splitmix_u64 steps the state by the golden gamma and returns its
 * mix: 64 bits. */
static inline uint64_t ip_splitmix_u64(ip_splitmix *s) {
	uint64_t z = (s->state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* ip_pcg is Go's math/rand/v2 PCG: a 128-bit LCG with the DXSM output
 * function, seeded as rand.NewPCG(seed1, seed2) is (hi = seed1,
 * lo = seed2). Its ip_pcg_u64 draws the same numbers as PCG.Uint64. */
typedef struct {
	uint64_t hi, lo;
} ip_pcg;

/* ip_pcg_new is rand.NewPCG(seed1, seed2). */
static inline ip_pcg ip_pcg_new(uint64_t seed1, uint64_t seed2) {
	ip_pcg p = {seed1, seed2};
	return p;
}

/* ip__mul64 is Go's bits.Mul64: the 128-bit product of x and y. */
static inline uint64_t ip__mul64(uint64_t x, uint64_t y, uint64_t *lo) {
#if defined(__wasm__)
	/* wasm32 has no 128-bit multiply; unsigned __int128 becomes a call
	 * to compiler-rt's __multi3. Four 32-bit products inline are faster. */
	uint64_t x0 = (uint32_t)x, x1 = x >> 32, y0 = (uint32_t)y, y1 = y >> 32;
	uint64_t w0 = x0 * y0;
	uint64_t t = x1 * y0 + (w0 >> 32);
	uint64_t w1 = (uint32_t)t, w2 = t >> 32;
	w1 += x0 * y1;
	*lo = x * y;
	return x1 * y1 + w2 + (w1 >> 32);
#else
	unsigned __int128 p = (unsigned __int128)x * y;
	*lo = (uint64_t)p;
	return (uint64_t)(p >> 64);
#endif
}

/* ip_pcg_u64 is PCG.Uint64: it steps the state and returns 64 bits. */
static inline uint64_t ip_pcg_u64(ip_pcg *p) {
	const uint64_t mulHi = 2549297995355413924ULL, mulLo = 4865540595714422341ULL;
	const uint64_t incHi = 6364136223846793005ULL, incLo = 1442695040888963407ULL;
	uint64_t lo, hi = ip__mul64(p->lo, mulLo, &lo);
	hi += p->hi * mulLo + p->lo * mulHi;
	uint64_t l2 = lo + incLo;
	hi += incHi + (l2 < lo);
	p->lo = l2, p->hi = hi;
	hi ^= hi >> 32;
	hi *= 0xda942042e4dd58b5ULL;
	hi ^= hi >> 48;
	hi *= (l2 | 1);
	return hi;
}

#endif /* IDLEPOOL_TASK_H */
