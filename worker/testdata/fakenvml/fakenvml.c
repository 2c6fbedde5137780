/* A stand-in for NVIDIA's libnvidia-ml.so.1 with the entry points the
 * worker's purego binding of NVML calls (nvml.h's signatures), for
 * TestPureNVMLOnAFakeLibrary: three GPUs, as go-nvml's mock gives them
 * to TestGPUListerReadGPUs.
 *   GPU-volta:  an energy counter (123456 mJ, +1000 at each read),
 *               250 W, a power limit of 300 W settable from 100 to 350 W;
 *   GPU-pascal: no energy counter, 90.5 W, its limit not settable here
 *               (NVML_ERROR_NO_PERMISSION, as for a user who is not root);
 *   GPU-blind:  neither reading.
 * Every call but nvmlInit_v2 fails with NVML_ERROR_UNINITIALIZED until
 * nvmlInit_v2 was called. */
#include <string.h>

typedef int nvmlReturn_t;
typedef struct dev { const char *uuid; } *nvmlDevice_t;

enum { OK = 0, UNINIT = 1, INVALID = 2, NOT_SUPPORTED = 3, NO_PERMISSION = 4, NOT_FOUND = 6 };

static struct dev devs[] = {{"GPU-volta"}, {"GPU-pascal"}, {"GPU-blind"}};
static int inited;
static unsigned long long volta_mj = 123456;
static unsigned int volta_limit = 300000;

nvmlReturn_t nvmlInit_v2(void) { inited++; return OK; }
nvmlReturn_t nvmlShutdown(void) { if (!inited) return UNINIT; inited--; return OK; }

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) {
	if (!inited) return UNINIT;
	if (!uuid || !d) return INVALID;
	for (unsigned i = 0; i < sizeof devs / sizeof devs[0]; i++)
		if (strcmp(devs[i].uuid, uuid) == 0) { *d = &devs[i]; return OK; }
	return NOT_FOUND;
}

static int is(nvmlDevice_t d, const char *uuid) { return d && strcmp(d->uuid, uuid) == 0; }

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
	if (!inited) return UNINIT;
	if (!is(d, "GPU-volta")) return NOT_SUPPORTED;
	*mj = volta_mj;
	volta_mj += 1000;
	return OK;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
	if (!inited) return UNINIT;
	if (is(d, "GPU-volta")) { *mw = 250000; return OK; }
	if (is(d, "GPU-pascal")) { *mw = 90500; return OK; }
	return NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *mw) {
	if (!inited) return UNINIT;
	if (is(d, "GPU-volta")) { *mw = volta_limit; return OK; }
	if (is(d, "GPU-pascal")) { *mw = 120000; return OK; }
	return NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t d, unsigned int *lo, unsigned int *hi) {
	if (!inited) return UNINIT;
	if (is(d, "GPU-volta")) { *lo = 100000; *hi = 350000; return OK; }
	if (is(d, "GPU-pascal")) { *lo = 60000; *hi = 120000; return OK; }
	return NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t d, unsigned int mw) {
	if (!inited) return UNINIT;
	if (is(d, "GPU-pascal")) return NO_PERMISSION;
	if (!is(d, "GPU-volta")) return NOT_SUPPORTED;
	if (mw < 100000 || mw > 350000) return INVALID;
	volta_limit = mw;
	return OK;
}
