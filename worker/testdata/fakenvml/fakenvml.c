/* A stand-in for NVIDIA's NVML library (libnvidia-ml.so.1, nvml.dll)
 * with the entry points the worker's two bindings of NVML call, with
 * nvml.h's signatures and struct layouts, for the tests in
 * nvml_purego_test.go. Four GPUs, by index:
 *   0 GPU-volta:  an energy counter (123456 mJ, +1000 at each read),
 *                 250 W; two compute processes (4242 and 100) and two
 *                 graphics ones (777, whose memory NVML cannot tell,
 *                 and 4242 again);
 *   1 GPU-pascal: no energy counter, 90.5 W; 20 compute processes
 *                 (5000..5019, more than a first small buffer holds);
 *                 listing its graphics processes is refused;
 *   2 GPU-blind:  neither energy nor power, nor utilisation: a GPU with
 *                 problems in optional readings;
 *   3 GPU-lost:   its temperature (a required reading) fails: not
 *                 listed.
 * Board power limits (nvmlDeviceGet/SetPowerManagementLimit*, in mW):
 * GPU-volta's may be set by anyone, within 100..300 W (300 W as the
 * driver starts; a limit outside the constraints is INVALID, as NVML
 * answers); GPU-pascal's reads (180 W in 90..200 W) but setting it is
 * refused (NO_PERMISSION, as for a user who is not root or an
 * administrator); GPU-blind has none (NOT_SUPPORTED).
 * fakenvmlSets counts the limits set.
 * Every call but nvmlInit_v2 and nvmlErrorString fails with
 * NVML_ERROR_UNINITIALIZED until nvmlInit_v2 was called. nvmlErrorString
 * gives the driver's texts. Built with -DFAKENVML_V1 it exports only the
 * unversioned process listings (nvmlProcessInfo_v1_t), as drivers
 * before 470 did; otherwise the _v3, _v2 and unversioned ones, as
 * drivers do now. fakenvmlFailCount makes nvmlDeviceGetCount_v2 fail
 * (the driver went away) and fakenvmlInits counts nvmlInit_v2 calls. */
#include <string.h>

#ifdef _WIN32
#define API __declspec(dllexport)
#else
#define API __attribute__((visibility("default")))
#endif

typedef int nvmlReturn_t;
typedef struct dev *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;

enum {
	OK = 0, UNINIT = 1, INVALID = 2, NOT_SUPPORTED = 3, NO_PERMISSION = 4,
	NOT_FOUND = 6, INSUFFICIENT_SIZE = 7, GPU_IS_LOST = 15, UNKNOWN = 999
};

#define MiB (1ULL << 20)
#define NA 0xFFFFFFFFFFFFFFFFULL /* NVML_VALUE_NOT_AVAILABLE */

struct proc { unsigned int pid; unsigned long long used; };

struct dev {
	const char *uuid, *name;
	unsigned long long total, free;
	unsigned int temp, util, mw, major, minor;
	nvmlReturn_t temp_ret, util_ret, power_ret, graphics_ret;
	unsigned int limit, limit_min, limit_max;
	nvmlReturn_t limit_ret, set_ret;
	int ncompute, ngraphics;
	struct proc compute[32], graphics[4];
};

static struct dev devs[] = {
	{"GPU-volta", "Tesla V100-SXM2-16GB", 16160 * MiB, 15000 * MiB, 41, 37, 250000, 7, 0,
	 OK, OK, OK, OK, 300000, 100000, 300000, OK, OK,
	 2, 2, {{4242, 10240 * MiB}, {100, 1024 * MiB}}, {{777, NA}, {4242, 10240 * MiB}}},
	{"GPU-pascal", "NVIDIA GeForce GTX 1080", 8192 * MiB, 8000 * MiB, 55, 0, 90500, 6, 1,
	 OK, OK, OK, NO_PERMISSION, 180000, 90000, 200000, OK, NO_PERMISSION, 20, 0, {{0}}, {{0}}},
	{"GPU-blind", "NVIDIA GeForce GT 710", 2048 * MiB, 2000 * MiB, 30, 0, 0, 3, 5,
	 OK, NOT_SUPPORTED, NOT_SUPPORTED, OK, 0, 0, 0, NOT_SUPPORTED, NOT_SUPPORTED, 0, 0, {{0}}, {{0}}},
	{"GPU-lost", "NVIDIA A100-SXM4-40GB", 40960 * MiB, 40000 * MiB, 0, 0, 0, 8, 0,
	 GPU_IS_LOST, OK, OK, OK, 0, 0, 0, GPU_IS_LOST, GPU_IS_LOST, 0, 0, {{0}}, {{0}}},
};
#define NDEVS (sizeof devs / sizeof devs[0])

static int inited, inits, count_fails, sets;
static unsigned long long volta_mj = 123456;

API int fakenvmlInits(void) { return inits; }
API void fakenvmlFailCount(int fail) { count_fails = fail; }
API int fakenvmlSets(void) { return sets; }

API const char *nvmlErrorString(nvmlReturn_t r) {
	switch (r) {
	case OK: return "Success";
	case UNINIT: return "Uninitialized";
	case INVALID: return "Invalid Argument";
	case NOT_SUPPORTED: return "Not Supported";
	case NO_PERMISSION: return "Insufficient Permissions";
	case NOT_FOUND: return "Not Found";
	case INSUFFICIENT_SIZE: return "Insufficient Size";
	case GPU_IS_LOST: return "GPU is lost";
	}
	return "Unknown Error";
}

