/* The NVML hooks: memory info reports total = quota and used = the container's use, so that
 * nvidia-smi in the container shows "1200MiB / 3000MiB". Everything else is forwarded. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "hooks.h"
#include "region.h"
#include "vgpu.h"

#include "hooks_nvml.h" /* generated from hooks.def */

#define ENUM_ENTRY(n) N_##n,
enum { VGPU_NVML_HOOKS(ENUM_ENTRY) VGPU_NVML_CALLS(ENUM_ENTRY) N_COUNT };
#define ONE(n) +1
enum { HOOK_COUNT = 0 VGPU_NVML_HOOKS(ONE) };
#define NAME_ENTRY(n) #n,
static const char *const real_names[N_COUNT] = {VGPU_NVML_HOOKS(NAME_ENTRY) VGPU_NVML_CALLS(NAME_ENTRY)};
static void *real_ptr[N_COUNT];
#define REAL(name) ((vgpu_fn_##name *)real_ptr[N_##name])
#define DECLARE_HOOK(n) VGPU_EXPORT vgpu_fn_##n n;
VGPU_NVML_HOOKS(DECLARE_HOOK)

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static void *real_lib;
static struct vgpu_config cfg;
static int cfg_ok;
static struct vgpu_region *region;
static pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER;

static nvmlReturn_t fwd_uninitialised(void)
{
    return NVML_ERROR_UNINITIALIZED;
}
static nvmlReturn_t fwd_not_found(void)
{
    return NVML_ERROR_FUNCTION_NOT_FOUND;
}

static void load_real(void)
{
    char err[800];
    real_lib = vgpu_open_real("libnvidia-ml.so.1", "VGPU_REAL_LIBNVML", err, sizeof err);
    if (!real_lib) {
        vgpu_log(VGPU_ERR, "%s", err);
        return;
    }
    for (int i = 0; i < N_COUNT; i++) {
        real_ptr[i] = dlsym(real_lib, real_names[i]);
        if (!real_ptr[i] && i < HOOK_COUNT && i != N_nvmlErrorString)
            real_ptr[i] = (void *)fwd_not_found;
    }
}

static void load_config(void)
{
    char err[800];
    if (vgpu_config_load(&cfg, err, sizeof err) != 0) {
        fprintf(stderr, "vgpu: invalid configuration: %s; NVML initialisation refused\n", err);
        return;
    }
    cfg_ok = 1;
}

VGPU_HIDDEN void *vgpu_fwd_resolve_nvml(unsigned index)
{
    pthread_once(&load_once, load_real);
    void *p = NULL;
    if (!real_lib)
        p = (void *)fwd_uninitialised;
    else if (!(p = dlsym(real_lib, vgpu_fwd_names_nvml[index])))
        p = (void *)fwd_not_found;
    __atomic_store_n(&vgpu_fwd_table_nvml[index], p, __ATOMIC_RELEASE);
    return p;
}

static nvmlReturn_t ensure_ready(void)
{
    pthread_once(&load_once, load_real);
    if (!real_lib)
        return NVML_ERROR_UNINITIALIZED;
    pthread_once(&config_once, load_config);
    return cfg_ok ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

VGPU_EXPORT nvmlReturn_t nvmlInit(void)
{
    nvmlReturn_t e = ensure_ready();
    return e ? e : REAL(nvmlInit)();
}

VGPU_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    nvmlReturn_t e = ensure_ready();
    return e ? e : REAL(nvmlInit_v2)();
}

VGPU_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t e = ensure_ready();
    return e ? e : REAL(nvmlInitWithFlags)(flags);
}

VGPU_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    pthread_once(&load_once, load_real);
    if (real_ptr[N_nvmlErrorString])
        return REAL(nvmlErrorString)(result);
    return result == NVML_SUCCESS ? "Success" : "NVML error (the real NVML library was not found)";
}

/* The region is opened on first use: nvidia-smi may run before any CUDA process created it. */
static struct vgpu_region *get_region(void)
{
    struct vgpu_region *r = __atomic_load_n(&region, __ATOMIC_ACQUIRE);
    if (r)
        return r;
    pthread_mutex_lock(&region_lock);
    if (!region) {
        char err[800];
        r = vgpu_region_map(cfg.region_dir, cfg.region_dir_explicit, 1, err, sizeof err);
        if (!r)
            vgpu_log(VGPU_WARN, "%s; reporting no use", err);
        __atomic_store_n(&region, r, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&region_lock);
    return region;
}

static void uuid_text(const uint8_t *u, char *out, size_t len)
{
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* NVML device -> CUDA ordinal in this container: by UUID as recorded by the CUDA side; else by
 * position of its NVML index in a numeric CUDA_VISIBLE_DEVICES; else the NVML index. */
static int cuda_ordinal(nvmlDevice_t device, const struct vgpu_region_header *h)
{
    char uuid[96] = "";
    if (real_ptr[N_nvmlDeviceGetUUID]
        && REAL(nvmlDeviceGetUUID)(device, uuid, sizeof uuid)
               == NVML_SUCCESS) {
        for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
            char t[64];
            if (!h->devices[i].uuid_valid)
                continue;
            uuid_text(h->devices[i].uuid, t, sizeof t);
            if (strcmp(t, uuid) == 0)
                return i;
        }
    }
    unsigned idx = 0;
    if (!real_ptr[N_nvmlDeviceGetIndex]
        || REAL(nvmlDeviceGetIndex)(device, &idx) != NVML_SUCCESS)
        return -1;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!cvd || !*cvd)
        return idx < VGPU_MAX_DEVICES ? (int)idx : -1;
    int pos = 0;
    for (const char *p = cvd; *p; pos++) {
        char *end;
        long long v = vgpu_decimal(p, &end);
        if (end == p) {
            /* a UUID list: match by text */
            size_t n = strcspn(p, ",");
            if (uuid[0] && n >= 8 && strncmp(p, uuid, n) == 0)
                return pos < VGPU_MAX_DEVICES ? pos : -1;
            end = (char *)p + n;
        } else if (v == (long long)idx) {
            return pos < VGPU_MAX_DEVICES ? pos : -1;
        }
        p = *end == ',' ? end + 1 : end;
        if (!*end)
            break;
    }
    return -1;
}

