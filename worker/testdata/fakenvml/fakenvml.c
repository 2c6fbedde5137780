/* A stand-in for NVIDIA's libnvidia-ml.so.1 with the entry points the
 * worker's purego binding of NVML calls (nvml.h's signatures), for
 * TestPureNVMLOnAFakeLibrary: three GPUs, as go-nvml's mock gives them
 * to TestGPUListerReadGPUs.
 *   GPU-volta:  an energy counter (123456 mJ, +1000 at each read), 250 W;
 *   GPU-pascal: no energy counter, 90.5 W;
 *   GPU-blind:  neither reading.
 * Every call but nvmlInit_v2 fails with NVML_ERROR_UNINITIALIZED until
 * nvmlInit_v2 was called. */
#include <string.h>

typedef int nvmlReturn_t;
typedef struct dev { const char *uuid; } *nvmlDevice_t;

enum { OK = 0, UNINIT = 1, INVALID = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6 };

static struct dev devs[] = {{"GPU-volta"}, {"GPU-pascal"}, {"GPU-blind"}};
static int inited;
static unsigned long long volta_mj = 123456;

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