API nvmlReturn_t nvmlInit_v2(void) {
	if (devs[1].compute[0].pid == 0)
		for (int i = 0; i < 20; i++) {
			devs[1].compute[i].pid = 5000 + i;
			devs[1].compute[i].used = 64 * MiB;
		}
	inited++;
	inits++;
	return OK;
}

API nvmlReturn_t nvmlShutdown(void) { if (!inited) return UNINIT; inited--; return OK; }

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
	if (!inited) return UNINIT;
	if (!n) return INVALID;
	if (count_fails) return UNKNOWN;
	*n = NDEVS;
	return OK;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
	if (!inited) return UNINIT;
	if (i >= NDEVS || !d) return INVALID;
	*d = &devs[i];
	return OK;
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) {
	if (!inited) return UNINIT;
	if (!uuid || !d) return INVALID;
	for (unsigned i = 0; i < NDEVS; i++)
		if (strcmp(devs[i].uuid, uuid) == 0) { *d = &devs[i]; return OK; }
	return NOT_FOUND;
}

static nvmlReturn_t copy(const char *s, char *buf, unsigned int length) {
	if (!buf) return INVALID;
	if (strlen(s) + 1 > length) return INSUFFICIENT_SIZE;
	strcpy(buf, s);
	return OK;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
	if (!inited) return UNINIT;
	return d ? copy(d->uuid, uuid, length) : INVALID;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
	if (!inited) return UNINIT;
	return d ? copy(d->name, name, length) : INVALID;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	if (!inited) return UNINIT;
	if (!d || !m) return INVALID;
	m->total = d->total;
	m->free = d->free;
	m->used = d->total - d->free;
	return OK;
}

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *t) {
	if (!inited) return UNINIT;
	if (!d || !t || sensor != 0) return INVALID;
	if (d->temp_ret) return d->temp_ret;
	*t = d->temp;
	return OK;
}

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
	if (!inited) return UNINIT;
	if (!d || !u) return INVALID;
	if (d->util_ret) return d->util_ret;
	u->gpu = d->util;
	u->memory = d->util / 2;
	return OK;
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
	if (!inited) return UNINIT;
	if (!d || !major || !minor) return INVALID;
	*major = d->major;
	*minor = d->minor;
	return OK;
}

static int is(nvmlDevice_t d, const char *uuid) { return d && strcmp(d->uuid, uuid) == 0; }

API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
	if (!inited) return UNINIT;
	if (!is(d, "GPU-volta")) return NOT_SUPPORTED;
	*mj = volta_mj;
	volta_mj += 1000;
	return OK;
}

API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
	if (!inited) return UNINIT;
	if (!d || !mw) return INVALID;
	if (d->power_ret) return d->power_ret;
	*mw = d->mw;
	return OK;
}

API nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t d, unsigned int *min, unsigned int *max) {
	if (!inited) return UNINIT;
	if (!d || !min || !max) return INVALID;
	if (d->limit_ret) return d->limit_ret;
	*min = d->limit_min;
	*max = d->limit_max;
	return OK;
}

API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *limit) {
	if (!inited) return UNINIT;
	if (!d || !limit) return INVALID;
	if (d->limit_ret) return d->limit_ret;
	*limit = d->limit;
	return OK;
}

API nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t d, unsigned int limit) {
	if (!inited) return UNINIT;
	if (!d) return INVALID;
	if (d->set_ret) return d->set_ret;
	if (limit < d->limit_min || limit > d->limit_max) return INVALID;
	d->limit = limit;
	sets++;
	return OK;
}

/* list fills infos (elements of size bytes, the v1 or v2 layout) with
 * n processes, as NVML does: NVML_ERROR_INSUFFICIENT_SIZE and the count
 * needed when *count is too small. */
static nvmlReturn_t list(const struct proc *ps, int n, nvmlReturn_t ret, unsigned int *count, void *infos, int v2) {
	if (!inited) return UNINIT;
	if (!count) return INVALID;
	if (ret) return ret;
	if (*count < (unsigned)n) { *count = n; return INSUFFICIENT_SIZE; }
	*count = n;
	if (n > 0 && !infos) return INVALID;
	for (int i = 0; i < n; i++) {
		if (v2) {
			nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)infos + i;
			p->pid = ps[i].pid;
			p->usedGpuMemory = ps[i].used;
			p->gpuInstanceId = p->computeInstanceId = 0xFFFFFFFF;
		} else {
			nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
			p->pid = ps[i].pid;
			p->usedGpuMemory = ps[i].used;
		}
	}
	return OK;
}

#define COMPUTE(d) (d)->compute, (d)->ncompute, OK
#define GRAPHICS(d) (d)->graphics, (d)->ngraphics, (d)->graphics_ret

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *infos) {
	return d ? list(COMPUTE(d), count, infos, 0) : INVALID;
}
API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *infos) {
	return d ? list(GRAPHICS(d), count, infos, 0) : INVALID;
}
#ifndef FAKENVML_V1
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v2_t *infos) {
	return d ? list(COMPUTE(d), count, infos, 1) : INVALID;
}
API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v2_t *infos) {
	return d ? list(GRAPHICS(d), count, infos, 1) : INVALID;
}
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v2_t *infos) {
	return d ? list(COMPUTE(d), count, infos, 1) : INVALID;
}
API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v2_t *infos) {
	return d ? list(GRAPHICS(d), count, infos, 1) : INVALID;
}
#endif