/* total, used (allocations) and reserved (contexts) as the container sees them; 0 = leave as is */
static int virtual_view(nvmlDevice_t device, uint64_t real_total, uint64_t *total, uint64_t *used, uint64_t *ctx)
{
    if (!cfg_ok || !cfg.virtual_memory)
        return -1;
    struct vgpu_region *r = get_region();
    struct vgpu_region_header h;
    if (!r || vgpu_region_sample(r, &h) != 0)
        memset(&h, 0, sizeof h);
    int dev = cuda_ordinal(device, &h);
    if (dev < 0 || !cfg.limit[dev])
        return -1;
    *total = cfg.limit[dev] < real_total ? cfg.limit[dev] : real_total;
    *used = h.devices[dev].used_bytes < *total ? h.devices[dev].used_bytes : *total;
    *ctx = h.devices[dev].ctx_bytes < *total - *used ? h.devices[dev].ctx_bytes : *total - *used;
    return 0;
}

VGPU_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *mem)
{
    nvmlReturn_t e = ensure_ready();
    if (e)
        return e;
    nvmlReturn_t rc = REAL(nvmlDeviceGetMemoryInfo)(device, mem);
    uint64_t total, used, ctx;
    if (rc == NVML_SUCCESS && mem && virtual_view(device, mem->total, &total, &used, &ctx) == 0) {
        /* version 1 has no "reserved": contexts count as used */
        mem->total = total;
        mem->used = used + ctx;
        mem->free = total - used - ctx;
    }
    return rc;
}

VGPU_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *mem)
{
    nvmlReturn_t e = ensure_ready();
    if (e)
        return e;
    nvmlReturn_t rc =
        REAL(nvmlDeviceGetMemoryInfo_v2)(device, mem);
    uint64_t total, used, ctx;
    if (rc == NVML_SUCCESS && mem && virtual_view(device, mem->total, &total, &used, &ctx) == 0) {
        mem->total = total;
        mem->used = used;
        mem->reserved = ctx;
        mem->free = total - used - ctx;
    }
    return rc;
}

/* The process list: a process of this container shows what it holds in the container's terms
 * (its allocations and contexts as accounted), like the memory line above it. */
static void virtual_processes(nvmlDevice_t device, unsigned count, void *infos, size_t stride)
{
    if (!cfg_ok || !cfg.virtual_memory || !infos)
        return;
    struct vgpu_region *r = get_region();
    struct vgpu_region_header h;
    if (!r || vgpu_region_sample(r, &h) != 0)
        return;
    int dev = cuda_ordinal(device, &h);
    if (dev < 0 || !cfg.limit[dev])
        return;
    for (unsigned i = 0; i < count; i++) {
        char *e = (char *)infos + i * stride;
        unsigned pid;
        memcpy(&pid, e, sizeof pid);
        for (unsigned k = 0; k < VGPU_MAX_SLOTS; k++) {
            const struct vgpu_region_slot *s = &r->slots[k];
            if (s->state != 1 || s->pid != pid)
                continue;
            unsigned long long used = s->devices[dev].used_bytes + s->devices[dev].ctx_bytes;
            memcpy(e + 8, &used, sizeof used); /* usedGpuMemory follows the padded pid */
            break;
        }
    }
}

#define RUNNING(NAME, STRIDE)                                                                                         \
    VGPU_EXPORT nvmlReturn_t NAME(nvmlDevice_t device, unsigned *count, void *infos)                                  \
    {                                                                                                                 \
        nvmlReturn_t e = ensure_ready();                                                                              \
        if (e)                                                                                                        \
            return e;                                                                                                 \
        nvmlReturn_t rc = REAL(NAME)(device, count, infos);         \
        if (rc == NVML_SUCCESS && count)                                                                              \
            virtual_processes(device, *count, infos, STRIDE);                                                         \
        return rc;                                                                                                    \
    }
/* nvmlProcessInfo_v1_t is {pid, usedGpuMemory}; v2 and v3 add gpuInstanceId, computeInstanceId */
RUNNING(nvmlDeviceGetComputeRunningProcesses, 16)
RUNNING(nvmlDeviceGetComputeRunningProcesses_v2, 24)
RUNNING(nvmlDeviceGetComputeRunningProcesses_v3, 24)

#define HOOK_ADDR(n) (void *)n,
static void *const hook_ptr[HOOK_COUNT] = {VGPU_NVML_HOOKS(HOOK_ADDR)};

VGPU_HIDDEN void *vgpu_nvml_hook_for(void *real)
{
    pthread_once(&load_once, load_real);
    for (int i = 0; real && i < HOOK_COUNT; i++)
        if (real_ptr[i] == real)
            return hook_ptr[i];
    return NULL;
}
