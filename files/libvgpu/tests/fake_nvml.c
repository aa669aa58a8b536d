/* A fake NVML for the CI tests: one device of FAKE_TOTAL_MIB MiB (default 8192) whose UUID
 * matches the fake CUDA device's, with 100 MiB "used" by someone else on the host. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi.h"

#define EXPORT __attribute__((visibility("default")))

static int inits;
static struct nvmlDevice_st {
    int index;
} dev0;

static unsigned long long total(void)
{
    const char *t = getenv("FAKE_TOTAL_MIB");
    return (unsigned long long)(t ? atol(t) : 8192) << 20;
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    inits++;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlInit(void)
{
    return nvmlInit_v2();
}
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned flags)
{
    (void)flags;
    return nvmlInit_v2();
}
EXPORT nvmlReturn_t nvmlShutdown(void)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    inits--;
    return NVML_SUCCESS;
}
EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
    return r == NVML_SUCCESS ? "Success" : "Fake NVML error";
}
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    if (!n)
        return NVML_ERROR_INVALID_ARGUMENT;
    *n = 1;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    if (i != 0 || !d)
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = &dev0;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *i)
{
    if (d != &dev0 || !i)
        return NVML_ERROR_INVALID_ARGUMENT;
    *i = 0;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned len)
{
    if (d != &dev0 || !buf || len < 41)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(buf, len, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    if (d != &dev0 || !m)
        return NVML_ERROR_INVALID_ARGUMENT;
    m->total = total();
    m->used = 100ULL << 20;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    if (!inits)
        return NVML_ERROR_UNINITIALIZED;
    if (d != &dev0 || !m || m->version != (unsigned)(sizeof(nvmlMemory_v2_t) | 2u << 24))
        return NVML_ERROR_INVALID_ARGUMENT;
    m->total = total();
    m->reserved = 300ULL << 20;
    m->used = 100ULL << 20;
    m->free = m->total - m->used - m->reserved;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned len)
{
    if (!buf || len < 8)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(buf, len, "999.1.2");
    return NVML_SUCCESS;
}

/* One process on the GPU: the caller itself (FAKE_PROC_MIB MiB, default 999), in each layout. */
static nvmlReturn_t running(unsigned *count, void *infos, size_t stride)
{
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < 1 || !infos) {
        *count = 1;
        return infos ? 7 /* NVML_ERROR_INSUFFICIENT_SIZE */ : NVML_SUCCESS;
    }
    memset(infos, 0, stride);
    unsigned pid = (unsigned)getpid();
    const char *m = getenv("FAKE_PROC_MIB");
    unsigned long long used = (unsigned long long)(m ? atol(m) : 999) << 20;
    memcpy(infos, &pid, sizeof pid);
    memcpy((char *)infos + 8, &used, sizeof used);
    *count = 1;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count, void *infos)
{
    return d == &dev0 ? running(count, infos, 24) : NVML_ERROR_INVALID_ARGUMENT;
}
