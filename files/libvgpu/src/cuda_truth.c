/* The GPU's own count (design.md, "The invariant"): what NVML says each process holds on a
 * device, read through the real NVML (never our own NVML hooks, which show the container's
 * terms). NVML reports pids in the caller's pid namespace, so inside a container it lists the
 * container's processes by the pids the region's slots have. Read only near the limit, before a
 * refusal, and around calls whose cost is measured (cuda_measure.c). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_shim.h"

typedef nvmlReturn_t nvml_init_fn(void);
typedef nvmlReturn_t nvml_by_uuid_fn(const char *uuid, nvmlDevice_t *device);
typedef nvmlReturn_t nvml_procs_fn(nvmlDevice_t device, unsigned *count, void *infos);
typedef const char *nvml_error_fn(nvmlReturn_t rc);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int usable; /* 1: NVML answers; cleared when it cannot tell what a process holds */
static nvml_by_uuid_fn *by_uuid;
static nvml_procs_fn *procs;
static size_t stride; /* nvmlProcessInfo_t: 24 bytes (v2, v3), 16 (v1) */
static nvmlDevice_t handles[VGPU_MAX_DEVICES];
static pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;

void vgpu_truth_unusable(const char *why)
{
    if (__atomic_exchange_n(&usable, 0, __ATOMIC_RELAXED) || !why)
        vgpu_log(VGPU_INFO,
                 "no per-process figure from NVML (%s): contexts are charged the context reserve, module loads and "
                 "limits nothing, and admission trusts the ledger alone",
                 why ? why : "unknown");
}

static void load(void)
{
    char err[800];
    /* The soname first, as the program would load it (our NVML shim in LD_LIBRARY_PATH mode):
     * once the real library is in the process, a later dlopen("libnvidia-ml.so.1") would get it
     * by its soname and the program would see the GPU past its quota. */
    dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    void *lib = vgpu_open_real("libnvidia-ml.so.1", "VGPU_REAL_LIBNVML", err, sizeof err);
    if (!lib) {
        usable = 1;
        vgpu_truth_unusable("the NVML library is not in this container");
        return;
    }
    nvml_init_fn *init = (nvml_init_fn *)dlsym(lib, "nvmlInit_v2");
    by_uuid = (nvml_by_uuid_fn *)dlsym(lib, "nvmlDeviceGetHandleByUUID");
    static const char *const names[] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                                        "nvmlDeviceGetComputeRunningProcesses_v2",
                                        "nvmlDeviceGetComputeRunningProcesses"};
    for (int i = 0; i < 3 && !procs; i++) {
        procs = (nvml_procs_fn *)dlsym(lib, names[i]);
        stride = i < 2 ? 24 : 16;
    }
    usable = 1;
    nvmlReturn_t rc = init && by_uuid && procs ? init() : NVML_ERROR_FUNCTION_NOT_FOUND;
    if (rc != NVML_SUCCESS) {
        char why[64];
        snprintf(why, sizeof why, "nvmlInit_v2 answered %d", rc);
        vgpu_truth_unusable(why);
    }
}

int vgpu_truth_usable(void)
{
    pthread_once(&once, load);
    return __atomic_load_n(&usable, __ATOMIC_RELAXED);
}

/* NVML's handle of CUDA ordinal dev, by its UUID. */
static nvmlDevice_t handle_of(int dev)
{
    pthread_mutex_lock(&handle_lock);
    nvmlDevice_t h = handles[dev];
    if (!h) {
        CUdevice d;
        CUuuid u;
        vgpu_fn_cuDeviceGetUuid *get_uuid =
            REAL(cuDeviceGetUuid_v2) ? REAL(cuDeviceGetUuid_v2) : REAL(cuDeviceGetUuid);
        if (get_uuid && REAL(cuDeviceGet) && REAL(cuDeviceGet)(&d, dev) == CUDA_SUCCESS
            && get_uuid(&u, d) == CUDA_SUCCESS) {
            const unsigned char *b = (const unsigned char *)u.bytes;
            char text[64];
            snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                     b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
            if (by_uuid(text, &h) != NVML_SUCCESS)
                h = NULL;
        }
        handles[dev] = h;
    }
    pthread_mutex_unlock(&handle_lock);
    return h;
}

int vgpu_truth_read(int dev, struct vgpu_truth *out)
{
    if (dev < 0 || dev >= VGPU_MAX_DEVICES || !vgpu_truth_usable())
        return -1;
    nvmlDevice_t h = handle_of(dev);
    if (!h)
        return -1;
    unsigned char rows[VGPU_TRUTH_ROWS * 24];
    unsigned n = VGPU_TRUTH_ROWS;
    if (procs(h, &n, rows) != NVML_SUCCESS)
        return -1;
    out->n = n < VGPU_TRUTH_ROWS ? n : VGPU_TRUTH_ROWS;
    for (unsigned i = 0; i < out->n; i++) {
        unsigned pid;
        unsigned long long used;
        memcpy(&pid, rows + i * stride, sizeof pid);
        memcpy(&used, rows + i * stride + 8, sizeof used); /* usedGpuMemory follows the padded pid */
        out->pid[i] = pid;
        /* NVML_VALUE_NOT_AVAILABLE (all ones) when the driver cannot tell: nothing known */
        out->bytes[i] = used == ~0ULL ? 0 : used;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    out->ns = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    return 0;
}

int vgpu_truth_self(const struct vgpu_truth *t, uint64_t *bytes)
{
    uint32_t me = (uint32_t)getpid();
    for (unsigned i = 0; i < t->n; i++)
        if (t->pid[i] == me) {
            *bytes = t->bytes[i];
            return 1;
        }
    *bytes = 0;
    return 0;
}
